"""The ``docker`` serving backend: build the serving image, run vLLM in a container, watch it.

- ``build_image``: the Dockerfile from ``roost.serve.dockerfile`` built with the low-level
  ``APIClient.build(decode=True)``; every build line goes to a ``log`` callback (the Prefect logger
  in ``tasks/build.py``); a failing build raises StageFailed naming its step and last lines; an
  existing content-addressed tag skips the build and says so.
- ``start_docker_server``: ``containers.run`` the way the seeds' run.sh does (GPU device requests
  on GPU hosts, ipc=host, memlock/stack ulimits, checkpoint read-only at /model, port published on
  the host's bind addresses only, VLLM_API_KEY through the environment, a restart policy), under a
  stable name ``roost-<host>-<served name>`` with ``ai.roost.*`` labels. A roost-managed container
  already serving on that host is replaced (or refused, per policy); containers without the roost
  label are never touched.
- ``DockerServer``: the ServerHandle for such a container; ``stop()`` is idempotent and removes
  the container after keeping its final log and exit status.
- ``wait_healthy``: poll /health every 0.1 s while watching the container, so a dead container ends
  the wait at once with its diagnosis instead of running into the timeout.

Secrets: the API key only ever travels in the container's environment; it is never logged, put in
labels, the command line, exceptions or results.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, Field

from roost.errors import StageFailed, UserError
from roost.hosts import HostProfile
from roost.serve.base import ServerHandle, ServeSpec
from roost.serve.diagnose import Diagnosis, diagnose
from roost.serve.dockerfile import LABEL_MANAGED, BuildSpec, RenderedDockerfile, render_dockerfile
from roost.serve.phases import StartupPhases, parse_timestamp, split_timestamped, startup_phases

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container
    from docker.types import Ulimit

LABEL_HOST = "ai.roost.host"
LABEL_MODEL = "ai.roost.model"
LABEL_PORT = "ai.roost.port"
MODEL_MOUNT = "/model"
STACK_BYTES = 67108864  # the seeds' --ulimit stack=67108864
LogFn = Callable[[str], None]


def _noop(_: str) -> None:
    return None


class StartFailed(StageFailed):
    """The server did not come up; carries the classification of why."""

    def __init__(self, message: str, diagnosis: Diagnosis | None) -> None:
        super().__init__("serve", message)
        self.diagnosis = diagnosis


# --- the engine -----------------------------------------------------------------------------------


def docker_client(host: HostProfile | None = None, *, timeout: int = 300) -> docker.DockerClient:
    """A client for the host's Docker engine (``host.docker_url``), checked with a ping."""
    import docker
    from docker.errors import DockerException

    url = host.docker_url if host is not None else "unix:///var/run/docker.sock"
    try:
        client = docker.DockerClient(base_url=url, version="auto", timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise StageFailed(
            "docker", f"no Docker engine answers at {url} ({exc}); start it (scripts/docker-up) or fix the host's docker_url"
        ) from None
    return client


def container_name(host: str, served_model_name: str) -> str:
    """``roost-<host>-<served name>``, with characters Docker does not allow replaced by '-'."""
    raw = f"roost-{host}-{served_model_name}"
    name = re.sub(r"[^a-zA-Z0-9_.-]+", "-", raw).strip("-.")
    return name[:128]


# --- build ----------------------------------------------------------------------------------------


class BuildResult(BaseModel):
    """What the build stage produced (goes into the run record's meta and the report)."""

    tag: str
    image_id: str
    dockerfile_sha256: str
    base_image: str
    base_image_id: str
    base_image_digest: str = Field(description="The base's repo digest when it came from a registry, else ''.")
    xgrammar_version: str
    skipped: bool = Field(description="True when the tag already existed and nothing was built.")
    seconds: float
    steps: int = 0
    log_tail: list[str] = Field(default_factory=list)


def resolve_base_image(client: docker.DockerClient, base_image: str, *, pull: bool = True) -> tuple[str, str]:
    """(image id, repo digest or '') of the base image; pulled when absent and ``pull``."""
    from docker.errors import APIError, ImageNotFound

    try:
        image = client.images.get(base_image)
    except ImageNotFound:
        if not pull:
            raise StageFailed("build", f"base image {base_image} is not present locally") from None
        try:
            image = client.images.pull(base_image)
        except APIError as exc:
            raise StageFailed(
                "build",
                f"base image {base_image} is not present locally and cannot be pulled ({exc.explanation or exc}); "
                "pull or load it on the host (for the local CPU stand-in run scripts/build-test-base-image)",
            ) from None
    digests: list[str] = image.attrs.get("RepoDigests") or []
    return str(image.id), (digests[0] if digests else "")


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def render_for_engine(client: docker.DockerClient, spec: BuildSpec) -> tuple[RenderedDockerfile, str, str]:
    """Render with the base image's identity filled in: (rendered, base image id, base repo digest)."""
    base_id, base_digest = resolve_base_image(client, spec.base_image)
    filled = spec.model_copy(update={"base_image_digest": base_digest or base_id})
    return render_dockerfile(filled), base_id, base_digest


_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


def build_image(
    spec: BuildSpec,
    *,
    client: docker.DockerClient,
    log: LogFn = _noop,
    timeout_s: int = 3600,
    tail_lines: int = 20,
) -> BuildResult:
    """Build (or find) the serving image for ``spec``; every build line goes to ``log``."""
    t0 = time.monotonic()
    rendered, base_id, base_digest = render_for_engine(client, spec)

    def result(image_id: str, *, skipped: bool, steps: int = 0, log_tail: list[str] | None = None) -> BuildResult:
        return BuildResult(
            tag=rendered.tag,
            image_id=image_id,
            dockerfile_sha256=rendered.sha256,
            base_image=spec.base_image,
            base_image_id=base_id,
            base_image_digest=base_digest,
            xgrammar_version=spec.xgrammar_version,
            skipped=skipped,
            seconds=round(time.monotonic() - t0, 3),
            steps=steps,
            log_tail=log_tail or [],
        )

    if image_exists(client, rendered.tag):
        image = client.images.get(rendered.tag)
        log(f"image {rendered.tag} already exists (Dockerfile sha256 {rendered.sha256[:12]}); build skipped")
        return result(str(image.id), skipped=True)

    log(f"building {rendered.tag} FROM {spec.base_image} (xgrammar=={spec.xgrammar_version})")
    from docker.errors import APIError

    api = client.api
    tail: deque[str] = deque(maxlen=tail_lines)
    step = "before the first step"
    steps = 0
    image_id = ""
    api_timeout = api.timeout
    try:
        api.timeout = timeout_s
        stream = api.build(
            fileobj=io.BytesIO(rendered.text.encode()),
            tag=rendered.tag,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            labels=rendered.labels,
            buildargs=rendered.build_args or None,
        )
        for chunk in stream:
            if "stream" in chunk:
                for line in str(chunk["stream"]).splitlines():
                    line = line.rstrip()
                    if not line:
                        continue
                    m = _STEP.match(line)
                    if m:
                        step = line
                        steps = int(m.group(1))
                    tail.append(line)
                    log(line)
            if "error" in chunk:
                error = str(chunk.get("errorDetail", {}).get("message") or chunk["error"]).strip()
                last = " | ".join(tail)
                raise StageFailed("build", f"docker build of {rendered.tag} failed at {step!r}: {error}. Last lines: {last}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = str(aux["ID"])
    except APIError as exc:
        raise StageFailed("build", f"docker build of {rendered.tag} failed at {step!r}: {exc.explanation or exc}") from None
    finally:
        api.timeout = api_timeout
    if not image_id:
        image_id = str(client.images.get(rendered.tag).id)
    built = result(image_id, skipped=False, steps=steps, log_tail=list(tail))
    log(f"built {rendered.tag} ({image_id[:19]}) in {built.seconds:.1f} s")
    return built


# --- serve ----------------------------------------------------------------------------------------


class DockerServer:
    """A vLLM server in a roost-managed container (implements roost.serve.base.ServerHandle)."""

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
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.served_model_name = served_model_name
        self.host_name = host_name
        self.port = port
        self.image = image
        self.name = str(container.name)
        self.id = str(container.id)
        self._container: Container | None = container
        self._final_logs: str | None = None
        self._final_ts_logs: str | None = None
        self._final_state: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # state
    def state(self) -> dict[str, Any]:
        """Docker's State of the container (Status, ExitCode, OOMKilled, StartedAt...)."""
        if self._final_state is not None:
            return self._final_state
        from docker.errors import NotFound

        assert self._container is not None
        try:
            self._container.reload()
        except NotFound:
            return {"Status": "removed", "Running": False, "ExitCode": None, "OOMKilled": False}
        return dict(self._container.attrs.get("State", {}))

    def is_running(self) -> bool:
        st = self.state()
        return bool(st.get("Running")) and not st.get("Restarting", False)

    def exit_code(self) -> int | None:
        st = self.state()
        if st.get("Running") or st.get("Status") in ("created", "removed"):
            return None
        code = st.get("ExitCode")
        return int(code) if code is not None else None

    def oom_killed(self) -> bool:
        return bool(self.state().get("OOMKilled"))

    def started_at(self) -> dt.datetime:
        return parse_timestamp(str(self.state().get("StartedAt")))

    # logs
    def logs(self) -> str:
        if self._final_logs is not None:
            return self._final_logs
        assert self._container is not None
        from docker.errors import NotFound

        try:
            return bytes(self._container.logs(stdout=True, stderr=True)).decode("utf-8", errors="replace")
        except NotFound:
            return ""

    def timestamped_logs(self) -> str:
        """``docker logs --timestamps``: every line prefixed with the daemon's RFC 3339 time."""
        if self._final_ts_logs is not None:
            return self._final_ts_logs
        assert self._container is not None
        from docker.errors import NotFound

        try:
            return bytes(self._container.logs(stdout=True, stderr=True, timestamps=True)).decode("utf-8", errors="replace")
        except NotFound:
            return ""

    def follow_logs(self) -> Iterator[str]:
        """Yield log lines as the container writes them, until it stops (from the first line)."""
        if self._container is None or self._final_logs is not None:
            yield from self.logs().splitlines()
            return
        yield from stream_container_logs(self._container)

    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        """Classify why this server failed (None when nothing shows a failure)."""
        return diagnose(self.logs(), self.exit_code(), oom_killed=self.oom_killed(), timed_out=timed_out)

    def phases(self, healthy_seen_at: dt.datetime | None) -> StartupPhases:
        """Start -> healthy split into load / compile / ready from the container's timestamped log."""
        return startup_phases(split_timestamped(self.timestamped_logs()), self.started_at(), healthy_seen_at)

    # teardown
    def stop(self, timeout_s: int = 15) -> None:
        """Stop and remove the container; keep its last log and state. Idempotent."""
        with self._lock:
            if self._container is None:
                return
            from docker.errors import APIError, NotFound

            container = self._container
            try:
                container.stop(timeout=timeout_s)
            except NotFound:
                pass
            except APIError:
                pass  # already stopping/exited; removal below forces it
            try:
                container.reload()
                self._final_state = dict(container.attrs.get("State", {}))
                self._final_logs = bytes(container.logs(stdout=True, stderr=True)).decode("utf-8", errors="replace")
                self._final_ts_logs = bytes(container.logs(stdout=True, stderr=True, timestamps=True)).decode(
                    "utf-8", errors="replace"
                )
            except NotFound:  # removed by someone else (e.g. replaced by a newer roost run): nothing left to read
                self._final_state = {"Status": "removed", "Running": False, "ExitCode": None, "OOMKilled": False}
                self._final_logs = self._final_logs or ""
                self._final_ts_logs = self._final_ts_logs or ""
            with contextlib.suppress(NotFound):
                container.remove(force=True)
            self._container = None

    def __enter__(self) -> DockerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stream_container_logs(container: Container, *, since: dt.datetime | None = None) -> Iterator[str]:
    """Lines of a container's log as they arrive (follow), from the start or ``since``; ends when it stops."""
    buf = b""
    kwargs: dict[str, Any] = {"stream": True, "follow": True, "stdout": True, "stderr": True}
    if since is not None:
        kwargs["since"] = since
    stream = container.logs(**kwargs)
    try:
        for chunk in stream:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode("utf-8", errors="replace").rstrip("\r")
        if buf:
            yield buf.decode("utf-8", errors="replace")
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # a consumer that stops early must not leave the HTTP stream open


def pump_logs(server: DockerServer, sink: LogFn) -> threading.Thread:
    """Follow the server's log in a daemon thread, each line to ``sink`` (e.g. a Prefect logger)."""

    def run() -> None:
        try:
            for line in server.follow_logs():
                sink(line)
        except Exception as exc:  # the container went away mid-stream
            sink(f"(log stream ended: {type(exc).__name__})")

    t = threading.Thread(target=run, name=f"logs-{server.name}", daemon=True)
    t.start()
    return t


def roost_containers(client: docker.DockerClient, host: str | None = None, *, all: bool = True) -> list[Container]:
    """Containers carrying roost's label (optionally for one host); nothing else is ever listed."""
    labels = [f"{LABEL_MANAGED}=true"]
    if host is not None:
        labels.append(f"{LABEL_HOST}={host}")
    return list(client.containers.list(all=all, filters={"label": labels}))


def _is_roost(container: Container) -> bool:
    return (container.labels or {}).get(LABEL_MANAGED) == "true"


def _remove(container: Container, log: LogFn, why: str) -> None:
    from docker.errors import NotFound

    log(f"stopping roost container {container.name} ({why})")
    try:
        container.stop(timeout=15)
        container.remove(force=True)
    except NotFound:
        pass


def _make_room(
    client: docker.DockerClient, host: HostProfile, name: str, *, replace_existing: bool, log: LogFn
) -> None:
    """Clear the way for ``name`` on ``host``: replace roost's own containers, never anyone else's."""
    from docker.errors import NotFound

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


def _port_bindings(bind_addrs: list[str], port: int) -> dict[str, list[tuple[str, int]]]:
    return {f"{port}/tcp": [(addr, port) for addr in bind_addrs]}


def container_ulimits(host: HostProfile) -> list[Ulimit]:
    """The seeds' ``--ulimit memlock=-1 --ulimit stack=67108864``; memlock only on GPU hosts.

    Unlimited locked memory is for CUDA's pinned host buffers. A CPU host has no use for it, and an
    engine without CAP_SYS_RESOURCE (like these test machines: hard memlock 8 MiB) cannot grant it:
    runc fails with "error setting rlimit type 8: operation not permitted".
    """
    from docker.types import Ulimit

    limits = [Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES)]
    if host.accelerator == "gpu":
        limits.insert(0, Ulimit(name="memlock", soft=-1, hard=-1))
    return limits


def docker_run_kwargs(
    spec: ServeSpec,
    host: HostProfile,
    *,
    image: str,
    api_key: str | None,
    restart_policy: str = "no",
) -> dict[str, Any]:
    """The ``containers.run`` arguments for ``spec`` on ``host`` (the key only in ``environment``)."""
    from docker.types import DeviceRequest

    if restart_policy not in ("no", "always", "unless-stopped", "on-failure"):
        raise UserError(
            f"restart policy {restart_policy!r} is not one of no, always, unless-stopped, on-failure (the seeds use unless-stopped)"
        )
    model_dir = spec.model_dir.expanduser().resolve()
    if not model_dir.is_dir():
        raise UserError(f"checkpoint directory {model_dir} does not exist: download it first or fix --model-dir")
    bind_addrs = host.bind_addrs or ["127.0.0.1"]
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", **spec.env}
    if "VLLM_API_KEY" in spec.env:
        raise UserError("ServeSpec.env must not carry VLLM_API_KEY: pass the key as api_key (it comes from a Secret block)")
    if api_key:
        env["VLLM_API_KEY"] = api_key
    command = [
        "python3", "-m", "vllm.entrypoints.openai.api_server",
        "--model", MODEL_MOUNT,
        "--host", "0.0.0.0",
        "--port", str(spec.port),
        *spec.server_args(),
    ]  # fmt: skip
    kwargs: dict[str, Any] = {
        "image": image,
        "command": command,
        "name": container_name(host.name, spec.served_model_name),
        "detach": True,
        "environment": env,
        "ipc_mode": "host",
        "ulimits": container_ulimits(host),
        "volumes": {str(model_dir): {"bind": MODEL_MOUNT, "mode": "ro"}},
        "ports": _port_bindings(bind_addrs, spec.port),
        "restart_policy": {"Name": restart_policy, **({"MaximumRetryCount": 3} if restart_policy == "on-failure" else {})},
        "labels": {
            LABEL_MANAGED: "true",
            LABEL_HOST: host.name,
            LABEL_MODEL: spec.served_model_name,
            LABEL_PORT: str(spec.port),
        },
    }
    if host.accelerator == "gpu":
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return kwargs


def start_docker_server(
    spec: ServeSpec,
    host: HostProfile,
    *,
    image: str,
    api_key: str | None,
    restart_policy: str = "no",
    replace_existing: bool = True,
    client: docker.DockerClient | None = None,
    log: LogFn = _noop,
) -> DockerServer:
    """Start vLLM for ``spec`` in a container on ``host``; returns at once (wait with ``wait_healthy``).

    Raises StartFailed (with a diagnosis) when Docker cannot start it, e.g. the port is taken.
    """
    from docker.errors import APIError

    client = client or docker_client(host)
    kwargs = docker_run_kwargs(spec, host, image=image, api_key=api_key, restart_policy=restart_policy)
    name = kwargs["name"]
    if not image_exists(client, image):
        raise StageFailed("serve", f"image {image} is not present on host {host.name}: run the build stage first")
    _make_room(client, host, name, replace_existing=replace_existing, log=log)
    published = ", ".join(f"{a}:{spec.port}" for a in (host.bind_addrs or ["127.0.0.1"]))
    log(f"starting {name} from {image} on {published} (vLLM args: {' '.join(spec.vllm_args) or '-'})")
    try:
        container = client.containers.run(**kwargs)
    except APIError as exc:
        message = str(exc.explanation or exc)
        _discard(client, name)
        found = diagnose(message, None)
        raise StartFailed(f"docker could not start {name}: {message}", found) from None
    addr = spec.host if spec.host in (host.bind_addrs or []) else (host.bind_addrs or ["127.0.0.1"])[0]
    if addr in ("0.0.0.0", "::"):
        addr = "127.0.0.1"
    return DockerServer(
        client,
        container,
        base_url=f"http://{addr}:{spec.port}",
        served_model_name=spec.served_model_name,
        host_name=host.name,
        port=spec.port,
        image=image,
    )


def _discard(client: docker.DockerClient, name: str) -> None:
    """Remove a container roost created but Docker could not start (it is ours: same name, our label)."""
    from docker.errors import NotFound

    try:
        c = client.containers.get(name)
    except NotFound:
        return
    if _is_roost(c):
        c.remove(force=True)


# --- health wait (container-aware) ----------------------------------------------------------------


class HealthWait(BaseModel):
    """How a wait for /health ended."""

    healthy: bool
    seconds: float = Field(description="Wait start -> end.")
    healthy_seen_at: dt.datetime | None = Field(default=None, description="Wall time roost saw /health 200 (UTC).")
    polls: int = 0
    timed_out: bool = False
    exit_code: int | None = None
    oom_killed: bool = False
    diagnosis: Diagnosis | None = None


def _diagnose_handle(server: ServerHandle, *, timed_out: bool = False) -> Diagnosis | None:
    oom = getattr(server, "oom_killed", None)
    return diagnose(server.logs(), server.exit_code(), oom_killed=bool(oom()) if callable(oom) else False,
                    timed_out=timed_out)


def wait_healthy(
    server: ServerHandle,
    *,
    timeout_s: float,
    poll_s: float = 0.1,
    container_check_every: int = 5,
    api_key: str | None = None,
) -> HealthWait:
    """Poll ``/health`` every ``poll_s`` until 200; stop early when the server (container) exits.

    Works for any ServerHandle; the container's state is read only every ``container_check_every``
    polls (a Docker API call), the health endpoint every poll, so the 200 is seen within about one
    ``poll_s``. A failed wait carries the diagnosis (exit status, OOMKilled, log). /health needs no
    key in vLLM, but one is sent when given so a proxy in front would not refuse it.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    polls = 0
    with httpx.Client(timeout=httpx.Timeout(2.0, connect=0.5), headers=headers) as http:
        while True:
            polls += 1
            try:
                r = http.get(f"{server.base_url}/health")
                if r.status_code == 200:
                    seen = dt.datetime.now(dt.UTC)
                    return HealthWait(healthy=True, seconds=round(time.monotonic() - t0, 3), healthy_seen_at=seen, polls=polls)
            except httpx.HTTPError:
                pass
            checked = polls % container_check_every == 0
            if checked and not server.is_running():
                return HealthWait(
                    healthy=False,
                    seconds=round(time.monotonic() - t0, 3),
                    polls=polls,
                    exit_code=server.exit_code(),
                    oom_killed=bool(getattr(server, "oom_killed", lambda: False)()),
                    diagnosis=_diagnose_handle(server),
                )
            if time.monotonic() >= deadline:
                return HealthWait(
                    healthy=False,
                    seconds=round(time.monotonic() - t0, 3),
                    polls=polls,
                    timed_out=True,
                    diagnosis=_diagnose_handle(server, timed_out=True),
                )
            if not checked:  # the engine call already took time: poll /health again at once
                time.sleep(poll_s)
