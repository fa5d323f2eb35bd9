"""The serving lifecycle every backend implements completely, and what it takes and gives back.

A :class:`Backend` serves vLLM on one host (``roost.hosts.HostProfile``): the ``process`` backend
runs vLLM from the vLLM venv as a child process (the embedded default), the ``docker`` backend
builds the serving image and runs vLLM in a container (the DGX Spark's way). The flow never
branches on which one it has (``backend_for(host)`` picks it):

1. ``prepare()``: what must exist before a server can start (the image: built or found; the
   process backend checks its interpreter). ``prepare_key()`` names that result for caching.
2. ``start(spec, api_key, prepared)``: start one server and return at once; a start the backend
   itself refuses (a taken port) raises :class:`StartFailed` with its diagnosis.
3. The returned :class:`Server`: ``new_log_text()`` (what it logged since the previous call: the
   health wait reads only that), ``is_running()``, ``exit_code()``, ``diagnose()`` (why it failed,
   ``roost.serve.diagnose``), ``phases()`` (load / compile / ready split of the cold start),
   ``describe()`` (pid or container, log location) and ``stop()`` (idempotent; keeps the final log;
   ``stop(stop_grace(exc))`` after an interruption: :data:`ABORT_GRACE_S`).
4. ``servers()``: the servers roost runs on the host now (the process backend's state files, the
   docker backend's labelled containers; ``roost.serve.discover.probe`` asks one if it answers).

Waiting for readiness (``roost.serve.health.wait_until_ready``) and retrying a failed cold load
(``roost.serve.coldload``, deciding with the pure ``roost.serve.policy``) work on these interfaces;
``roost.serve.backends.backend_for(host)`` picks the backend a host serves with.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from roost.errors import StageFailed, UserError
from roost.hosts import HostProfile
from roost.inputs.text import shown
from roost.serve.diagnose import Diagnosis
from roost.serve.occupancy import Occupant, mem_available_bytes
from roost.serve.occupancy import RestartPolicy as RestartPolicy  # re-exported: the serving API names it
from roost.serve.phases import StartupPhases
from roost.vllm.argv import VllmArgv
from roost.vllm.flags import carries_secret

BackendName = Literal["process", "docker"]


LogFn = Callable[[str], None]

ABORT_GRACE_S = 5.0
"""How long a server stopped by a cancelled or terminated run gets between SIGTERM (``docker stop``)
and SIGKILL. Prefect's worker kills a cancelled run's process 30 s after its SIGTERM: within that the
run must stop its server, give the host's serving slot back and store its record, or the slot stays
held until its lease runs out. vLLM's API server interrupted while it waits for its engine core (a
model loading or compiling) never exits by itself (vLLM 0.32: ``KeyboardInterrupt: terminated``, then
it hangs), so only the SIGKILL ends it."""


def stop_grace(exc: BaseException) -> float | None:
    """The grace for a server stopped because of ``exc``: :data:`ABORT_GRACE_S` when the run is being
    cancelled or terminated (not an ``Exception``: Prefect's ``TerminationSignal``, ``KeyboardInterrupt``,
    ``SystemExit``); None, the backend's own, for a failure."""
    return None if isinstance(exc, Exception) else ABORT_GRACE_S


def _ignore(_: str) -> None:
    return None


def check_vllm_args(args: list[str], *, source: str = "vLLM arguments") -> None:
    """Refuse an argument list that carries a secret (it would be stored with the run and logged)."""
    for a in args:
        secret = carries_secret(a)
        if secret is not None:
            typed = re.split(r"[=\s]", a.strip(), maxsplit=1)[0]
            named = secret if typed == secret else f"{shown(typed, 60)} (vLLM reads it as {secret})"
            raise UserError(
                f"{source}: {named} carries a secret, and vLLM arguments are stored with the run and logged; "
                "remove it: roost passes the API key through VLLM_API_KEY (or the roost-vllm-api-key Secret block) "
                "and the Hub token through HF_TOKEN (or a Prefect Secret block)"
            )


class ServeSpec(BaseModel):
    """How to start one vLLM server. Backend-independent; the backend decides how to run it."""

    model_dir: Path = Field(description="Local checkpoint directory (mounted read-only in a container).")
    served_model_name: str
    host: str = Field(default="127.0.0.1", description="Address the API listens on / is published to.")
    port: int = 8000
    fixed_port: bool = Field(
        default=False, description="The port is fixed (the profile's: a gateway expects it there): a start never moves it.")
    vllm_args: list[str] = Field(default_factory=list, description="Extra vLLM CLI args from the plan and overrides.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment; never put secrets here.")
    log_path: Path | None = None
    restart_policy: RestartPolicy = Field(
        default="no", description="Containers only (Docker's --restart); the process backend says it ignores it.")

    def server_args(self) -> list[str]:
        """``--served-model-name`` (unless the plan's args already name it: they must agree) and ``vllm_args``."""
        args = list(self.vllm_args)
        check_vllm_args(args)
        named = VllmArgv(args).values("--served-model-name")
        for other in named:
            if other != self.served_model_name:
                raise UserError(
                    f"vLLM arguments serve the model as {other!r} but roost serves and benchmarks it as "
                    f"{self.served_model_name!r}: drop --served-model-name from the overrides, or set the "
                    "profile's served name instead"
                )
        return args if named else ["--served-model-name", self.served_model_name, *args]


class Prepared(BaseModel):
    """What ``Backend.prepare`` produced: the image a container runs (docker), or nothing (process)."""

    backend: BackendName
    image: str = Field(default="", description="The serving image's tag; empty for the process backend.")
    image_digest: str = Field(default="", description="The base image's repo digest, else the image id.")
    cached: bool = Field(default=False, description="Nothing was built: the image already existed.")
    skipped: bool = Field(default=False, description="The backend has nothing to prepare.")
    seconds: float = 0.0
    xgrammar_version: str = Field(default="", description="The xgrammar the image's patch pins; '' for the process backend.")
    xgrammar_base: str = Field(
        default="", description="The xgrammar the base image already had; '' for none, unknown or the process backend.")
    vllm_version: str = Field(default="", description="The vLLM the image holds (its package metadata); '' when not read.")
    note: str = ""

    @property
    def xgrammar_patch_needed(self) -> bool:
        """The image installs an xgrammar its base did not have (pinned != base's); False with nothing pinned."""
        return bool(self.xgrammar_version) and self.xgrammar_version != self.xgrammar_base


class Milestone(BaseModel):
    """A start-up milestone seen in the server's log, in seconds since the wait began."""

    name: str
    at_s: float


class Readiness(BaseModel):
    """How a wait for a starting server ended well: seconds from the start of the wait to each step."""

    health_ok_s: float
    health_ok_at: float = Field(description="Wall clock (epoch seconds) when roost saw /health 200.")
    models_ok_s: float
    completion_ok_s: float
    detect_delay_s: float = Field(description="Upper bound on /health turning 200 -> roost noticing.")
    polls: int
    milestones: list[Milestone] = Field(default_factory=list)


class ServerInfo(BaseModel):
    """What a started server is, for logs, records and discovery."""

    backend: BackendName
    host: str
    base_url: str
    served_model_name: str
    port: int
    pid: int | None = Field(default=None, description="Process group id (process backend).")
    container: str | None = Field(default=None, description="Container name (docker backend).")
    image: str = ""
    log_location: str = Field(default="", description="The log file, or how to read the container's log.")
    started_at: dt.datetime | None = None
    model_dir: str | None = None
    api_key_ref: str | None = Field(
        default=None, description="Where its API key can be found again: env, secret-block, none (never the key).")


class StartPlan(BaseModel):
    """What ``Backend.start`` would run for a spec, without starting anything (``roost run --dry-run``):
    the exact server command for review before a GPU minute is spent. Environment variables by name
    only: their values may be secret."""

    backend: BackendName
    host: str
    image: str = Field(default="", description="The container image (docker); empty for a process.")
    command: list[str] = Field(description="The server's argv (vLLM's arguments last).")
    env_names: list[str] = Field(description="Environment variables the server gets (names only).")
    port: int
    fixed_port: bool
    bind_addrs: list[str] = Field(description="Addresses the port is published on (docker) or listens on (process).")
    restart_policy: str = Field(description="Docker's restart policy; 'none' for a process.")
    mounts: list[str] = Field(default_factory=list, description="host path -> container path (mode).")
    devices: list[str] = Field(default_factory=list, description="Device requests (the GPUs).")
    options: list[str] = Field(default_factory=list, description="Other run options: ipc, init, ulimits, labels.")

    def summary(self) -> str:
        """The specification as lines a person reviews."""
        where = ", ".join(f"{a}:{self.port}" for a in self.bind_addrs)
        lines = [f"serve on {self.host} ({self.backend}): {where}{' (fixed port)' if self.fixed_port else ''}, "
                 f"restart policy {self.restart_policy}"]
        if self.image:
            lines.append(f"  image: {self.image}")
        lines.append("  command: " + " ".join(shlex.quote(a) for a in self.command))
        lines.append("  environment: " + ", ".join(self.env_names))
        lines += [f"  mount: {m}" for m in self.mounts]
        lines += [f"  devices: {d}" for d in self.devices]
        lines += [f"  option: {o}" for o in self.options]
        return "\n".join(lines)


class StartFailed(StageFailed):
    """The backend could not start the server (e.g. Docker refused the port); carries the diagnosis."""

    def __init__(self, message: str, diagnosis: Diagnosis | None) -> None:
        super().__init__("serve", message)
        self.diagnosis = diagnosis


class Server(ABC):
    """A vLLM server a backend started. ``stop()`` is idempotent and always safe to call."""

    base_url: str
    served_model_name: str

    @abstractmethod
    def is_running(self) -> bool:
        """Is the server process (container) still alive?"""

    @abstractmethod
    def exit_code(self) -> int | None:
        """Its exit status once it exited; None while it runs (or when unknown)."""

    @abstractmethod
    def logs(self) -> str:
        """Its whole log so far (after ``stop()``: the final log)."""

    @abstractmethod
    def new_log_text(self) -> str:
        """What it logged since the previous call (the first call: since it started). Never re-reads."""

    @abstractmethod
    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        """Why it failed to start (``roost.serve.diagnose``); None when nothing shows a failure."""

    @abstractmethod
    def phases(self, ready: Readiness) -> StartupPhases:
        """Start -> healthy split into load / compile / ready."""

    @abstractmethod
    def describe(self) -> ServerInfo:
        """Where it runs and where its log is."""

    @abstractmethod
    def stop(self, grace_s: float | None = None) -> None:
        """Stop it (and its children), keeping its final log and exit status. Idempotent. ``grace_s``:
        how long it may take to exit before it is killed; None is the backend's own (a clean shutdown)."""

    @abstractmethod
    def clear_compile_cache(self, entry: str) -> str:
        """After ``stop()``: remove the compile-cache entry ``entry`` (a path as the server saw it, from
        ``Diagnosis.compile_cache_entry``) so the next start compiles afresh; one line saying what was done."""


class Backend(ABC):
    """How vLLM runs on one host: the whole lifecycle, implemented by ``process`` and ``docker``."""

    name: BackendName

    def __init__(self, host: HostProfile) -> None:
        self.host = host

    @abstractmethod
    def prepare_key(self) -> str | None:
        """A name for what ``prepare()`` would produce now (a cache key), or None (never cached)."""

    @abstractmethod
    def prepare(self, log: LogFn = _ignore) -> Prepared:
        """Make what a server needs before it can start (build or find the image); idempotent."""

    def is_prepared(self) -> bool:
        """Does what ``prepare()`` would produce exist now (the image is still on the engine)? A cached
        ``prepare()`` result is valid only while it does. True when there is nothing to prepare."""
        return True

    @abstractmethod
    def start(self, spec: ServeSpec, api_key: str | None, prepared: Prepared, log: LogFn = _ignore) -> Server:
        """Start one server for ``spec`` and return at once (wait with ``roost.serve.health``).

        ``api_key`` reaches vLLM through its environment only. Raises :class:`StartFailed` when the
        backend itself cannot start it, ``UserError`` for a spec it cannot serve.
        """

    @abstractmethod
    def servers(self) -> list[ServerInfo]:
        """The servers roost runs on this host now, oldest first (normally zero or one)."""

    @abstractmethod
    def start_plan(self, spec: ServeSpec) -> StartPlan:
        """What ``start(spec, key, prepared)`` would run (the image ``prepare()`` would make), started
        nowhere; a server gets ``VLLM_API_KEY`` always (roost makes one when none is configured)."""

    @abstractmethod
    def occupants(self, spec: ServeSpec) -> list[Occupant]:
        """What roost did not start that holds this host's GPUs or ``spec``'s port (containers, or a
        process listening there); roost's own servers are not occupants (``retire`` stops them)."""

    @abstractmethod
    def release(self, occupant: Occupant, log: LogFn = _ignore) -> None:
        """Stop ``occupant`` (told to by ``--replace``): its restart policy set to ``no`` first, so it
        stays stopped; stopped, never removed. UserError for what roost may not stop."""

    @abstractmethod
    def retire(self, spec: ServeSpec, log: LogFn = _ignore) -> list[str]:
        """Stop roost's own servers on this host before ``spec``'s starts (one server per host), moving
        a restart policy off them (``docker update --restart no``, as the recipe swaps models).
        Returns what was stopped, described for the log and the record."""

    def available_memory_bytes(self) -> int | None:
        """Memory the host can still give a new server (``MemAvailable``; unified on the Spark), or None
        when this backend cannot tell (a remote engine). This host's ``/proc/meminfo`` by default."""
        try:
            with open("/proc/meminfo", encoding="ascii") as fh:
                return mem_available_bytes(fh.read())
        except OSError:
            return None
