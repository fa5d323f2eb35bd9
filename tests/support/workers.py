"""Real Prefect process workers for the tests (``prefect worker start``), and waiting for the flow runs they run.

A worker runs in a session of its own, so a test can kill it with everything it started (as when a Spark
dies); it polls its queues every second, so a run is picked up at once. It inherits this process's
environment (or the one given): ``PREFECT_API_URL``, ``ROOST_HOME`` and ``ROOST_RESULTS_DIR`` point at the
caller's server and directories.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prefect.client.orchestration import get_client

from deployments.deploy import DEFAULT_POOL
from support.cli import PREFECT
from support.wait import poll, wait_for

REPO = Path(__file__).resolve().parents[2]
FAST_POLLING = {"PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "5",
                "PREFECT_WORKER_HEARTBEAT_SECONDS": "5"}
"""A worker that asks for work every second (Prefect's default: 10 s) and beats every 5 s."""


@dataclass
class Worker:
    """A running ``prefect worker start`` subprocess."""

    name: str
    queue: str  # its work queues, comma-separated
    proc: subprocess.Popen[bytes]
    log: Path

    def descendants(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """SIGTERM the worker's process group, SIGKILL after 30 s."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def kill_hard(self, spare_pgids: set[int]) -> list[int]:
        """SIGKILL the worker and every process it started, except those in ``spare_pgids`` (vLLM's own
        session survives a dead worker, which is what a crashed run leaves behind). Returns the pids killed."""
        victims = [self.proc.pid, *self.descendants()]
        killed = []
        for pid in victims:
            try:
                if os.getpgid(pid) in spare_pgids:
                    continue
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                continue
        self.proc.wait(timeout=10)
        return killed


def start_worker(name: str, queues: Sequence[str], *, log: Path, pool: str = DEFAULT_POOL, env: Mapping[str, str] | None = None,
                 cwd: Path = REPO) -> Worker:
    """``prefect worker start --pool POOL --name NAME --type process --work-queue Q...`` (``roost setup``'s pool
    unless told; output appended to ``log``) in ``env`` (default: this process's) with :data:`FAST_POLLING`;
    returned once the server lists it online."""
    args = [PREFECT, "worker", "start", "--pool", pool, "--name", name, "--type", "process"]
    for queue in queues:
        args += ["--work-queue", queue]
    with log.open("ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                env={**(os.environ if env is None else env), **FAST_POLLING})
    worker = Worker(name=name, queue=",".join(queues), proc=proc, log=log)
    try:
        worker_online(name, pool=pool)
    except BaseException:
        worker.stop()
        raise
    return worker


def worker_online(name: str, *, pool: str = DEFAULT_POOL, timeout_s: float = 120) -> None:
    """Wait until the server lists worker ``name`` of ``pool`` online."""
    def online() -> bool:
        with get_client(sync_client=True) as client:
            return any(w.name == name and w.status == "ONLINE" for w in client.read_workers_for_work_pool(pool))

    wait_for(f"worker {name} online", online, timeout_s=timeout_s, every_s=1)


def wait_final(flow_run_id: Any, timeout_s: float) -> Any:
    """Poll the API until the flow run is in a final state; the flow run."""
    with get_client(sync_client=True) as client:
        fr = poll(lambda: client.read_flow_run(flow_run_id), lambda fr: fr.state is not None and fr.state.is_final(),
                  timeout_s=timeout_s, every_s=1)
    if fr.state is None or not fr.state.is_final():
        raise AssertionError(f"flow run {fr.name} still {fr.state.name if fr.state else '?'} after {timeout_s} s")
    return fr
