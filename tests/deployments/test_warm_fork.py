"""The warm fork server (scripts/warm_fork.py, ``roost setup --warm-fork``) with a real worker: a run forks from
the server; SIGKILL of the forked engine, or of the worker's child (the client, whose run the server then kills),
is a Crashed run, and the next run forks again; a module file of the
checkout changed since the server imported it makes the run go cold and the server exit; with no server the
client runs the stock command and the run completes.

Its own work pool (the warm client as job command, as ``roost setup --warm-fork`` sets it) and a trivial flow
(``warm_flow.py``), so no other test's runs go through it. Nothing here is timed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.deployments.runner import RunnerDeployment
from prefect.runner.storage import LocalStorage
from support import workers
from support.wait import wait_for
from support.workers import wait_final

from deployments.setup import _work_pool, engine_command

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
POOL = "roost-test-warm-fork"
QUEUE = "warm"
DEPLOYMENT = "roost-test-warm/warm"
RUN_TIMEOUT_S = 300  # guards against a hung test
WATCHED = REPO / "flows" / "__init__.py"
"""A module file the server loaded (importing flows.land): its mtime is moved and put back."""


@pytest.fixture(scope="module")
def warm_pool(prefect_api: str) -> Iterator[None]:
    with get_client(sync_client=True) as client:
        item = _work_pool(client, POOL, engine_command(warm_fork=True))
    assert "scripts/warm_fork.py client" in item.detail, item
    dep: Any = RunnerDeployment.from_storage(storage=LocalStorage(str(REPO)), name=QUEUE, work_pool_name=POOL,
                                             entrypoint="tests/deployments/warm_flow.py:warm_probe",
                                             work_queue_name=QUEUE, _sync=True)  # type: ignore[call-arg]
    dep.apply()
    yield
    with get_client(sync_client=True) as client, contextlib.suppress(Exception):
        client.delete_deployment(client.read_deployment_by_name(DEPLOYMENT).id)
        client.delete_work_pool(POOL)


@pytest.fixture
def sock_env() -> Iterator[dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="rwf") as d:  # short: a Unix socket path has ~100 bytes
        yield {**os.environ, "ROOST_WARM_FORK_SOCKET": f"{d}/warm.sock"}


def _serve(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen([sys.executable, str(REPO / "scripts" / "warm_fork.py"), "serve"], cwd=REPO, env=env,
                              stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_for("the warm fork server listening", lambda: os.path.exists(env["ROOST_WARM_FORK_SOCKET"])
             or server.poll() is not None, timeout_s=180, every_s=0.2)
    assert server.poll() is None, log.read_text()
    return server


def _run(me: str, **params: Any) -> Any:
    fr: Any = run_deployment(DEPLOYMENT, timeout=0, parameters={"me": me, **params})
    return wait_final(fr.id, RUN_TIMEOUT_S)


def _result(fr: Any) -> dict[str, Any]:
    assert fr.state.is_completed(), fr.state
    value: dict[str, Any] = fr.state.result()
    return value


def test_runs_fork_from_the_warm_server_and_fall_back_cold(warm_pool: None, sock_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    server = _serve(sock_env, tmp_path / "warm.log")
    worker = workers.start_worker("warm-worker", [QUEUE], pool=POOL, log=tmp_path / "worker.log", env=sock_env)
    try:
        # a run killed outright: the forked engine (the server's child) dies of SIGKILL, the run is Crashed
        pid_file = tmp_path / "pid"
        fr: Any = run_deployment(DEPLOYMENT, timeout=0, parameters={"me": "killed", "pid_file": str(pid_file),
                                                                "sleep_s": RUN_TIMEOUT_S})
        wait_for("the run's process", lambda: pid_file.exists() and pid_file.read_text(), timeout_s=RUN_TIMEOUT_S)
        pid = int(pid_file.read_text())
        assert psutil.Process(pid).ppid() == server.pid
        os.kill(pid, signal.SIGKILL)
        killed = wait_final(fr.id, RUN_TIMEOUT_S)
        assert killed.state.is_crashed(), killed.state

        # the worker's child (the client) killed outright: the server kills the run's process group, Crashed
        pid_file.unlink()
        fr = run_deployment(DEPLOYMENT, timeout=0, parameters={"me": "orphaned", "pid_file": str(pid_file),
                                                                "sleep_s": RUN_TIMEOUT_S})
        wait_for("the run's process", lambda: pid_file.exists() and pid_file.read_text(), timeout_s=RUN_TIMEOUT_S)
        engine = psutil.Process(int(pid_file.read_text()))
        (client,) = [p for p in psutil.Process(worker.proc.pid).children() if "client" in p.cmdline()]
        client.kill()
        wait_for("the engine killed by the server", lambda: not engine.is_running(), timeout_s=60, every_s=0.2)
        orphaned = wait_final(fr.id, RUN_TIMEOUT_S)
        assert orphaned.state.is_crashed(), orphaned.state

        # the next run forks from the server too, and completes
        warm = _result(_run("warm"))
        assert warm["ppid"] == server.pid
        assert f"forked {warm['pid']}" in (tmp_path / "warm.log").read_text()

        # a module file the server imported changed: the run goes cold (the worker's child), the server exits
        st = WATCHED.stat()
        os.utime(WATCHED, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        try:
            stale = _result(_run("stale"))
            assert server.wait(timeout=60) == 0
        finally:
            os.utime(WATCHED, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert stale["ppid"] == worker.proc.pid
        assert "flows/__init__.py changed since import: stale" in (tmp_path / "warm.log").read_text()

        # no server: the client runs the stock command
        cold = _result(_run("cold"))
        assert cold["ppid"] == worker.proc.pid
        out = (tmp_path / "worker.log").read_text()
        assert "warm fork client: the warm fork server's code is stale" in out
        assert "warm fork client: no warm fork server at" in out
        assert not os.path.exists(sock_env["ROOST_WARM_FORK_SOCKET"])
    finally:
        worker.stop()
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
