"""A local Hugging Face Hub on loopback: ``olah`` in offline mode serving git repos from a mirrors root.

``HubMirror(mirrors_root)`` runs ``olah-cli`` (installed with roost) on ``127.0.0.1`` and an OS-assigned
free port, serving every repository ``publish_repo`` wrote under ``mirrors_root`` (olah's local-mirror
layout ``<mirrors_root>/<repo_type>/<org>/<name>``). Point ``huggingface_hub`` (``endpoint=``) or
``HF_ENDPOINT`` at ``mirror.endpoint``. The mirror answers like the Hub: branch/tag -> commit
resolution, tree listings with sizes and ``lfs.sha256``, ``/resolve/`` downloads, and ``401
RepoNotFound`` for a repository that does not exist or that is listed in ``private`` (the answer
huggingface.co gives an anonymous caller for a private repo).

Known differences from huggingface.co: olah's local-mirror route ignores ``Range`` (it answers ``200``
with the whole file), so a resumed transfer is re-sent from byte 0 by the server; and olah has no
authentication, so it cannot serve a gated repository (the tests put a stand-in proxy in front of it,
``tests/support/hub.py``'s ``GatedHub``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx

from roost.errors import StageFailed, UserError
from roost.net import free_port, require_free_port
from roost.settings import HUB_TOKEN_VARIABLES, child_env

_REQUEST_LINE = re.compile(r'"(GET|HEAD|POST) (\S+) HTTP/[0-9.]+" (\d{3})')


def olah_cli() -> str:
    """The ``olah-cli`` next to the running interpreter (the project venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "olah-cli"
    if beside.exists():
        return str(beside)
    found = shutil.which("olah-cli")
    if found is None:
        raise UserError(
            "olah-cli not found next to this Python or on PATH; run scripts/bootstrap to install roost's venv"
        )
    return found


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class HubMirror:
    """olah serving ``mirrors_root`` offline on loopback. Use as a context manager or start()/stop()."""

    def __init__(
        self,
        mirrors_root: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        workdir: Path | None = None,
        private: Sequence[str] = (),
        startup_timeout: float = 60.0,
    ) -> None:
        """``workdir`` holds olah's config, cache dir and log (a temp dir, removed by close(), when None);
        ``private`` lists repo ids (globs) that answer 401 RepoNotFound like a private repo on the Hub."""
        self.mirrors_root = Path(mirrors_root).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.private = list(private)
        self.startup_timeout = startup_timeout
        self._own_state = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="roost-olah-"))
        self.log_path = self.workdir / "olah.log"
        self._proc: subprocess.Popen[bytes] | None = None

    # ---------------------------------------------------------------------------------- properties

    @property
    def endpoint(self) -> str:
        """The base URL to give huggingface_hub (``endpoint=``) or ``HF_ENDPOINT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def logs(self, tail: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-tail:])

    def requests(self, path_contains: str = "") -> list[str]:
        """The requests olah logged, oldest first, as ``"GET /path 200"`` (tests count calls with it)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for m in _REQUEST_LINE.finditer(text):
            if path_contains in m.group(2):
                out.append(f"{m.group(1)} {m.group(2)} {m.group(3)}")
        return out

    # ------------------------------------------------------------------------------------- config

    def config_text(self) -> str:
        """olah's TOML config: offline, local mirrors only, loopback, this port."""
        rules = [("*", True), ("*/*", True)] + [(repo, False) for repo in self.private]
        proxy = "\n".join(
            f"[[accessibility.proxy]]\nrepo = {_toml_str(r)}\nallow = {'true' if a else 'false'}\nuse_re = false\n"
            for r, a in rules
        )
        netloc = f"{self.host}:{self.port}"
        return (
            "[basic]\n"
            f"host = {_toml_str(self.host)}\n"
            f"port = {self.port}\n"
            f"repos-path = {_toml_str(str(self.workdir / 'repos'))}\n"
            f"mirrors-path = [{_toml_str(str(self.mirrors_root))}]\n"
            'mirror-scheme = "http"\n'
            f"mirror-netloc = {_toml_str(netloc)}\n"
            f"mirror-lfs-netloc = {_toml_str(netloc)}\n"
            "metadata-cache-ttl = 0\n"
            "\n[accessibility]\noffline = true\n\n" + proxy
        )

    # ---------------------------------------------------------------------------------- lifecycle

    def start(self) -> HubMirror:
        """Start olah (a no-op when running) and wait until it answers HTTP."""
        if self.is_running():
            return self
        require_free_port(self.port, self.host, what="the local Hub mirror (olah)")
        self.mirrors_root.mkdir(parents=True, exist_ok=True)
        (self.workdir / "repos").mkdir(parents=True, exist_ok=True)
        # one config per instance: two landings on one machine (two hosts, or a sweep planning beside a landing)
        # start mirrors in the same state directory, and a shared file would hand both the same port
        config = self.workdir / f"olah-{self.port}.toml"
        config.write_text(self.config_text())
        env = child_env(without=HUB_TOKEN_VARIABLES)
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"--- roost: starting olah on {self.endpoint} at {time.ctime()}\n".encode())
            log_file.flush()
            self._proc = subprocess.Popen(
                [olah_cli(), "--config", str(config), "--log-path", str(self.workdir / "logs")],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise StageFailed(
                    "hub-mirror",
                    f"olah exited with code {self._proc.returncode} before answering on {self.endpoint}; "
                    f"log {self.log_path}:\n{self.logs()}",
                )
            try:
                r = httpx.get(f"{self.endpoint}/api/models/roost-probe/none/revision/main", timeout=2.0)
                if r.status_code < 500 and self._proc.poll() is None:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise StageFailed(
                    "hub-mirror",
                    f"olah did not answer on {self.endpoint} within {self.startup_timeout:.0f} s; log {self.log_path}",
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop olah: SIGTERM to its process group, SIGKILL after ``timeout``. Idempotent."""
        self._signal_group(graceful=True, timeout=timeout)

    def kill(self) -> None:
        """Stop olah at once (SIGKILL), cutting any transfer in flight. Idempotent."""
        self._signal_group(graceful=False, timeout=5.0)

    def _signal_group(self, *, graceful: bool, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._proc = None
        (self.workdir / f"olah-{self.port}.toml").unlink(missing_ok=True)

    def close(self) -> None:
        """Stop olah and remove the state directory when this object created it."""
        self.stop()
        if self._own_state:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> HubMirror:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
