"""tasks/serve.py and tasks/health.py against a real Prefect server and a real engine, with the host's
serving slot (``tasks/host_slot.py``: the per-host global concurrency limit, strict) held around them:
the serve task starts a labelled container and streams its log lines to the Prefect logger; the
health-wait task fails at once when that container dies."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError
from prefect.context import get_run_context
from pydantic import SecretStr
from support.flow_logs import run_log_messages
from support.wait import poll

from roost.hosts import CPU_DOCKER
from roost.net import free_port
from roost.serve.base import ServeSpec
from roost.serve.docker.backend import DockerBackend
from roost.serve.docker.containers import roost_containers
from roost.serve.health import ServerExited
from tasks.health import health_wait_task
from tasks.host_slot import ensure_host_limit, host_limit_name, host_slot
from tasks.serve import serve_task

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_missing_host_limit_is_an_error_not_a_warning(prefect_api: str) -> None:


    with pytest.raises(ConcurrencySlotAcquisitionError), host_slot("never-set-up-host", timeout_s=5):
        pass


def test_one_slot_per_host(prefect_api: str) -> None:


    assert ensure_host_limit("slot-host") == "created"
    assert ensure_host_limit("slot-host") == "unchanged"  # idempotent
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
    # released: the next run gets it (a slot still held would time out here)
    with host_slot("slot-host", timeout_s=10):
        pass
    ensure_host_limit("slot-host-b")
    with host_slot("slot-host", timeout_s=5), host_slot("slot-host-b", timeout_s=5):
        pass  # another host's slot is free while this one is held


def test_serve_task_in_a_flow_streams_the_container_log(prefect_api: str, docker_engine: docker.DockerClient,
                                                        base_image: str, docker_tiny_model: Path,
                                                        roost_to_the_api: None) -> None:


    host = CPU_DOCKER.model_copy(update={"name": "taskhost", "base_image": base_image})
    backend = DockerBackend(host, client=docker_engine)
    prepared = backend.prepare()
    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=free_port(),
                     env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    ensure_host_limit(host.name)

    @flow(name="serve-docker-test")
    def serve_flow() -> tuple[str, str, str, Any]:
        with host_slot(host.name, timeout_s=30):
            server = serve_task(backend, spec, SecretStr("task-key"), prepared)
            try:
                info = server.describe()
                labels = docker_engine.containers.get(info.container).labels
                poll(server.logs, timeout_s=120, every_s=0.2)  # the container's first line
                docker_engine.containers.get(info.container).kill()  # it dies while the wait runs
                with pytest.raises(ServerExited, match="exited with code 137"):
                    health_wait_task(server, SecretStr("task-key"), 600)
                first = server.logs().splitlines()[0]
            finally:
                server.stop()
            return str(info.container), labels["ai.roost.host"], first, get_run_context().flow_run.id  # type: ignore[union-attr]

    name, host_label, first, run_id = serve_flow()
    assert (name, host_label) == ("roost-taskhost-tiny", "taskhost")
    messages = run_log_messages(run_id, flush_s=10)
    assert f"[roost-taskhost-tiny] {first}" in messages  # the server's lines reach the Prefect logger
    assert any(m.startswith("vLLM starting (container roost-taskhost-tiny) at http://127.0.0.1:") for m in messages)
    assert roost_containers(docker_engine, "taskhost") == []
