"""A test-only flow for the warm fork server's test (``test_warm_fork.py``): says which process ran it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from prefect import flow


@flow(name="roost-test-warm", flow_run_name="warm-{me}", persist_result=True)
def warm_probe(me: str = "a", pid_file: str = "", sleep_s: float = 0.0) -> dict[str, Any]:
    """Write this process's pid to ``pid_file`` (when given), sleep, return the pid and the parent's."""
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))
    time.sleep(sleep_s)
    return {"me": me, "pid": os.getpid(), "ppid": os.getppid()}
