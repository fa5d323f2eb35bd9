"""Helpers for the deployment tests: real Prefect workers, ``roost setup`` through the CLI, waiting
for a flow run. (A uniquely named module: ``conftest`` is ambiguous across test directories.)

Workers are ``prefect worker start`` subprocesses (their own session, so a test can kill one with
everything it started, as when a Spark dies); they inherit this process's environment, so
PREFECT_API_URL, ROOST_HOME and ROOST_RESULTS_DIR point at the session's server and directories.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prefect.client.orchestration import get_client

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POOL = "roost-spark"
HOSTS = "spark,cpu"
ZOMBIE_AFTER_S = 60  # heartbeats every 30 s: two missed ones mark a run crashed
HOLD_ENTRYPOINT = "tests/deployments/hold_flow.py:hold_host"


@dataclass
class Worker:
    """A running ``prefect worker start`` subprocess."""

    name: str
    queue: str
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


def worker_online(name: str, timeout_s: float = 120, pool: str = POOL) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with get_client(sync_client=True) as client:
            if any(w.name == name and w.status == "ONLINE" for w in client.read_workers_for_work_pool(pool)):
                return
        time.sleep(1)
    raise AssertionError(f"worker {name} did not come online in {timeout_s} s")


def run_setup(*args: str, executable: bool = False) -> dict[str, Any]:
    """``roost setup --json``: the parsed report.

    By default through the CLI's own command in this process (typer's runner: the same command, options,
    output and exit code, without paying the 5 s of importing Prefect and the flows again for each of the
    ~20 calls of the session); ``executable=True`` runs the installed ``roost`` (the first setup does,
    and the tests of the command line's own behaviour)."""
    argv = ["setup", "--pool", POOL, "--hosts", HOSTS, "--zombie-after", str(ZOMBIE_AFTER_S), "--json", *args]
    if executable:
        out = subprocess.run([str(BIN / "roost"), *argv], capture_output=True, text=True, timeout=600, cwd=REPO)
        assert out.returncode == 0, out.stderr[-3000:]
        report: dict[str, Any] = json.loads(out.stdout)
        return report
    from typer.testing import CliRunner

    from roost.cli import app

    res = CliRunner().invoke(app, argv, prog_name="roost")
    assert res.exit_code == 0, (res.stderr[-3000:], res.exception)
    in_process: dict[str, Any] = json.loads(res.stdout)
    return in_process


def wait_final(flow_run_id: Any, timeout_s: float) -> Any:
    """Poll the API until the flow run is in a final state; the flow run."""
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            fr = client.read_flow_run(flow_run_id)
            if fr.state is not None and fr.state.is_final():
                return fr
            if time.monotonic() > deadline:
                raise AssertionError(f"flow run {fr.name} still {fr.state.name if fr.state else '?'} after {timeout_s} s")
            time.sleep(1)
