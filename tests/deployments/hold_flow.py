"""A test-only flow that takes a host's serving slot the way the serve stage does, and leaves marker
files that prove which runs held their slots at the same time.

It holds ``roost-serve-<host>`` (``tasks.host_slot.host_slot``: ``strict=True``) instead of serving a
vLLM per run; the mutual-exclusion and two-worker tests deploy it next to ``land``. In the directory
``meet_dir`` (one per test), a run labelled ``me``:

1. writes ``arrived-<me>`` before it asks for the slot;
2. once it holds the slot, creates ``slot-<host>`` exclusively (finding it there means another run
   of the same host holds the slot too: reported as ``clash``) and writes ``entered-<me>``;
3. keeps the slot until every marker named in ``until`` exists (``met``; False after
   ``timeout_s``, a guard against a hung test, not a measurement), then ``linger_s`` more;
4. removes ``slot-<host>`` and releases the slot.

Two runs that each wait for the other's ``entered-`` marker both meet only if both held their
slots at once: the first of the two to see the other's marker saw it while both were inside (the
other leaves only after seeing the first's marker, which comes later). A run that waits for a peer's
``arrived-`` marker proves the peer was running, asking for the slot, while this run held it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
from prefect import flow, task

from tasks.host_slot import host_slot

POLL_S = 0.2


def _all_exist(meet: Path, names: list[str]) -> bool:
    return all((meet / n).exists() for n in names)


@task(name="hold-slot")
def hold(host: str, me: str, meet_dir: str, until: list[str], linger_s: float, timeout_s: float) -> dict[str, Any]:
    """Inside the host's slot: mark it held, wait for the peers' markers, release the marker."""
    meet = Path(meet_dir)
    clash = None
    try:
        fd = os.open(meet / f"slot-{host}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.write(fd, me.encode())
        os.close(fd)
    except FileExistsError:
        clash = (meet / f"slot-{host}").read_text()
    (meet / f"entered-{me}").touch()
    deadline = time.monotonic() + timeout_s
    while not (met := _all_exist(meet, until)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    time.sleep(linger_s)
    if clash is None:
        (meet / f"slot-{host}").unlink()
    return {"met": met, "clash": clash}


@flow(name="roost-test-hold", flow_run_name="hold-{host}-{me}", persist_result=True)
def hold_host(host: str = "cpu", me: str = "a", meet_dir: str = "", until: list[str] | None = None,
              linger_s: float = 0.0, timeout_s: float = 300.0) -> dict[str, Any]:
    """Hold ``host``'s serving slot until the markers in ``until`` exist; returns what it saw and who ran it."""
    (Path(meet_dir) / f"arrived-{me}").touch()
    with host_slot(host):
        seen = hold(host, me, meet_dir, until or [], linger_s, timeout_s)
    proc = psutil.Process(os.getpid())
    return {"host": host, "me": me, "pid": proc.pid, "ancestors": [p.pid for p in proc.parents()], **seen}
