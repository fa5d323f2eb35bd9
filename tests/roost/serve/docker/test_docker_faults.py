"""Cold-load failures with real containers, each reproducing the failure's exit status and log.

- out_of_memory: a real OOM kill (cgroup memory limit), exit 137 with OOMKilled=true.
- a server that dies while the health wait runs: the wait ends at once, the diagnosis follows.
- a failing build: a pinned xgrammar pip cannot find, the real `docker build` error; a base without
  vLLM (refused before building); a missing base image.
- the classes whose trigger needs hardware or checkpoints this machine does not have (a vision
  checkpoint without its tower, an MTP config without MTP weights, CUDA OOM) are FAKED: a container
  from the base image prints vLLM 0.32's exact line (from its source) and exits 1 the way vLLM does.

kv_pool_too_small, port_in_use and health_timeout come from real vLLM and real ports in the cold-load
retry tests (test_coldload_docker.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.wait import poll

from roost.errors import StageFailed
from roost.hosts import CPU, HostProfile
from roost.net import free_port
from roost.serve.base import ServeSpec
from roost.serve.docker.containers import LABEL_HOST, LABEL_MODEL, DockerServer, start_container
from roost.serve.docker.images import build_image
from roost.serve.dockerfile import LABEL_MANAGED, BuildSpec
from roost.serve.health import ServerExited, wait_until_ready

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ROOTFS_IMAGE = "roost/debian-bookworm:minbase"


def cpu_host(name: str, base_image: str) -> HostProfile:
    return CPU.model_copy(update={"name": name, "backend": "docker", "base_image": base_image})


def run_fake(client: docker.DockerClient, image: str, script: str, *, name: str, **kwargs: Any) -> DockerServer:
    """A roost-labelled container running ``sh -c script``, wrapped as the DockerServer vLLM would be."""
    container = client.containers.run(
        image, ["sh", "-c", script], name=name, detach=True,
        labels={LABEL_MANAGED: "true", LABEL_HOST: "faults", LABEL_MODEL: name}, **kwargs,
    )
    return DockerServer(client, container, base_url="http://127.0.0.1:9", served_model_name=name,
                        host_name="faults", port=9, image=image)


def wait_exit(server: DockerServer, timeout_s: float = 60) -> None:
    poll(server.is_running, lambda running: not running, timeout_s=timeout_s, every_s=0.1)


# vLLM 0.32's messages, verbatim from its source, as its engine-core process logs them
FAKED = {
    "visual_uninitialized": (
        "(EngineCore pid=90) ERROR 11-30 09:02:11 [core.py:1510] ValueError: Following weights were not initialized "
        "from checkpoint: {'visual.blocks.0.attn.qkv.weight', 'visual.merger.linear_fc1.bias'}"
    ),
    "language_model_only_with_tower": (
        "(EngineCore pid=90) ERROR 11-30 09:03:40 [core.py:1510] ValueError: There is no module or parameter named "
        "'visual' in Qwen3_5ForConditionalGeneration. The available parameters belonging to  "
        "(Qwen3_5ForConditionalGeneration) are: {'language_model.model.embed_tokens.weight'}"
    ),
    "mtp_weights_missing": (
        "(EngineCore pid=77) INFO 11-30 09:10:01 [gpu_model_runner.py:5071] Loading drafter model...\n"
        "(EngineCore pid=77) ERROR 11-30 09:10:03 [core.py:1510] ValueError: Following weights were not initialized "
        "from checkpoint: {'model.fc.weight', 'model.pre_fc_norm_embedding.weight'}"
    ),
    "out_of_memory": (
        "(EngineCore pid=12) ERROR 11-30 09:20:00 [core.py:1510] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 119.70 GiB of which 1.02 GiB is free."
    ),
}


@pytest.mark.parametrize("cls", sorted(FAKED))
def test_faked_vllm_failure_lines_in_a_real_container(docker_engine: docker.DockerClient, base_image: str,
                                                      cls: str) -> None:
    lines = FAKED[cls]
    script = "".join(f"echo {_sh_quote(line)} >&2; " for line in lines.splitlines())
    script += "echo 'RuntimeError: Engine core initialization failed. See root cause above.' >&2; exit 1"
    server = run_fake(docker_engine, base_image, script, name=f"roost-faults-{cls.replace('_', '-')}")
    try:
        wait_exit(server)
        assert server.exit_code() == 1
        d = server.diagnose()
        assert d is not None and d.failure_class == cls and d.exit_code == 1
        assert d.evidence == lines.splitlines()[-1]
    finally:
        server.stop()


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_oom_killed_container(docker_engine: docker.DockerClient) -> None:
    server = run_fake(docker_engine, ROOTFS_IMAGE, "python3 -c 'x = bytearray(512 * 2**20)'",
                      name="roost-faults-oom-kill", mem_limit="64m", memswap_limit="64m")
    try:
        wait_exit(server)
        assert server.exit_code() == 137 and server.oom_killed()
        d = server.diagnose()
        assert d is not None and d.failure_class == "out_of_memory" and d.retryable
        assert "OOMKilled=true" in d.evidence
    finally:
        server.stop()
    # the state survives the removal: a flow that tears down first and diagnoses after still knows
    assert server.oom_killed() and server.exit_code() == 137


def test_wait_ends_at_once_when_the_container_dies(docker_engine: docker.DockerClient, base_image: str) -> None:
    script = "echo 'Resolved architecture: Qwen3ForCausalLM'; sleep 1; echo 'OSError: [Errno 98] Address already in use' >&2; exit 1"
    server = run_fake(docker_engine, base_image, script, name="roost-faults-early-exit")
    try:
        t0 = time.monotonic()
        with pytest.raises(ServerExited, match="exited with code 1 before it was ready") as info:
            wait_until_ready(server, api_key=None, timeout_s=120)
        assert time.monotonic() - t0 < 60  # not the timeout
        assert str(info.value).endswith("last log lines:\nResolved architecture: Qwen3ForCausalLM\n"
                                        "OSError: [Errno 98] Address already in use")
        d = server.diagnose()
        assert d is not None and (d.failure_class, d.exit_code) == ("port_in_use", 1)
    finally:
        server.stop()


def test_failing_build_names_its_step_and_last_lines(docker_engine: docker.DockerClient, base_image: str) -> None:
    """An xgrammar version that does not exist: the patch step fails; nothing of the failed build is left behind."""
    before = {i.id for i in docker_engine.images.list(all=True)}
    with pytest.raises(StageFailed) as info:
        build_image(BuildSpec(base_image=base_image, xgrammar_version="0.0.0"), client=docker_engine)
    msg = str(info.value)
    assert msg.startswith("build: docker build of roost/vllm:")
    assert "failed at 'Step 2/" in msg and "pip install" in msg and "xgrammar==0.0.0" in msg
    assert "returned a non-zero code: 1" in msg
    after = {i.id for i in docker_engine.images.list(all=True)}
    assert after == before  # and the step's container went with it (forcerm)


def test_a_base_without_vllm_is_refused_before_building(docker_engine: docker.DockerClient) -> None:
    """The base's packages are read in a throw-away container first: no vLLM, no build, nothing left."""
    before = {i.id for i in docker_engine.images.list(all=True)}
    with pytest.raises(StageFailed, match=f"build: base image {ROOTFS_IMAGE} has no vLLM: no installed distribution "
                                          "provides the vllm package"):
        build_image(BuildSpec(base_image=ROOTFS_IMAGE), client=docker_engine)
    assert {i.id for i in docker_engine.images.list(all=True)} == before
    assert docker_engine.containers.list(all=True, filters={"ancestor": ROOTFS_IMAGE}) == []


def test_missing_base_image_is_explained(docker_engine: docker.DockerClient) -> None:
    with pytest.raises(StageFailed, match=r"not present locally and cannot be pulled.*scripts/build-test-base-image"):
        build_image(BuildSpec(base_image="roost/no-such-base:0"), client=docker_engine)


def test_serving_an_image_that_was_never_built(docker_engine: docker.DockerClient, base_image: str,
                                               docker_tiny_model: Path) -> None:
    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=free_port())
    with pytest.raises(StageFailed, match="image roost/vllm:000000000000 is not present on host faults-img: run the build"):
        start_container(spec, cpu_host("faults-img", base_image), image="roost/vllm:000000000000", api_key=None,
                        client=docker_engine)
