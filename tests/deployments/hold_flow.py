"""A test-only flow that takes a host's serving slot the way the serve stage does.

It holds ``roost-serve-<host>`` (``tasks.serve.host_slot``: ``strict=True``) around one task that
sleeps, so the task run's start and end times in the API are the time the slot was held. The
mutual-exclusion and two-worker tests deploy it next to ``land`` instead of serving a vLLM per run.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil
from prefect import flow, task

from tasks.serve import host_slot


@task(name="hold-slot")
def hold(seconds: float) -> None:
    time.sleep(seconds)


@flow(name="roost-test-hold", flow_run_name="hold-{host}", persist_result=True)
def hold_host(host: str = "cpu", seconds: float = 5.0) -> dict[str, Any]:
    """Hold ``host``'s serving slot for ``seconds``; returns who ran it (pid and its ancestors)."""
    with host_slot(host):
        hold(seconds)
    me = psutil.Process(os.getpid())
    return {"host": host, "pid": me.pid, "ancestors": [p.pid for p in me.parents()]}
