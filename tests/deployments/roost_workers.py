"""Helpers for the deployment tests: the pool and hosts ``roost setup`` registers, and ``roost setup``
through the CLI. (A uniquely named module: ``conftest`` is ambiguous across test directories.) The workers
and the wait for a flow run are ``support.workers`` (named here too, for the modules that import them from here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.cli import BIN, roost_exe
from support.workers import Worker, wait_final, worker_online

from deployments.deploy import DEFAULT_POOL

__all__ = ["BIN", "HOLD_ENTRYPOINT", "HOSTS", "POOL", "REPO", "ZOMBIE_AFTER_S", "Worker", "run_setup", "wait_final",
           "worker_online"]

REPO = Path(__file__).resolve().parents[2]
POOL = DEFAULT_POOL  # "roost"
HOSTS = "spark,cpu"
ZOMBIE_AFTER_S = 60  # heartbeats every 30 s: two missed ones mark a run crashed
HOLD_ENTRYPOINT = "tests/deployments/hold_flow.py:hold_host"


def run_setup(*args: str, executable: bool = False) -> dict[str, Any]:
    """``roost setup --json``: the parsed report.

    By default through the CLI's own command in this process (typer's runner: the same command, options,
    output and exit code, without paying the 5 s of importing Prefect and the flows again for each of the
    ~20 calls of the session); ``executable=True`` runs the installed ``roost`` (the first setup does,
    and the tests of the command line's own behaviour)."""
    argv = ["setup", "--pool", POOL, "--hosts", HOSTS, "--zombie-after", str(ZOMBIE_AFTER_S), "--json", *args]
    if executable:
        out = roost_exe(*argv, timeout=600, cwd=REPO)
        assert out.returncode == 0, out.stderr[-3000:]
        report: dict[str, Any] = json.loads(out.stdout)
        return report
    from typer.testing import CliRunner

    from roost.cli import app

    res = CliRunner().invoke(app, argv, prog_name="roost")
    assert res.exit_code == 0, (res.stderr[-3000:], res.exception)
    in_process: dict[str, Any] = json.loads(res.stdout)
    return in_process
