"""A throwaway real PostgreSQL server for tests (no mock, no container): ``initdb`` into a fresh
directory, ``postgres`` on a free loopback port, one or more databases, then stopped and deleted.

Use it as a context manager, for a module or a whole session::

    with PostgresServer(tmp_dir) as pg:          # pg.url("db") / pg.create_database("other")
        ...
    with postgres_server(tmp_dir) as url:        # postgresql://roost@127.0.0.1:PORT/roost
        ...

The server listens on 127.0.0.1 only (TCP, ``trust`` authentication for the loopback address and the
socket, which lives in the server's own directory), with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` off: a crash loses it, which a test's server may. It starts in ~1-2 s.

PostgreSQL refuses to run as root: under root, ``initdb`` and ``postgres`` run as the ``postgres``
system user (``nobody`` when there is none) through ``setpriv``, which execs (the process we start is
the postmaster itself, so a signal reaches it), and the directory is handed to that user. The
binaries come from ``pg_config --bindir``, else ``/usr/lib/postgresql/<newest>/bin``; when there are
none, :class:`PostgresNotInstalled` says to ``apt-get install postgresql``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from roost.net import free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; the socket's name ".s.PGSQL.NNNNN" goes after the dir
_RUNNING: set[PostgresServer] = set()


class PostgresNotInstalled(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``postgres`` and ``psql`` (a PostgresNotInstalled when none)."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for c in candidates:
        if all((c / exe).is_file() and os.access(c / exe, os.X_OK) for exe in ("initdb", "postgres", "psql")):
            return c
    raise PostgresNotInstalled(
        "PostgreSQL is not installed (no initdb/postgres under `pg_config --bindir` or /usr/lib/postgresql/*/bin): "
        "install it with `apt-get install postgresql` (or set ROOST_TESTS_NO_POSTGRES=1 to skip these tests)")


def _run_as_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and there is neither a `postgres` nor a `nobody` user to run PostgreSQL as")


def _reachable(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` can traverse every directory down to ``path`` (mode bits only; no ACLs)."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    p = path.resolve()
    for d in [*reversed(p.parents), p]:
        st = d.stat()
        if st.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


class PostgresServer:
    """A PostgreSQL server of its own under ``base_dir`` (a fresh subdirectory, deleted by :meth:`stop`).

    ``superuser`` is the role ``initdb`` creates (every database URL names it; no password).
    :meth:`start` returns once the server accepts connections and ``database`` (when given) exists.
    """

    def __init__(self, base_dir: Path | str | None = None, *, superuser: str = "roost",
                 database: str | None = "roost", port: int | None = None) -> None:
        if not _NAME.fullmatch(superuser):
            raise ValueError(f"superuser {superuser!r}: letters, digits and _ only")
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.gettempdir())
        self.superuser = superuser
        self.database = database
        self.requested_port = port
        self.bindir = find_bindir()
        self.os_user = _run_as_user()
        self.host = "127.0.0.1"
        self.port = 0
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_s = 0.0

    # --- paths and commands -------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        assert self.dir is not None, "the server is not started"
        return self.dir / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.dir is not None, "the server is not started"
        return self.dir / "sock"

    @property
    def log_path(self) -> Path:
        assert self.dir is not None, "the server is not started"
        return self.dir / "postgres.log"

    def url(self, database: str | None = None, *, driver: str = "postgresql") -> str:
        """``postgresql://USER@127.0.0.1:PORT/DB`` (``database`` defaults to the one made at start)."""
        name = database or self.database or "postgres"
        return f"{driver}://{self.superuser}@{self.host}:{self.port}/{name}"

    def _as_user(self, argv: list[str]) -> list[str]:
        if self.os_user is None:
            return argv
        return ["setpriv", f"--reuid={self.os_user.pw_uid}", f"--regid={self.os_user.pw_gid}", "--init-groups", "--", *argv]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        if self.os_user is not None:
            env.update(HOME=str(self.dir), USER=self.os_user.pw_name, LOGNAME=self.os_user.pw_name)
        return env

    # --- lifecycle ----------------------------------------------------------------------------

    def _make_dir(self) -> Path:
        parent = self.base_dir
        parent.mkdir(parents=True, exist_ok=True)
        if self.os_user is not None and not _reachable(parent, self.os_user):
            parent = Path(tempfile.gettempdir())  # e.g. pytest's 0700 tmp dirs: the server's user cannot enter them
        d = Path(tempfile.mkdtemp(prefix="pg-", dir=parent))
        if len(str(d / "sock")) > _SOCKET_PATH_MAX:
            shutil.rmtree(d)
            d = Path(tempfile.mkdtemp(prefix="roost-pg-"))
        if self.os_user is not None:
            os.chown(d, self.os_user.pw_uid, self.os_user.pw_gid)
        return d

    def start(self) -> PostgresServer:
        if self.proc is not None:
            return self
        t0 = time.monotonic()
        self.dir = self._make_dir()
        try:
            self._initdb()
            for attempt in range(5):  # another process may take the free port before postgres binds it
                self.port = self.requested_port or free_port(self.host)
                if self._launch():
                    break
                if self.requested_port or attempt == 4:
                    raise RuntimeError(f"postgres did not start on {self.host}:{self.port}:\n{self._log_tail()}")
            if self.database:
                self.create_database(self.database)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - t0
        _RUNNING.add(self)
        return self

    def _initdb(self) -> None:
        assert self.dir is not None
        argv = [str(self.bindir / "initdb"), "-D", str(self.data_dir), "-U", self.superuser, "--auth=trust",
                "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"]
        done = subprocess.run(self._as_user(argv), cwd=self.dir, env=self._env(), capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        # Loopback and the socket only, no password: a test's server, reachable from this machine alone.
        (self.data_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\n")
        self.socket_dir.mkdir()
        if self.os_user is not None:
            os.chown(self.socket_dir, self.os_user.pw_uid, self.os_user.pw_gid)

    def _launch(self) -> bool:
        """Start the postmaster on ``self.port``; True once it accepts connections, False when the
        port was taken (raises on any other failure)."""
        argv = [str(self.bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                "-c", f"listen_addresses={self.host}", "-c", f"unix_socket_directories={self.socket_dir}",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning",
                "-c", "logging_collector=off"]
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(self._as_user(argv), cwd=self.dir, env=self._env(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._log_tail()
                self.proc = None
                if "could not bind" in tail or "Address already in use" in tail:
                    return False
                raise RuntimeError(f"postgres exited at start:\n{tail}")
            if self._ready():
                return True
            time.sleep(0.05)
        raise RuntimeError(f"postgres did not accept connections within {START_TIMEOUT_S:g} s:\n{self._log_tail()}")

    def _ready(self) -> bool:
        argv = [str(self.bindir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port), "-U", self.superuser,
                "-d", "postgres", "-t", "1"]
        return subprocess.run(argv, env=self._env(), check=False, timeout=10).returncode == 0

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with psql as the superuser; its output (unaligned, tuples only)."""
        argv = [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.host,
                "-p", str(self.port), "-U", self.superuser, "-d", database, "-c", sql]
        done = subprocess.run(argv, env=self._env(), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"psql {sql!r} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def create_database(self, name: str) -> str:
        """Create the database ``name`` (letters, digits, _); returns its URL."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"database name {name!r}: letters, digits and _ only")
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        if not _NAME.fullmatch(name):
            raise ValueError(f"database name {name!r}: letters, digits and _ only")
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients disconnected, no waiting), then delete the directory."""
        _RUNNING.discard(self)
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait_s in ((signal.SIGINT, STOP_TIMEOUT_S), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait_s)
                    break
            else:  # a killed postmaster leaves its backends: they are in its process group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@contextlib.contextmanager
def postgres_server(tmp_dir: Path | str | None = None, database: str = "roost") -> Iterator[str]:
    """A running server with ``database`` made; yields its URL (``postgresql://roost@127.0.0.1:PORT/roost``)."""
    with PostgresServer(tmp_dir, database=database) as pg:
        yield pg.url()


@atexit.register
def _stop_left_running() -> None:
    """Servers a caller forgot to stop (or whose teardown never ran) do not outlive the interpreter."""
    for server in list(_RUNNING):
        server.stop()


__all__ = ["PostgresNotInstalled", "PostgresServer", "find_bindir", "postgres_server"]
