"""tasks/build.py in a real flow: the build log reaches the Prefect logger, a second run is a
cache hit keyed by the Dockerfile hash, and a removed image is never served from the cache."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from roost.hosts import CPU
from roost.serve.docker_backend import BuildResult, render_for_engine
from roost.serve.dockerfile import BuildSpec

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def _task_logs(task_run_id: Any) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterTaskRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(task_run_id=LogFilterTaskRunId(any_=[task_run_id])))
    return [log.message for log in logs]


def test_build_task_caches_by_dockerfile_hash_while_the_image_exists(
    prefect_api: str, docker_engine: docker.DockerClient, base_image: str
) -> None:
    from prefect import flow

    from tasks.build import build_stage

    host = CPU.model_copy(update={"name": "buildhost", "backend": "docker", "base_image": base_image})
    spec = BuildSpec(base_image=base_image, build_args={"PIP_DEFAULT_TIMEOUT": "120"})  # a tag of its own
    rendered = render_for_engine(docker_engine, spec)[0]

    @flow(name="build-test")
    def build_flow() -> Any:
        return build_stage(spec, host, return_state=True)

    first = build_flow()
    result: BuildResult = first.result()
    assert result.tag == rendered.tag and not result.skipped and first.name == "Completed"
    messages = _task_logs(first.state_details.task_run_id)
    assert any(m.startswith("Step 3/") and "pip install" in m for m in messages), messages  # streamed build lines
    assert any(m.startswith("xgrammar 0.2.8 imports from") for m in messages)  # the verification step
    assert any(m.startswith(f"built {rendered.tag}") for m in messages)

    second = build_flow()
    assert second.name == "Cached" and second.result().tag == rendered.tag

    docker_engine.images.remove(rendered.tag, force=True)
    third = build_flow()  # the image is gone: no cache hit, a real build again
    assert third.name == "Completed" and not third.result().skipped
    assert docker_engine.images.get(rendered.tag).labels["ai.roost.dockerfile-sha"] == rendered.sha256
