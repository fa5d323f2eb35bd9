"""A real ``prefect server start`` on loopback for a test: the session's (``tests/conftest.py``), a module's own
that is stopped and started again on the same port and database, one on PostgreSQL, the UI's.

The server runs in a session of its own (so it is stopped with its children) with this process's environment
minus ``PREFECT_API_URL`` (a server is not a client of another), the UI off unless asked, and what the caller
adds on top (``PREFECT_HOME``, a database URL...). Its output goes to ``log``, appended across restarts.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from support.cli import PREFECT
from support.processes import stop_group
from support.wait import http_ok, wait_started


class PrefectServer:
    """``prefect server start --host 127.0.0.1 --port PORT [ARGS]``; ``url`` is its API (``.../api``)."""

    def __init__(self, log: Path, *, env: Mapping[str, str] | None = None, args: Sequence[str] = (),
                 port: int | None = None, timeout_s: float = 120) -> None:
        from roost.net import free_port

        self.log, self.extra_env, self.args, self.timeout_s = log, dict(env or {}), list(args), timeout_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrefectServer:
        """Start it and wait for ``/api/health`` (``timeout_s``); a server that exits or never answers fails
        the caller with its log's end."""
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env |= {"PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(self.port),
                "PREFECT_UI_ENABLED": "false", **self.extra_env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port),
                                          *self.args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        try:
            wait_started("prefect server", self.proc, http_ok(f"{self.url}/health"), log=self.log,
                         timeout_s=self.timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM to its process group, SIGKILL after ``grace_s``."""
        if self.proc is not None:
            stop_group(self.proc, grace_s)

    def __enter__(self) -> PrefectServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


@contextlib.contextmanager
def using_api(url: str) -> Iterator[str]:
    """This process (``PREFECT_API_URL`` in its environment, so the subprocesses it starts too) and Prefect's
    settings point at ``url`` until the block ends; what was there before is put back."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before
