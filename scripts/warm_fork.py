"""A warm fork server for a process worker's flow runs (issue 38; opt-in: ``roost setup --warm-fork``).

    <venv python> scripts/warm_fork.py serve [MODULE ...]   beside the worker: its environment, user and cwd
    <venv python> -S scripts/warm_fork.py client ARGS...     the work pool's job command (stdlib only)

The server imports Prefect and MODULEs (default ``flows.land``: roost, pyarrow, numpy...) once,
single-threaded, then waits on a Unix socket (``$ROOST_WARM_FORK_SOCKET``, default
``/tmp/roost-warm-fork-<uid>/<checkout hash>.sock``; both ends check the other runs as the same user).
The client, which the worker starts in place of ``python -m prefect.engine``, sends its environment,
cwd, arguments and stdin/stdout/stderr (SCM_RIGHTS) and gets a child forked from the server: the child
takes the three fds, the environment (Prefect's settings and logging re-read from it:
``refresh_global_settings_context``, ``setup_logging``) and the cwd, puts itself in its own process
group and runs ``prefect.engine`` as ``__main__``. The client relays SIGTERM/SIGINT/SIGHUP to the child
and exits with its status (dying of the same signal when it was killed), so the worker's cancellation
and crash detection see what they would see of the engine itself; a client killed outright (the
worker's hard kill) closes its connection and the server kills the child's process group.

The client runs the stock command, ``python -m prefect.engine`` with the same arguments (one line on
stderr says why), when there is no server, the socket refuses, the server dies mid-handshake, or the
server answers "stale": at import it recorded (mtime, size) of every module file it loaded from this
checkout (roost/, flows/, tasks/, blocks/, deployments/, scripts/) and of the venv's ``prefect``
package directory, and re-checks them on each request (a stat per file). Stale, it stops listening,
waits for the runs it forked, and exits; its systemd unit (``scripts/install-worker --warm-fork``)
starts it again on the new code. Its forked runs do not depend on it: the unit stops only the server
(``KillMode=process``), and a client whose server went away waits for its engine to exit.

What is read at import comes from the server's environment, which is the worker's (same
EnvironmentFile): roost's modules read none (``roost.settings`` reads at call time; checked by
``tests/scripts/test_warm_fork_client.py``). Prefect's settings and logging are re-read in each child. The
third-party knobs read at import (numpy's ``NUMPY_MADVISE_HUGEPAGE``, tqdm's ``TQDM_*``, pydantic's
``PYDANTIC_DISABLE_PLUGINS``, ``TYPER_USE_RICH``) keep the worker's values: a deployment's ``env`` job
variable setting one of them applies only to cold runs.

Outside the product packages: it copies whole environments between processes (as the worker does) and
reads no roost setting, and its client must start without roost or site-packages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any, NoReturn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WATCHED = ("roost", "flows", "tasks", "blocks", "deployments", "scripts")
"""The checkout's directories whose loaded module files the server watches."""
SOCKET_VAR = "ROOST_WARM_FORK_SOCKET"
DEFAULT_PREIMPORT = ["flows.land"]
PREFECT_MODULES = ["prefect", "prefect.engine", "prefect.flow_engine", "prefect.flows",
                   "prefect.deployments.steps.core", "prefect._internal.metrics"]
STALE = 0
"""The server's answer instead of a child's pid: its code is stale, run the engine cold."""
_UCRED = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid


def socket_path() -> str:
    """``$ROOST_WARM_FORK_SOCKET``, or a path private to this user and checkout."""
    path = os.environ.get(SOCKET_VAR, "")
    if path:
        return path
    tag = hashlib.sha256(REPO.encode()).hexdigest()[:12]
    return f"/tmp/roost-warm-fork-{os.getuid()}/{tag}.sock"


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of ``conn`` runs as this process's user."""
    _, uid, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return bool(uid == os.getuid())


# --- the server -----------------------------------------------------------------------------------


def _stat(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_mtime_ns, st.st_size)


def snapshot() -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of every loaded module file under the watched directories, and of Prefect's package dir."""
    roots = tuple(os.path.join(REPO, d) + os.sep for d in WATCHED)
    files = {os.path.abspath(f) for m in list(sys.modules.values())
             if isinstance(f := getattr(m, "__file__", None), str)}
    out = {f: _stat(f) for f in sorted(files) if f.startswith(roots)}
    prefect = sys.modules.get("prefect")
    if prefect is not None and prefect.__file__:
        pkg = os.path.dirname(os.path.abspath(prefect.__file__))
        out[pkg] = _stat(pkg)
    return out


def changed(snap: dict[str, tuple[int, int]]) -> str | None:
    """The first recorded file whose (mtime, size) differs now, or None."""
    return next((path for path, sig in snap.items() if _stat(path) != sig), None)


def _listen(path: str) -> socket.socket:
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    if os.stat(parent).st_uid != os.getuid():
        raise SystemExit(f"warm fork server: {parent} is not this user's")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        lsock.bind(path)
    finally:
        os.umask(old)
    lsock.listen(64)
    return lsock


class Server:
    """The loop: accept a client and fork its run, reap children, kill the group of a run whose client died."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.snap = snapshot()
        self.lsock: socket.socket | None = _listen(path)
        self.inode = os.stat(path).st_ino
        self.wake_r, self.wake_w = socket.socketpair()
        for s in (self.wake_r, self.wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self.wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.lsock, selectors.EVENT_READ, "listen")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "sigchld")
        self.children: dict[int, socket.socket] = {}

    def run(self) -> None:
        """Serve until stale and every forked run has exited."""
        while self.lsock is not None or self.children:
            for key, _ in self.sel.select():
                if key.data == "listen":
                    self._accept()
                elif key.data == "sigchld":
                    with contextlib.suppress(BlockingIOError):
                        while self.wake_r.recv(4096):
                            pass
                    self._reap()
                else:
                    self._client_event(key.fileobj, int(key.data))  # type: ignore[arg-type]

    def _accept(self) -> None:
        assert self.lsock is not None
        conn, _ = self.lsock.accept()
        try:
            if not _same_user(conn):
                raise OSError("another user")
            (n,) = struct.unpack("!I", _recv_exact(conn, 4))
            msg, fds, _, _ = socket.recv_fds(conn, n, 3)
            req = json.loads(msg + (_recv_exact(conn, n - len(msg)) if len(msg) < n else b""))
        except (EOFError, OSError, ValueError):
            conn.close()
            return
        if (what := changed(self.snap)) is not None:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!i", STALE))
            conn.close()
            _log(f"{what} changed since import: stale; exiting once its {len(self.children)} run(s) end")
            self._stop_listening()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # never returns
            _child(req, fds, [s for s in (self.lsock, self.wake_r, self.wake_w, conn, *self.children.values())
                              if s is not None], self.sel)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        _log(f"forked {pid} for {' '.join(req['argv'])}")
        with contextlib.suppress(OSError):
            conn.sendall(struct.pack("!i", pid))
        self.sel.register(conn, selectors.EVENT_READ, pid)

    def _stop_listening(self) -> None:
        """New clients get no answer from here (they run cold) until the server restarts."""
        if self.lsock is None:
            return
        self.sel.unregister(self.lsock)
        self.lsock.close()
        self.lsock = None
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            with contextlib.suppress(KeyError, ValueError):  # its client went away first
                self.sel.unregister(conn)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
            conn.close()

    def _client_event(self, conn: socket.socket, pid: int) -> None:
        """A client's connection is readable only when it closed: the client was killed; so is its run."""
        try:
            gone = not conn.recv(1)
        except OSError:
            gone = True
        if gone:
            self.sel.unregister(conn)
            _log(f"the client of {pid} went away: killing its process group")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _log(line: str) -> None:
    print(f"warm fork server: {line}", file=sys.stderr, flush=True)


def serve(path: str, preimport: list[str]) -> None:
    """Import Prefect and ``preimport``, then fork a flow-run process per client until stale."""
    import importlib
    import threading

    t0 = time.perf_counter()
    sys.path.insert(0, REPO)
    for mod in [*PREFECT_MODULES, *preimport]:
        importlib.import_module(mod)
    if threading.active_count() != 1:  # a fork copies one thread: locks others hold would stay held
        raise SystemExit(f"warm fork server: threads after the imports: {threading.enumerate()}")
    server = Server(path)
    _log(f"pid {os.getpid()} imported {', '.join(preimport) or 'Prefect only'} in {time.perf_counter() - t0:.2f} s "
         f"({len(server.snap)} files watched); listening on {path}")
    server.run()
    _log("exiting (stale)")


def _child(req: dict[str, Any], fds: list[int], close: list[socket.socket], sel: Any) -> NoReturn:
    """The flow-run process: the client's fds, environment and cwd, then ``prefect.engine`` as ``__main__``."""
    code: int | str = 1
    try:
        sel.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for s in close:
            s.close()
        os.setpgid(0, 0)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.path[0] = req["cwd"]  # as ``python -m`` puts its cwd first
        sys.argv = ["prefect.engine", *req["argv"]]
        # Prefect read its settings and configured logging at import, from the server's environment
        import runpy
        import warnings

        from prefect.context import refresh_global_settings_context
        from prefect.logging.configuration import setup_logging

        refresh_global_settings_context()
        setup_logging(incremental=False)
        warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                                category=RuntimeWarning)
        code = 0
        try:
            runpy.run_module("prefect.engine", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.exit(code)  # a normal exit: atexit handlers (Prefect's log and event shippers) flush


# --- the client (stdlib only) ---------------------------------------------------------------------


class _Relay:
    """SIGTERM/SIGINT/SIGHUP go to the forked engine once its pid is known; until then they wait."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.child = 0
        self.pending: list[int] = []
        for sig in self.SIGNALS:
            signal.signal(sig, self._relay)

    def _relay(self, sig: int, _frame: object) -> None:
        if self.child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, sig)
        else:
            self.pending.append(sig)

    def start(self, child: int) -> None:
        self.child = child
        for sig in self.pending:
            os.kill(child, sig)

    def cold(self, argv: list[str], why: str) -> NoReturn:
        """Exec the stock job command (or die of a signal that came before it could start)."""
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        if self.pending:
            os.kill(os.getpid(), self.pending[0])
        print(f"warm fork client: {why}; running python -m prefect.engine", file=sys.stderr, flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "prefect.engine", *argv])


def _handshake(path: str, argv: list[str]) -> tuple[socket.socket, int]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if not _same_user(s):
        raise OSError(f"{path} is served by another user")
    msg = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "argv": argv}).encode()
    s.sendall(struct.pack("!I", len(msg)))
    socket.send_fds(s, [msg], [0, 1, 2])
    (child,) = struct.unpack("!i", _recv_exact(s, 4))
    return s, child


def client(argv: list[str]) -> NoReturn:
    """Have the server fork this flow run's process; relay signals; exit as it exited."""
    path = socket_path()
    relay = _Relay()
    try:
        s, child = _handshake(path, argv)
    except (OSError, EOFError, ValueError) as exc:
        relay.cold(argv, f"no warm fork server at {path} ({type(exc).__name__}: {exc})")
    if child == STALE:
        relay.cold(argv, "the warm fork server's code is stale (it restarts)")
    relay.start(child)
    try:
        (code,) = struct.unpack("!i", _recv_exact(s, 4))
    except (OSError, EOFError):  # the server went away: wait for the engine itself, its status unknown
        print(f"warm fork client: the server went away; waiting for {child}", file=sys.stderr, flush=True)
        while _alive(child):
            time.sleep(1)
        code = 1
    if code < 0:  # killed by a signal: die of it too, as the worker would have seen the engine die
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(args: list[str]) -> None:
    if args[:1] == ["serve"]:
        serve(socket_path(), args[1:] or DEFAULT_PREIMPORT)
    elif args[:1] == ["client"]:
        client(args[1:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
