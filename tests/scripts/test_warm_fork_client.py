"""scripts/warm_fork.py without Prefect: the client's fallbacks to the stock command (no server, a refused
socket, a server gone mid-handshake, a stale server), its exit status relayed from the server's answer, the
server's staleness check; and that importing the land flow reads no environment in roost's own modules
(what the server imports once, in the worker's environment). The real worker and server:
tests/deployments/test_warm_fork.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "warm_fork.py"
FAKE_ENGINE = "import sys\nprint('COLD', *sys.argv[1:])\nsys.exit(7)\n"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("warm_fork_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rwf") as d:  # short: a Unix socket path has ~100 bytes
        yield Path(d)


def _client(sock: Path, fake: Path) -> subprocess.CompletedProcess[str]:
    """The client as the worker runs it, the cold ``prefect.engine`` a fake that prints COLD and exits 7."""
    (fake / "prefect").mkdir(exist_ok=True)
    (fake / "prefect" / "__init__.py").write_text("")
    (fake / "prefect" / "engine.py").write_text(FAKE_ENGINE)
    env = {**os.environ, "ROOST_WARM_FORK_SOCKET": str(sock), "PYTHONPATH": str(fake)}
    return subprocess.run([sys.executable, "-S", str(SCRIPT), "client", "--flow-run", "x"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def _fake_server(sock: Path, answer: Callable[[socket.socket], None]) -> threading.Thread:
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(str(sock))
    lsock.listen(1)

    def serve() -> None:
        conn, _ = lsock.accept()
        with conn, lsock:
            answer(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def _read_request(conn: socket.socket) -> dict[str, object]:
    (n,) = struct.unpack("!I", conn.recv(4, socket.MSG_WAITALL))
    msg, fds, _, _ = socket.recv_fds(conn, n, 3)
    for fd in fds:
        os.close(fd)
    while len(msg) < n:
        msg += conn.recv(n - len(msg))
    request: dict[str, object] = json.loads(msg)
    return request


def _assert_cold(r: subprocess.CompletedProcess[str], why: str) -> None:
    assert (r.returncode, r.stdout) == (7, "COLD --flow-run x\n"), (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("warm fork client: ") and why in r.stderr, r.stderr


def test_no_server_runs_the_stock_command(sock_dir: Path, tmp_path: Path) -> None:
    _assert_cold(_client(sock_dir / "none.sock", tmp_path), "no warm fork server at")


def test_a_refused_socket_runs_the_stock_command(sock_dir: Path, tmp_path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock_dir / "dead.sock"))  # bound, never listening: the file of a server that died
    s.close()
    _assert_cold(_client(sock_dir / "dead.sock", tmp_path), "ConnectionRefusedError")


def test_a_server_gone_mid_handshake_runs_the_stock_command(sock_dir: Path, tmp_path: Path) -> None:
    t = _fake_server(sock_dir / "s.sock", lambda conn: None)  # accepts, then closes
    _assert_cold(_client(sock_dir / "s.sock", tmp_path), "no warm fork server at")
    t.join(10)


def test_a_stale_server_runs_the_stock_command(sock_dir: Path, tmp_path: Path) -> None:
    seen: list[dict[str, object]] = []

    def stale(conn: socket.socket) -> None:
        seen.append(_read_request(conn))
        conn.sendall(struct.pack("!i", 0))

    t = _fake_server(sock_dir / "s.sock", stale)
    _assert_cold(_client(sock_dir / "s.sock", tmp_path), "stale")
    t.join(10)
    (req,) = seen
    assert req["argv"] == ["--flow-run", "x"] and req["cwd"] == os.getcwd()
    assert isinstance(req["env"], dict) and req["env"]["ROOST_WARM_FORK_SOCKET"] == str(sock_dir / "s.sock")


@pytest.mark.parametrize("status", [0, 3, -15])
def test_the_client_exits_as_the_forked_engine_did(sock_dir: Path, tmp_path: Path, status: int) -> None:
    def forked(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(struct.pack("!i", 2**31 - 1) + struct.pack("!i", status))  # a pid, then its exit status

    t = _fake_server(sock_dir / "s.sock", forked)
    r = _client(sock_dir / "s.sock", tmp_path)
    t.join(10)
    assert (r.returncode, r.stdout, r.stderr) == (status, "", "")


def test_staleness_is_a_changed_mtime_or_size(tmp_path: Path) -> None:
    wf = _module()
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    snap = {str(f): wf._stat(str(f))}
    assert wf.changed(snap) is None
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert wf.changed(snap) == str(f)
    f.unlink()
    assert wf.changed(snap) == str(f)


def test_the_snapshot_covers_the_checkout_modules_and_prefect() -> None:
    code = (f"import runpy, prefect, flows.land; wf = runpy.run_path({str(SCRIPT)!r}); "
            "import json; print(json.dumps(sorted(wf['snapshot']())))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    files = json.loads(r.stdout.splitlines()[-1])
    assert str(ROOT / "flows" / "land.py") in files and str(ROOT / "roost" / "settings.py") in files
    assert any(f.endswith(os.sep + "prefect") for f in files)
    assert not [f for f in files if "site-packages" in f and not f.endswith("prefect")]


PROBE = """
import json, os, sys, traceback
import prefect, prefect.engine, prefect.flow_engine
roots = tuple(os.path.join(sys.argv[1], d) + os.sep for d in ("roost", "flows", "tasks", "blocks", "deployments"))
reads = []
cls = type(os.environ)
get = cls.__getitem__
def spy(self, key):
    stack = [fr for fr in traceback.extract_stack()[:-1] if not fr.filename.endswith("os.py")
             and not fr.filename.startswith("<frozen")]
    # roost's own read: the reading frame is roost's, or a roost.settings reader (every reader's way in) is running
    if stack[-1].filename.startswith(roots) or any(fr.filename == roots[0] + "settings.py" and fr.name != "<module>"
                                                   for fr in stack):
        reads.append(f"{stack[-1].filename}:{stack[-1].lineno} {key}")
    return get(self, key)
cls.__getitem__ = spy
import flows.land
cls.__getitem__ = get
print(json.dumps(reads))
"""


def test_importing_the_land_flow_reads_no_environment_in_roost() -> None:
    """What the warm fork server imports once, in its own (the worker's) environment: roost's modules read
    none of it at import, so a forked run sees its own environment wherever roost reads one."""
    r = subprocess.run([sys.executable, "-c", PROBE, str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, check=True)
    assert json.loads(r.stdout.splitlines()[-1]) == []


def test_the_pool_command_roost_setup_writes_runs_the_client(tmp_path: Path) -> None:
    """``roost setup --warm-fork``'s job command is this checkout's client, which falls back where no server runs."""
    from deployments.setup import engine_command

    cold, warm = engine_command(), engine_command(warm_fork=True)
    assert cold.endswith(" -m prefect.engine") and warm == f"{shlex.quote(sys.executable)} -S {SCRIPT} client"
    (tmp_path / "prefect").mkdir()
    (tmp_path / "prefect" / "__init__.py").write_text("")
    (tmp_path / "prefect" / "engine.py").write_text(FAKE_ENGINE)
    env = {**os.environ, "ROOST_WARM_FORK_SOCKET": str(tmp_path / "none.sock"), "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([*shlex.split(warm), "--flow-run", "x"], env=env, capture_output=True, text=True, timeout=60,
                       check=False)
    _assert_cold(r, "no warm fork server at")


def test_warm_fork_on_a_checkout_without_the_client_is_one_line_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from roost.cli import app

    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "land.py").write_text("")
    res = CliRunner().invoke(app, ["setup", "--warm-fork", "--source", str(tmp_path)], prog_name="roost")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "--warm-fork: the checkout has no scripts/warm_fork.py" in res.stderr


def test_the_flag_reaches_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """``roost setup --warm-fork`` asks deployments.setup for the warm command; without it, the stock one."""
    from typer.testing import CliRunner

    import deployments.setup
    from roost.cli import app

    seen: list[bool] = []

    def fake_setup(*args: object, warm_fork: bool = False, **kwargs: object) -> object:
        seen.append(warm_fork)
        raise SystemExit(0)

    monkeypatch.setattr(deployments.setup, "setup", fake_setup)
    for argv in (["setup", "--warm-fork"], ["setup"]):
        CliRunner().invoke(app, argv, prog_name="roost")
    assert seen == [True, False]
