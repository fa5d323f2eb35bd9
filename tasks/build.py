"""Build stage: the serving image (vLLM base + xgrammar patch), streamed to the Prefect logger.

Cached by the rendered Dockerfile's hash (which covers the base image's digest, the xgrammar pin,
roost's version and the build args), and only while that image still exists on the engine: a
Prefect cache hit for an image someone removed would hand the serve stage a tag that is gone, so
flows call ``build_stage``, which refreshes the cache when the tag is missing. The build itself also
skips an existing tag, so a cache miss on a present image costs a few ms.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.context import TaskRunContext
from prefect.logging import get_run_logger

from roost.hosts import HostProfile
from roost.serve.docker_backend import (
    BuildResult,
    build_image,
    docker_client,
    image_exists,
    render_for_engine,
)
from roost.serve.dockerfile import BuildSpec


def build_cache_key(_: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """``roost-build-<sha256 of the rendered Dockerfile + build args>`` (base digest included)."""
    spec: BuildSpec = parameters["spec"]
    host: HostProfile = parameters["host"]
    try:
        client = docker_client(host)
        rendered = render_for_engine(client, spec)[0]
    except Exception:
        return None  # let the task run and report the real error
    return f"roost-build-{rendered.sha256}"


@task(name="build", cache_key_fn=build_cache_key, persist_result=True, result_serializer="json")
def build_image_task(spec: BuildSpec, host: HostProfile) -> BuildResult:
    """Build (or find) the serving image for ``spec`` on ``host``'s Docker engine."""
    logger = get_run_logger()
    client = docker_client(host)
    try:
        result = build_image(spec, client=client, log=logger.info)
    finally:
        client.close()
    if result.skipped:
        logger.info("build skipped: %s exists (base %s, %s)", result.tag, result.base_image,
                    result.base_image_digest or result.base_image_id[:19])
    else:
        logger.info("built %s in %.1f s (base %s, xgrammar %s)", result.tag, result.seconds, result.base_image,
                    result.xgrammar_version)
    return result


def build_stage(spec: BuildSpec, host: HostProfile, *, return_state: bool = False) -> Any:
    """Run the build task from a flow: a cache hit only while the image is still on the engine."""
    client = docker_client(host)
    try:
        present = image_exists(client, render_for_engine(client, spec)[0].tag)
    finally:
        client.close()
    task_ = build_image_task.with_options(refresh_cache=not present)
    if return_state:
        return task_(spec, host, return_state=True)
    return task_(spec, host)
