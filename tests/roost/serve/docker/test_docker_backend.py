"""The docker backend end to end on a real engine: the build stage's image (local vLLM CPU base +
xgrammar patch) serves the generated tiny model in a roost-managed container, and a streamed chat
completion comes back through the published port. One served container for the module."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from roost.errors import StageFailed, UserError
from roost.hosts import CPU, HostProfile
from roost.net import free_port
from roost.serve.base import ServerHandle, ServeSpec
from roost.serve.docker_backend import (
    LABEL_HOST,
    LABEL_MODEL,
    BuildResult,
    DockerServer,
    HealthWait,
    build_image,
    container_name,
    roost_containers,
    start_docker_server,
    wait_healthy,
)
from roost.serve.dockerfile import LABEL_MANAGED, BuildSpec

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]

KEY = "docker-test-key-0123456789"


def cpu_host(name: str, base_image: str) -> HostProfile:
    return CPU.model_copy(update={"name": name, "backend": "docker", "base_image": base_image})


class Served:
    def __init__(self, build: BuildResult, build_log: list[str], server: DockerServer, wait: HealthWait,
                 host: HostProfile, spec: ServeSpec) -> None:
        self.build, self.build_log, self.server, self.wait, self.host, self.spec = build, build_log, server, wait, host, spec


@pytest.fixture(scope="module")
def served(docker_engine: docker.DockerClient, base_image: str, docker_tiny_model: Path) -> Iterator[Served]:
    host = cpu_host("dtest", base_image)
    build_log: list[str] = []
    build = build_image(BuildSpec(base_image=base_image), client=docker_engine, log=build_log.append)
    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048"],
                     env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    server = start_docker_server(spec, host, image=build.tag, api_key=KEY, client=docker_engine)
    try:
        wait = wait_healthy(server, timeout_s=900)
        assert wait.healthy, f"container did not get healthy: {wait.diagnosis}\n{server.logs()[-3000:]}"
        yield Served(build, build_log, server, wait, host, spec)
    finally:
        server.stop()


def test_build_stage_image_from_local_base(served: Served, docker_engine: docker.DockerClient) -> None:
    b = served.build
    image = docker_engine.images.get(b.tag)
    labels = image.labels
    assert b.tag.startswith("roost/vllm:") and b.tag.endswith(b.dockerfile_sha256[:12])
    assert labels[LABEL_MANAGED] == "true" and labels["ai.roost.xgrammar-version"] == "0.2.8"
    assert labels["ai.roost.base-image"] == b.base_image and labels["ai.roost.base-digest"] == b.base_image_id
    assert b.base_image_id == docker_engine.images.get(b.base_image).id
    if not b.skipped:  # the patch step's verification printed the version during the build
        assert any(line.startswith("xgrammar 0.2.8 imports from") for line in served.build_log), served.build_log


def test_second_build_is_skipped_and_says_so(served: Served, docker_engine: docker.DockerClient) -> None:
    log: list[str] = []
    again = build_image(BuildSpec(base_image=served.build.base_image), client=docker_engine, log=log.append)
    assert again.skipped and again.tag == served.build.tag and again.image_id == served.build.image_id
    assert log == [f"image {again.tag} already exists (Dockerfile sha256 {again.dockerfile_sha256[:12]}); build skipped"]


def test_streamed_chat_completion_through_the_published_port(served: Served) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hello to the harbour."}],
            "max_tokens": 16, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    chunks: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{served.server.base_url}/v1/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 16
    assert sum(1 for c in chunks if c.get("choices")) >= 2  # really streamed, not one blob


def test_api_key_required_and_never_logged(served: Served, docker_engine: docker.DockerClient) -> None:
    r = httpx.get(f"{served.server.base_url}/v1/models", timeout=10)
    assert r.status_code == 401
    r = httpx.get(f"{served.server.base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert [m["id"] for m in r.json()["data"]] == ["tiny"]
    attrs = docker_engine.containers.get(served.server.name).attrs
    assert f"VLLM_API_KEY={KEY}" in attrs["Config"]["Env"]  # travels in the environment only
    assert KEY not in " ".join(attrs["Config"]["Cmd"]) and KEY not in json.dumps(attrs["Config"]["Labels"])
    assert KEY not in served.server.logs()


def test_container_runs_the_way_the_seeds_do(served: Served, docker_engine: docker.DockerClient) -> None:
    c = docker_engine.containers.get(served.server.name)
    hc = c.attrs["HostConfig"]
    assert c.name == container_name("dtest", "tiny") == "roost-dtest-tiny"
    assert c.labels[LABEL_MANAGED] == "true" and c.labels[LABEL_HOST] == "dtest" and c.labels[LABEL_MODEL] == "tiny"
    assert hc["IpcMode"] == "host"
    assert {u["Name"]: u["Hard"] for u in hc["Ulimits"]} == {"stack": 67108864}  # memlock only on GPU hosts
    assert not hc.get("DeviceRequests")  # CPU host: no GPU request
    assert hc["RestartPolicy"]["Name"] == "no"
    mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
    assert mounts["/model"]["RW"] is False and Path(mounts["/model"]["Source"]) == served.spec.model_dir.resolve()
    port = served.spec.port
    assert hc["PortBindings"] == {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    assert served.server.base_url == f"http://127.0.0.1:{port}"
    # published on loopback only: another local address of this machine does not answer
    other = _non_loopback_address()
    if other is not None:
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://{other}:{port}/health", timeout=2)


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_server_handle_protocol_and_state(served: Served) -> None:
    handle: ServerHandle = served.server  # type-checks against the protocol
    assert handle.is_running() and handle.exit_code() is None and handle.served_model_name == "tiny"
    assert "Application startup complete" in handle.logs()
    # follow_logs streams from the first line and keeps following a running container
    for n, line in enumerate(served.server.follow_logs()):
        if "Application startup complete" in line:
            break
        assert n < 10_000
    else:
        pytest.fail("follow_logs ended before the startup line")


def test_startup_split_and_health_detection_delay(served: Served) -> None:
    p = served.server.phases(served.wait.healthy_seen_at)
    assert p.load_s is not None and p.compile_s is not None and p.ready_s is not None
    assert p.load_s > 0 and p.compile_s > 0 and p.ready_s >= 0
    assert p.start_to_healthy_s is not None
    assert p.load_s + p.compile_s + p.ready_s == pytest.approx(p.start_to_healthy_s, abs=0.01)
    assert p.health_detect_delay_s is not None and 0 <= p.health_detect_delay_s < 0.5
    print(f"\nstart->healthy {p.start_to_healthy_s:.1f} s = load {p.load_s:.1f} + compile {p.compile_s:.1f} "
          f"+ ready {p.ready_s:.2f}; /health detection delay {p.health_detect_delay_s * 1000:.0f} ms")


def test_one_server_per_host_and_foreign_containers_untouched(
    served: Served, docker_engine: docker.DockerClient, base_image: str, docker_tiny_model: Path
) -> None:
    host = served.host
    other = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny-b", port=free_port())
    # policy "do not replace": refused while roost's container serves on the host
    with pytest.raises(StageFailed, match="roost-dtest-tiny already serves on host dtest"):
        start_docker_server(other, host, image=served.build.tag, api_key=None, replace_existing=False,
                            client=docker_engine)
    # a container roost did not start, squatting on the name roost would use: refused, left alone
    squatter = docker_engine.containers.create(base_image, ["sleep", "60"], name=container_name("dtest", "tiny-b"))
    try:
        with pytest.raises(UserError, match="roost did not start"):
            start_docker_server(other, host, image=served.build.tag, api_key=None, client=docker_engine)
        squatter.reload()
        assert squatter.status == "created"
    finally:
        squatter.remove(force=True)
    assert [c.name for c in roost_containers(docker_engine, "dtest")] == ["roost-dtest-tiny"]


def test_zz_replacing_stops_the_serving_container_and_stop_is_idempotent(
    served: Served, docker_engine: docker.DockerClient, docker_tiny_model: Path
) -> None:
    """Runs last in the module (zz): it replaces the module's server."""
    from docker.errors import NotFound

    other = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny-b", port=free_port(),
                      env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    log: list[str] = []
    second = start_docker_server(other, served.host, image=served.build.tag, api_key=None, client=docker_engine,
                                 log=log.append)
    try:
        deadline = time.monotonic() + 120
        while not second.logs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert second.logs(), "the replacement container never wrote a line"
        assert any("stopping roost container roost-dtest-tiny (replaced: one server per host)" in line for line in log)
        with pytest.raises(NotFound):
            docker_engine.containers.get("roost-dtest-tiny")
        assert not served.server.is_running() and served.server.exit_code() is None  # removed by someone else
        assert [c.name for c in roost_containers(docker_engine, "dtest")] == ["roost-dtest-tiny-b"]
    finally:
        second.stop()
        second.stop()  # idempotent
    with pytest.raises(NotFound):
        docker_engine.containers.get("roost-dtest-tiny-b")
    assert second.logs()  # the final log survives the removal
    assert second.exit_code() is not None and not second.is_running()
