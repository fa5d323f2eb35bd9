"""tasks/serve.py's docker part against a real Prefect server and a real engine: the per-host
global concurrency limit (strict), and the serve task starting a labelled container."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from roost.hosts import CPU
from roost.net import free_port
from roost.serve.base import ServeSpec
from roost.serve.docker_backend import build_image, roost_containers
from roost.serve.dockerfile import BuildSpec

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_missing_host_limit_is_an_error_not_a_warning(prefect_api: str) -> None:
    from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError

    from tasks.serve import host_slot

    with pytest.raises(ConcurrencySlotAcquisitionError), host_slot("never-set-up-host", timeout_s=5):
        pass


def test_one_slot_per_host(prefect_api: str) -> None:
    from tasks.serve import ensure_host_limit, host_limit_name, host_slot

    ensure_host_limit("slot-host")
    ensure_host_limit("slot-host")  # idempotent
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(host_limit_name("slot-host"))
    assert limit.limit == 1 and limit.active

    outcome: list[str] = []

    def second_run() -> None:
        try:
            with host_slot("slot-host", timeout_s=3):
                outcome.append("acquired")
        except TimeoutError:
            outcome.append("timed out")

    with host_slot("slot-host"):
        t = threading.Thread(target=second_run)
        t.start()
        t.join(30)
    assert outcome == ["timed out"]
    # released: the next run gets it at once
    t0 = time.monotonic()
    with host_slot("slot-host", timeout_s=10):
        pass
    assert time.monotonic() - t0 < 5
    ensure_host_limit("slot-host-b")
    with host_slot("slot-host", timeout_s=5), host_slot("slot-host-b", timeout_s=5):
        pass  # another host's slot is free while this one is held


def test_serve_docker_task_in_a_flow(prefect_api: str, docker_engine: docker.DockerClient, base_image: str,
                                     docker_tiny_model: Path) -> None:
    from prefect import flow
    from pydantic import SecretStr

    from tasks.serve import ensure_host_limit, host_slot, serve_docker_task

    host = CPU.model_copy(update={"name": "taskhost", "backend": "docker", "base_image": base_image})
    image = build_image(BuildSpec(base_image=base_image), client=docker_engine).tag
    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=free_port(),
                     env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    ensure_host_limit(host.name)

    @flow(name="serve-docker-test")
    def serve_flow() -> tuple[str, bool, str]:
        with host_slot(host.name, timeout_s=30):
            server = serve_docker_task(spec, SecretStr("task-key"), host, image)
            try:
                running = server.is_running()
                name = server.name
                labels = docker_engine.containers.get(name).labels
            finally:
                server.stop()
            return name, running, labels["ai.roost.host"]

    name, running, host_label = serve_flow()
    assert (name, running, host_label) == ("roost-taskhost-tiny", True, "taskhost")
    assert roost_containers(docker_engine, "taskhost") == []
