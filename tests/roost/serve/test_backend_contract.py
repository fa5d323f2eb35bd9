"""The serving lifecycle contract, the same checks against both backends on the real tiny model:
prepare, start, the one health wait (reading the log incrementally), describe, discovery, start-up
phases, the API key's path, stop. One server per backend for the module (started by the fixture,
stopped by the last test); the process backend runs first, then the docker one."""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound

from roost.hosts import CPU, CPU_DOCKER
from roost.net import free_port
from roost.serve.base import Backend, Prepared, Readiness, Server, ServerInfo, ServeSpec
from roost.serve.diagnose import Diagnosis
from roost.serve.docker.backend import DockerBackend
from roost.serve.health import wait_until_ready
from roost.serve.phases import StartupPhases
from roost.serve.process import ProcessBackend
from roost.vllm.client import ModelsAnswer, VllmClient, run_sync

pytestmark = pytest.mark.slow

KEY = "contract-key-" + "0123456789abcdef"
VLLM_ARGS = ["--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"]


class Recorded(Server):
    """The started server as the wait sees it, keeping every piece of log text the wait was handed."""

    def __init__(self, inner: Server) -> None:
        self.inner, self.base_url, self.served_model_name = inner, inner.base_url, inner.served_model_name
        self.pieces: list[str] = []

    def new_log_text(self) -> str:
        text = self.inner.new_log_text()
        self.pieces.append(text)
        return text

    def is_running(self) -> bool:
        return self.inner.is_running()

    def exit_code(self) -> int | None:
        return self.inner.exit_code()

    def logs(self) -> str:
        return self.inner.logs()

    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        return self.inner.diagnose(timed_out=timed_out)

    def phases(self, ready: Readiness) -> StartupPhases:
        return self.inner.phases(ready)

    def describe(self) -> ServerInfo:
        return self.inner.describe()

    def stop(self, grace_s: float | None = None) -> None:
        self.inner.stop(grace_s)

    def clear_compile_cache(self, entry: str) -> str:
        return self.inner.clear_compile_cache(entry)


@dataclass
class Lifecycle:
    kind: str
    backend: Backend
    prepared: Prepared
    spec: ServeSpec
    server: Server
    waited: Recorded
    ready: Readiness
    said: list[str]
    engine: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module", params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def lc(request: pytest.FixtureRequest, tiny_model: Path) -> Iterator[Lifecycle]:
    engine = None
    backend: Backend
    if request.param == "docker":
        engine = request.getfixturevalue("docker_engine")
        host = CPU_DOCKER.model_copy(update={"name": "contract", "base_image": request.getfixturevalue("base_image")})
        backend = DockerBackend(host, client=engine)
        model, env = request.getfixturevalue("docker_tiny_model"), {"VLLM_CPU_KVCACHE_SPACE": "1"}
    else:
        backend = ProcessBackend(CPU.model_copy(update={"name": "contract"}))
        model, env = tiny_model, {}
    prepared = backend.prepare()
    spec = ServeSpec(model_dir=model, served_model_name="tiny", port=free_port(), vllm_args=VLLM_ARGS, env=env)
    said: list[str] = []
    server = backend.start(spec, KEY, prepared, log=said.append)
    try:
        waited = Recorded(server)
        ready = wait_until_ready(waited, api_key=KEY, timeout_s=900)
        yield Lifecycle(request.param, backend, prepared, spec, server, waited, ready, said, engine)
    finally:
        server.stop()


def test_prepare(lc: Lifecycle) -> None:
    if lc.kind == "process":
        assert (lc.prepared.skipped, lc.prepared.image, lc.backend.prepare_key()) == (True, "", None)
    else:
        key = lc.backend.prepare_key()
        assert key is not None and re.fullmatch(r"roost-build-[0-9a-f]{64}", key)
        assert lc.prepared.image == f"roost/vllm:{key.removeprefix('roost-build-')[:12]}" and not lc.prepared.skipped
    assert lc.backend.is_prepared()


def test_ready_means_all_three_steps_in_order(lc: Lifecycle) -> None:
    r = lc.ready
    assert 0 < r.health_ok_s <= r.models_ok_s <= r.completion_ok_s < 900 and r.polls >= 1
    assert {"engine starting", "weights loaded", "KV cache sized", "API server up"} <= {m.name for m in r.milestones}
    assert lc.server.is_running() and lc.server.exit_code() is None


def _lines(text: str) -> list[str]:
    return [line for line in re.split(r"\r\n|\r|\n", text) if line.strip()]


def test_the_wait_read_the_log_incrementally_and_nothing_twice(lc: Lifecycle) -> None:
    pieces = lc.waited.pieces
    assert len(pieces) == lc.ready.polls + 1  # one read of new text per poll, and one at ready
    assert sum(1 for p in pieces if p) >= 3  # the log arrived over several polls, not at once
    read = "".join(pieces) + lc.server.new_log_text()
    whole = lc.server.logs()
    assert whole.startswith(read) and "Application startup complete" in read  # nothing lost or repeated
    # and it is the server's own log, line for line: the log file, or what the engine keeps
    info = lc.server.describe()
    if lc.kind == "process":
        truth = Path(info.log_location).read_text(errors="replace")
    else:
        truth = lc.engine.containers.get(info.container).logs().decode(errors="replace")
    assert _lines(truth)[: len(_lines(whole))] == _lines(whole)
    # every line also went to the log callback given to start, prefixed with the server's name
    prefix = f"[vllm {info.pid}] " if lc.kind == "process" else f"[{info.container}] "
    assert [s.removeprefix(prefix) for s in lc.said if s.startswith(prefix)][: len(_lines(read))] == _lines(read)


def test_describe(lc: Lifecycle) -> None:
    info = lc.server.describe()
    assert (info.backend, info.host, info.port, info.served_model_name) == (lc.kind, "contract", lc.spec.port, "tiny")
    assert info.base_url == lc.server.base_url == f"http://127.0.0.1:{lc.spec.port}"
    assert info.started_at is not None and abs(info.started_at - dt.datetime.now(dt.UTC)) < dt.timedelta(hours=1)
    if lc.kind == "process":
        assert info.pid is not None and info.container is None and Path(info.log_location).is_file()
        assert info.model_dir == str(lc.spec.model_dir)
    else:
        assert (info.pid, info.container, info.image) == (None, "roost-contract-tiny", lc.prepared.image)
        assert info.log_location == "docker logs roost-contract-tiny"
        assert info.model_dir == str(lc.spec.model_dir.resolve())


def test_servers_finds_it(lc: Lifecycle) -> None:
    (found,) = lc.backend.servers()
    info = lc.server.describe()
    assert found.model_dump(exclude={"started_at"}) == info.model_dump(exclude={"started_at"})
    assert found.started_at is not None and info.started_at is not None
    assert abs(found.started_at - info.started_at) < dt.timedelta(seconds=5)


def test_start_plan_is_what_started(lc: Lifecycle) -> None:
    """``roost run --dry-run`` shows exactly the command, environment and image the start used."""
    plan = lc.backend.start_plan(lc.spec)
    info = lc.server.describe()
    if lc.kind == "process":
        assert info.pid is not None
        cmdline = Path(f"/proc/{info.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        environ = Path(f"/proc/{info.pid}/environ").read_bytes().decode().split("\0")
        env_names = {e.split("=", 1)[0] for e in environ if e}
        assert (plan.image, plan.restart_policy.startswith("none")) == ("", True)
    else:
        attrs = lc.engine.containers.get(info.container).attrs
        cmdline = [*attrs["Config"]["Cmd"]]
        env_names = {e.split("=", 1)[0] for e in attrs["Config"]["Env"]}
        assert plan.image == lc.prepared.image and plan.restart_policy == "no"
        assert plan.bind_addrs == ["127.0.0.1"] and plan.mounts == [f"{lc.spec.model_dir.resolve()} -> /model (ro)"]
    assert plan.command == cmdline
    assert set(plan.env_names) <= env_names and "VLLM_API_KEY" in plan.env_names
    assert KEY not in plan.model_dump_json()


def test_occupants_are_what_roost_did_not_start(lc: Lifecycle) -> None:
    # roost's own server on a fixed port is not an occupant (retire stops it, with its restart policy moved)
    own = lc.spec.model_copy(update={"fixed_port": True, "served_model_name": "other"})
    assert lc.backend.occupants(own) == []
    with socket.socket() as squatter:  # a process roost did not start, on another fixed port
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        fixed = lc.spec.model_copy(update={"port": port, "fixed_port": True})
        (occ,) = lc.backend.occupants(fixed)
        assert (occ.kind, occ.holds, occ.can_stop) == ("process", [f"port {port}"], False)
        assert lc.backend.occupants(fixed.model_copy(update={"fixed_port": False})) == []  # a free port is moved
    mem = lc.backend.available_memory_bytes()
    assert mem is not None and 0 < mem <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_phases_split_start_to_healthy(lc: Lifecycle) -> None:
    p = lc.server.phases(lc.ready)
    assert p.load_s is not None and p.compile_s is not None and p.ready_s is not None
    assert p.start_to_healthy_s is not None and p.start_to_healthy_s > 0
    assert p.load_s > 0 and p.compile_s > 0 and p.ready_s >= 0
    assert p.load_s + p.compile_s + p.ready_s == pytest.approx(p.start_to_healthy_s, abs=0.01)
    assert p.engine_init_s is not None and p.weights_read_s is not None  # vLLM's own figures were read
    assert p.health_detect_delay_s is not None


def _models(base_url: str, key: str | None) -> ModelsAnswer:
    async def ask() -> ModelsAnswer:
        async with VllmClient(base_url, api_key=key) as client:
            return await client.models()

    return run_sync(ask)


def test_the_api_key_is_required_and_travels_in_the_environment_only(lc: Lifecycle) -> None:
    assert _models(lc.server.base_url, None).status_code == 401
    assert _models(lc.server.base_url, "wrong").status_code == 401
    assert _models(lc.server.base_url, KEY).ids == ["tiny"]
    info = lc.server.describe()
    if lc.kind == "process":
        environ = Path(f"/proc/{info.pid}/environ").read_bytes().split(b"\0")
        argv = Path(f"/proc/{info.pid}/cmdline").read_bytes().decode()
    else:
        config = lc.engine.containers.get(info.container).attrs["Config"]
        environ, argv = [e.encode() for e in config["Env"]], " ".join(config["Cmd"]) + str(config["Labels"])
    assert f"VLLM_API_KEY={KEY}".encode() in environ and KEY not in argv
    assert KEY not in lc.server.logs() and not any(KEY in s for s in lc.said)


def test_zz_stop_is_idempotent_and_keeps_the_final_log(lc: Lifecycle) -> None:
    """Runs last for each backend (zz): it stops the module's server."""
    before = lc.server.logs()
    lc.server.stop()
    lc.server.stop()
    assert not lc.server.is_running() and lc.server.exit_code() is not None
    after = lc.server.logs()
    assert after.startswith(before) and "Application startup complete" in after
    assert lc.backend.servers() == []
    if lc.kind == "docker":
        with pytest.raises(NotFound):
            lc.engine.containers.get(lc.server.describe().container)
