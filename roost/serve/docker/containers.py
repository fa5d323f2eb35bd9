"""Serving containers: how roost runs vLLM in Docker, watches it and finds it again.

- :func:`docker_run_kwargs`: ``containers.run`` the way the recipes' run.sh does (GPU device
  requests on GPU hosts, ipc=host, memlock/stack ulimits, checkpoint read-only at /model, port
  published on the host's bind addresses only, VLLM_API_KEY through the environment, a restart
  policy), under a stable name ``roost-<host>-<served name>`` with ``ai.roost.*`` labels.
- :func:`start_container`: a roost-managed container already serving on that host is replaced
  (or refused, per ``replace_existing``); containers without the roost label are never touched.
- :class:`DockerServer`: the ``Server`` for such a container. One followed ``docker logs
  --timestamps`` stream (a daemon thread) fills its log buffer and feeds the ``log`` callback;
  while that stream is open the container runs, so ``is_running()`` asks the engine nothing until
  it closes. ``stop()`` is idempotent and removes the container after keeping its final log and
  exit status.
- :func:`docker_servers`: discovery, from running containers carrying roost's labels only.

Secrets: the API key only ever travels in the container's environment; it is never logged, put in
labels, the command line, exceptions or results.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import math
import re
import threading
from typing import Any, get_args

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.types import DeviceRequest, Ulimit

from roost.errors import StageFailed, UserError
from roost.hosts import HostProfile
from roost.net import port_in_use
from roost.serve.base import (
    LogFn,
    Readiness,
    RestartPolicy,
    Server,
    ServerInfo,
    ServeSpec,
    StartFailed,
    StartPlan,
    _ignore,
)
from roost.serve.diagnose import Diagnosis, diagnose
from roost.serve.docker.images import image_exists, is_loopback, remote_engine_address
from roost.serve.dockerfile import LABEL_MANAGED
from roost.serve.logs import LogBuffer, ServerLine, Stamped
from roost.serve.occupancy import Occupant, container_occupant, published_ports
from roost.serve.phases import StartupPhases, parse_timestamp, startup_phases
from roost.settings import HF_HUB_OFFLINE, VLLM_API_KEY

LABEL_HOST = "ai.roost.host"
LABEL_MODEL = "ai.roost.model"
LABEL_PORT = "ai.roost.port"
MODEL_MOUNT = "/model"
STACK_BYTES = 67108864  # the recipes' --ulimit stack=67108864 (64 MiB)
RESTART_POLICIES = get_args(RestartPolicy)
NO_RESTART: Any = {"Name": "no"}
"""``docker update --restart no``: what a container that stops serving carries (the recipe's model swap)."""
STOP_TIMEOUT_S = 15
"""``docker stop``'s timeout (SIGTERM, then SIGKILL) for a container stopped after its run, retired by
a new server or replaced (``--replace``)."""
FOLLOW_DRAIN_S = 10.0
"""After ``docker stop``, how long the log stream may take to deliver its last lines and close."""

_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T[\d:.]+(?:Z|[+-]\d{2}:\d{2})) ?(.*)$", re.DOTALL)
_REMOVED: dict[str, Any] = {"Status": "removed", "Running": False, "ExitCode": None, "OOMKilled": False}


def container_name(host: str, served_model_name: str) -> str:
    """``roost-<host>-<served name>``, with characters Docker does not allow replaced by '-'."""
    raw = f"roost-{host}-{served_model_name}"
    name = re.sub(r"[^a-zA-Z0-9_.-]+", "-", raw).strip("-.")
    return name[:128]


def stamped_lines(entry: bytes, last: dt.datetime | None) -> list[Stamped]:
    """One ``docker logs --timestamps`` entry (without its newline) as stamped lines; a progress bar's
    ``\\r`` redraws become lines of the same time; an entry without a stamp takes ``last``'s."""
    text = entry.decode("utf-8", errors="replace")
    m = _STAMP.match(text)
    ts = last or dt.datetime.now(dt.UTC)
    if m is not None:
        with contextlib.suppress(ValueError):
            ts = parse_timestamp(m.group(1))
        text = m.group(2)
    return [(ts, piece) for piece in re.split(r"\r\n|\r|\n", text) if piece.strip()]


class DockerServer(Server):
    """A vLLM server in a roost-managed container."""

    def __init__(
        self,
        client: docker.DockerClient,
        container: Container,
        *,
        base_url: str,
        served_model_name: str,
        host_name: str,
        port: int,
        image: str,
        model_dir: str | None = None,
        log: LogFn = _ignore,
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.served_model_name = served_model_name
        self.host_name = host_name
        self.port = port
        self.image = image
        self.model_dir = model_dir
        self.name = str(container.name)
        self.id = str(container.id)
        self._container = container
        self._final_state: dict[str, Any] | None = None
        self._started_at: dt.datetime | None = None
        self._lock = threading.Lock()
        self._buffer = LogBuffer(lambda line: log(ServerLine(self.name, line)))
        self._stream: Any = None
        self._follow_error = ""
        self._follow_done = threading.Event()
        # in a copy of the starting code's context: a log callback that needs it (Prefect's logger reads
        # its API settings and the run from context variables, which a new thread would not have) works
        # from the thread; a task run in that copy goes on after the task ended (``tasks/serve.py``)
        self._follower = threading.Thread(target=contextvars.copy_context().run, args=(self._follow,),
                                          name=f"logs-{self.name}", daemon=True)
        self._follower.start()

    # --- the one log stream -----------------------------------------------------------------------

    def _follow(self) -> None:
        """Stream the container's log (from its first line) into the buffer until the container stops."""
        last: dt.datetime | None = None
        carry = b""
        try:
            self._stream = self._container.logs(stream=True, follow=True, stdout=True, stderr=True, timestamps=True)
            for chunk in self._stream:
                carry += chunk
                *entries, carry = carry.split(b"\n")
                lines = [line for entry in entries for line in stamped_lines(entry, last)]
                if lines:
                    last = lines[-1][0]
                    self._buffer.add(lines)
            if carry:
                self._buffer.add(stamped_lines(carry, last))
        except Exception as exc:  # the container went away mid-stream, or the engine dropped the stream
            self._follow_error = f"{type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(Exception):
                if self._stream is not None:
                    self._stream.close()
            self._follow_done.set()

    def logs(self) -> str:
        return self._buffer.text()

    def new_log_text(self) -> str:
        return self._buffer.new_text()

    # --- state --------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Docker's State of the container (Status, ExitCode, OOMKilled, StartedAt...): one engine call."""
        if self._final_state is not None:
            return self._final_state
        try:
            self._container.reload()
        except NotFound:
            return dict(_REMOVED)
        return dict(self._container.attrs.get("State", {}))

    def is_running(self) -> bool:
        """True while the log stream is open (no engine call); after it closed, what Docker says."""
        if self._final_state is not None:
            return False
        if not self._follow_done.is_set():
            return True
        st = self.state()
        return bool(st.get("Running")) and not st.get("Restarting", False)

    def exit_code(self) -> int | None:
        if self._final_state is None and not self._follow_done.is_set():
            return None
        st = self.state()
        if st.get("Running") or st.get("Status") in ("created", "removed"):
            return None
        code = st.get("ExitCode")
        return int(code) if code is not None else None

    def oom_killed(self) -> bool:
        return bool(self.state().get("OOMKilled"))

    def started_at(self) -> dt.datetime | None:
        """When Docker started the container (its clock is this host's); None if it never started."""
        if self._started_at is None:
            raw = str(self.state().get("StartedAt") or "")
            if raw and not raw.startswith("0001-"):
                self._started_at = parse_timestamp(raw)
        return self._started_at

    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        """Classify why this server failed from its log, exit status and OOMKilled flag."""
        return diagnose(self.logs(), self.exit_code(), oom_killed=self.oom_killed(), timed_out=timed_out)

    def phases(self, ready: Readiness) -> StartupPhases:
        """Container start -> healthy, split on the daemon's timestamps of each milestone line."""
        healthy = dt.datetime.fromtimestamp(ready.health_ok_at, dt.UTC)
        started = self.started_at() or healthy
        return startup_phases(self._buffer.lines(), started, healthy)

    def describe(self) -> ServerInfo:
        return ServerInfo(
            backend="docker", host=self.host_name, base_url=self.base_url, served_model_name=self.served_model_name,
            port=self.port, container=self.name, image=self.image, log_location=f"docker logs {self.name}",
            started_at=self.started_at(), model_dir=self.model_dir,
        )

    # --- teardown -----------------------------------------------------------------------------------

    def stop(self, grace_s: float | None = None) -> None:
        """Stop and remove the container (``docker stop`` with ``grace_s`` rounded up, None:
        :data:`STOP_TIMEOUT_S`); keep its log and final state. Idempotent."""
        timeout_s = STOP_TIMEOUT_S if grace_s is None else math.ceil(grace_s)
        with self._lock:
            if self._final_state is not None:
                return
            container = self._container
            with contextlib.suppress(NotFound, APIError):  # APIError: already stopping or exited
                container.stop(timeout=timeout_s)
            if not self._follow_done.wait(FOLLOW_DRAIN_S):
                with contextlib.suppress(Exception):
                    self._stream.close()
            try:
                container.reload()
                state = dict(container.attrs.get("State", {}))
                if self._follow_error or not self._follow_done.is_set():
                    self._catch_up(container)
            except NotFound:  # removed by someone else (e.g. replaced by a newer roost run)
                state = dict(_REMOVED)
            self.started_at()
            self._final_state = state
            with contextlib.suppress(NotFound):
                container.remove(force=True)

    def clear_compile_cache(self, entry: str) -> str:
        """The cache lived in the container's own filesystem (roost mounts only the model), which
        ``stop()`` removed: nothing is left to remove, the next container compiles afresh."""
        return f"the compile-cache entry {entry} went with the removed container {self.name}: the next container compiles afresh"

    def _catch_up(self, container: Container) -> None:
        """The stream broke off: read the rest of the log once (before the container is removed)."""
        entries = bytes(container.logs(stdout=True, stderr=True, timestamps=True)).split(b"\n")
        lines: list[Stamped] = []
        last: dt.datetime | None = None
        for entry in entries:
            lines += stamped_lines(entry, last)
            last = lines[-1][0] if lines else last
        self._buffer.add(lines[len(self._buffer):])

    def __enter__(self) -> DockerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def roost_containers(client: docker.DockerClient, host: str | None = None, *, all: bool = True) -> list[Container]:
    """Containers carrying roost's label (optionally for one host); nothing else is ever listed."""
    labels = [f"{LABEL_MANAGED}=true"]
    if host is not None:
        labels.append(f"{LABEL_HOST}={host}")
    return list(client.containers.list(all=all, filters={"label": labels}))


def _is_roost(container: Container) -> bool:
    return (container.labels or {}).get(LABEL_MANAGED) == "true"


def _remove(container: Container, log: LogFn, why: str) -> None:
    log(f"stopping roost container {container.name} ({why})")
    try:
        container.stop(timeout=STOP_TIMEOUT_S)
        container.remove(force=True)
    except NotFound:
        pass


def make_room(client: docker.DockerClient, host: HostProfile, name: str, *, replace_existing: bool, log: LogFn) -> None:
    """Clear the way for ``name`` on ``host``: replace roost's own containers, never anyone else's."""
    try:
        same = client.containers.get(name)
    except NotFound:
        same = None
    if same is not None and not _is_roost(same):
        raise UserError(
            f"a container named {name} exists that roost did not start (no {LABEL_MANAGED} label); roost never touches it: "
            "remove or rename it yourself, or serve under another served model name"
        )
    for c in roost_containers(client, host.name):
        running = c.status in ("running", "restarting", "created")
        if not running and c.name != name:
            continue
        if running and not replace_existing:
            raise StageFailed(
                "serve",
                f"roost container {c.name} already serves on host {host.name}; stop it first "
                "(one server per host) or allow replacing it",
            )
        _remove(c, log, "replaced: one server per host" if running else "stale, same name")


def foreign_occupants(client: docker.DockerClient, host: HostProfile, spec: ServeSpec) -> list[Occupant]:
    """Running containers without roost's label that hold the GPUs (on a GPU host) or ``spec``'s fixed
    port, and a process that is not a container listening on that port (``roost.serve.occupancy``)."""
    port = spec.port if spec.fixed_port else None
    found: list[Occupant] = []
    ours: set[int] = set()
    for c in client.containers.list():
        attrs = c.attrs or {}
        if _is_roost(c):
            ours |= published_ports(attrs)
            continue
        occupant = container_occupant(str(c.name), attrs, port)
        if occupant is not None and host.accelerator != "gpu":
            occupant.holds = [h for h in occupant.holds if h != "the GPUs"]
        if occupant is not None and occupant.holds:
            found.append(occupant)
    if port is not None and port not in ours and not any(f"port {port}" in o.holds for o in found):
        listener = local_listener(host, port)
        if listener is not None:
            found.append(listener)
    return found


def local_listener(host: HostProfile, port: int) -> Occupant | None:
    """A process (not a container) listening on ``port`` at one of the host's bind addresses, found by
    binding them here. None when the engine is on another machine (``remote_engine_address``): its
    processes cannot be seen from here (its address is not this machine's, so binding it always fails),
    and Docker's refusal to publish a taken port says so at start (``port_in_use``)."""
    if remote_engine_address(host.docker_url) is not None:
        return None
    for addr in host.bind_addrs or ["127.0.0.1"]:
        if port_in_use(port, addr):
            return Occupant(kind="process", name=f"a process listening on {addr}:{port}",
                            holds=[f"port {port}"], can_stop=False)
    return None


def release_container(client: docker.DockerClient, occupant: Occupant, log: LogFn = _ignore) -> None:
    """Stop a container roost did not start (``--replace``): restart policy ``no`` first, so Docker
    does not bring it back; it is stopped, never removed (its owner may start it again)."""
    if occupant.kind != "container" or not occupant.can_stop:
        raise UserError(f"roost never stops {occupant.name}: it did not start it; stop it yourself")
    try:
        c = client.containers.get(occupant.name)
    except NotFound:
        return
    if _is_roost(c):  # never the case for an occupant; retire_containers handles roost's own
        return
    log(f"stopping container {c.name} (--replace; it holds {' and '.join(occupant.holds)}): "
        f"restart policy {occupant.restart_policy or 'no'} -> no")
    c.update(restart_policy=NO_RESTART)
    c.stop(timeout=STOP_TIMEOUT_S)


def retire_containers(client: docker.DockerClient, host: HostProfile, spec: ServeSpec, log: LogFn = _ignore) -> list[str]:
    """Stop roost's running containers on ``host`` before ``spec``'s server starts (one server per host),
    the recipe's model swap: ``docker update --restart no`` on the old one, then stop it. A container
    of another name is kept stopped (``docker start`` brings it back by hand); one of the new server's
    name is removed (the name is needed). Returns what was done, one line per container."""
    name = container_name(host.name, spec.served_model_name)
    done: list[str] = []
    for c in roost_containers(client, host.name):
        if c.status not in ("running", "restarting", "created"):
            continue
        policy = str(((c.attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no")
        if policy != "no":
            c.update(restart_policy=NO_RESTART)
        with contextlib.suppress(NotFound, APIError):
            c.stop(timeout=STOP_TIMEOUT_S)
        moved = f"restart {policy} -> no, " if policy != "no" else ""
        if c.name == name:
            with contextlib.suppress(NotFound):
                c.remove(force=True)
            done.append(f"{c.name} ({moved}stopped and removed: the new server takes its name)")
        else:
            done.append(f"{c.name} ({moved}stopped, kept: `docker start {c.name}` brings it back)")
        log(f"one server per host: {done[-1]}")
    return done


def container_ulimits(host: HostProfile) -> list[Ulimit]:
    """The recipes' ``--ulimit memlock=-1 --ulimit stack=67108864``; memlock only on GPU hosts.

    Unlimited locked memory is for CUDA's pinned host buffers. A CPU host has no use for it, and an
    engine without CAP_SYS_RESOURCE (like these test machines: hard memlock 8 MiB) cannot grant it:
    runc fails with "error setting rlimit type 8: operation not permitted".
    """
    limits = [Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES)]
    if host.accelerator == "gpu":
        limits.insert(0, Ulimit(name="memlock", soft=-1, hard=-1))
    return limits


def docker_run_kwargs(spec: ServeSpec, host: HostProfile, *, image: str, api_key: str | None) -> dict[str, Any]:
    """The ``containers.run`` arguments for ``spec`` on ``host`` (the key only in ``environment``)."""
    if spec.restart_policy not in RESTART_POLICIES:
        raise UserError(
            f"restart policy {spec.restart_policy!r} is not one of {', '.join(RESTART_POLICIES)} "
            "(the Ornith 1.5 recipe uses unless-stopped)"
        )
    model_dir = spec.model_dir.expanduser().resolve()
    if not model_dir.is_dir():
        raise UserError(f"checkpoint directory {model_dir} does not exist: download it first or fix --model-dir")
    if VLLM_API_KEY in spec.env:
        raise UserError("ServeSpec.env must not carry VLLM_API_KEY: pass the key as api_key (it comes from a Secret block)")
    env = {HF_HUB_OFFLINE: "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", **spec.env}
    if api_key:
        env[VLLM_API_KEY] = api_key
    command = [
        "python3", "-m", "vllm.entrypoints.openai.api_server",
        "--model", MODEL_MOUNT,
        "--host", "0.0.0.0",
        "--port", str(spec.port),
        *spec.server_args(),
    ]  # fmt: skip
    policy: dict[str, Any] = {"Name": spec.restart_policy}
    if spec.restart_policy == "on-failure":
        policy["MaximumRetryCount"] = 3
    kwargs: dict[str, Any] = {
        "image": image,
        "command": command,
        "name": container_name(host.name, spec.served_model_name),
        "detach": True,
        # Docker's init (tini) as PID 1: vLLM as PID 1 ignores SIGTERM until its API server installs a
        # handler, so stopping a server still loading always waited out the grace period; init
        # forwards the signal and reaps the engine's child processes.
        "init": True,
        "environment": env,
        "ipc_mode": "host",
        "ulimits": container_ulimits(host),
        "volumes": {str(model_dir): {"bind": MODEL_MOUNT, "mode": "ro"}},
        "ports": {f"{spec.port}/tcp": [(addr, spec.port) for addr in (host.bind_addrs or ["127.0.0.1"])]},
        "restart_policy": policy,
        "labels": {LABEL_MANAGED: "true", LABEL_HOST: host.name, LABEL_MODEL: spec.served_model_name,
                   LABEL_PORT: str(spec.port)},
    }
    if host.accelerator == "gpu":
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return kwargs


def container_start_plan(spec: ServeSpec, host: HostProfile, *, image: str) -> StartPlan:
    """What ``start_container`` would run for ``spec`` (``docker_run_kwargs``), environment by name."""
    kw = docker_run_kwargs(spec, host, image=image, api_key="(set)")
    ports = kw["ports"][f"{spec.port}/tcp"]
    policy = kw["restart_policy"]
    retries = f" (max {policy['MaximumRetryCount']} retries)" if "MaximumRetryCount" in policy else ""
    limits = ", ".join(f"{u['Name']}={u['Soft']}" for u in kw["ulimits"])
    return StartPlan(
        backend="docker", host=host.name, image=image, command=list(kw["command"]), env_names=sorted(kw["environment"]),
        port=spec.port, fixed_port=spec.fixed_port, bind_addrs=[addr for addr, _ in ports],
        restart_policy=f"{policy['Name']}{retries}",
        mounts=[f"{src} -> {m['bind']} ({m['mode']})" for src, m in kw["volumes"].items()],
        devices=["all GPUs (--gpus all)"] if "device_requests" in kw else [],
        options=[f"name {kw['name']}", f"ipc={kw['ipc_mode']}", "init (tini as PID 1)", f"ulimits {limits}",
                 "labels " + ", ".join(f"{k}={v}" for k, v in kw["labels"].items())],
    )


def _client_address(host: HostProfile, spec_host: str) -> str:
    """The address roost reaches a published port at. An engine on this machine: the spec's if published
    there, else the first (every address: loopback). An engine on another machine
    (``remote_engine_address``): its loopback is not this machine's, so the engine's own address when the
    port is published there or on every address, else the spec's or first other address published on; a
    UserError when it is published on loopback only (nothing here could reach the server)."""
    addrs = host.bind_addrs or ["127.0.0.1"]
    engine = remote_engine_address(host.docker_url)
    if engine is None:
        addr = spec_host if spec_host in addrs else addrs[0]
        return "127.0.0.1" if addr in ("0.0.0.0", "::") else addr
    reachable = [a for a in addrs if not is_loopback(a)]
    if not reachable:
        raise UserError(
            f"host {host.name}'s Docker engine is on another machine ({host.docker_url}) but its bind_addrs "
            f"({', '.join(addrs)}) publish vLLM's port on that machine's loopback only, which roost cannot reach "
            f"from here: add an address of it roost reaches (e.g. {engine}) to the host's bind_addrs")
    if engine in reachable or any(a in ("0.0.0.0", "::") for a in reachable):
        return engine
    return spec_host if spec_host in reachable else reachable[0]


def start_container(
    spec: ServeSpec,
    host: HostProfile,
    *,
    image: str,
    api_key: str | None,
    client: docker.DockerClient,
    replace_existing: bool = True,
    log: LogFn = _ignore,
) -> DockerServer:
    """Start vLLM for ``spec`` in a container on ``host`` and return at once; the container's log
    lines go to ``log`` as they come. Raises StartFailed (with a diagnosis) when Docker cannot start
    it, e.g. the port is taken."""
    kwargs = docker_run_kwargs(spec, host, image=image, api_key=api_key)
    name = kwargs["name"]
    address = _client_address(host, spec.host)  # before anything starts: a UserError when nothing here reaches it
    if not image_exists(client, image):
        raise StageFailed("serve", f"image {image} is not present on host {host.name}: run the build stage first")
    make_room(client, host, name, replace_existing=replace_existing, log=log)
    published = ", ".join(f"{a}:{spec.port}" for a in (host.bind_addrs or ["127.0.0.1"]))
    log(f"starting {name} from {image} on {published} (vLLM args: {' '.join(spec.vllm_args) or '-'})")
    try:
        container = client.containers.run(**kwargs)
    except APIError as exc:
        message = str(exc.explanation or exc)
        _discard(client, name)
        raise StartFailed(f"docker could not start {name}: {message}", diagnose(message, None)) from None
    return DockerServer(
        client, container, base_url=f"http://{address}:{spec.port}",
        served_model_name=spec.served_model_name, host_name=host.name, port=spec.port, image=image,
        model_dir=str(spec.model_dir.expanduser().resolve()), log=log,
    )


def _discard(client: docker.DockerClient, name: str) -> None:
    """Remove a container roost created but Docker could not start (it is ours: same name, our label)."""
    try:
        c = client.containers.get(name)
    except NotFound:
        return
    if _is_roost(c):
        c.remove(force=True)


def docker_servers(host: HostProfile, client: docker.DockerClient) -> list[ServerInfo]:
    """Running roost-managed containers on ``host``'s engine, oldest first; containers without
    roost's ``ai.roost.managed`` and ``ai.roost.host`` labels are never considered."""
    addr = _client_address(host, "")
    found: list[ServerInfo] = []
    for c in roost_containers(client, host.name, all=False):
        labels = c.labels or {}
        try:
            port = int(labels[LABEL_PORT])
        except (KeyError, ValueError):
            continue
        state = c.attrs.get("State", {})
        mounts = [m.get("Source") for m in c.attrs.get("Mounts", []) if m.get("Destination") == MODEL_MOUNT]
        started = state.get("StartedAt")
        found.append(ServerInfo(
            host=host.name, backend="docker", container=str(c.name), port=port,
            base_url=f"http://{addr}:{port}", served_model_name=labels.get(LABEL_MODEL, ""),
            image=str(c.attrs.get("Config", {}).get("Image", "")), log_location=f"docker logs {c.name}",
            started_at=parse_timestamp(str(started)) if started else None,
            model_dir=mounts[0] if mounts else None,
        ))
    found.sort(key=lambda s: s.started_at or dt.datetime.min.replace(tzinfo=dt.UTC))
    return found

