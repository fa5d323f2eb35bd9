"""Build stage: what the backend needs before a server can start (the serving image for Docker:
vLLM base + xgrammar patch, every build line to the Prefect logger; nothing for a process). Its last
line says what the image is and whether the base's xgrammar needed a patch (``Prepared.note``:
"xgrammar X from the base image, no patch needed (...)" or "xgrammar patched A -> B (...)").

Cached by ``Backend.prepare_key()`` (Docker: the rendered Dockerfile's hash, which covers the base
image's digest, the xgrammar pin, roost's version and the build args) and only while what it made
still exists: a cache hit for an image someone removed would hand the serve stage a tag that is
gone, so ``build_task`` refreshes the cache then. The build itself also skips an existing tag.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.context import TaskRunContext
from prefect.logging import get_run_logger

from roost.serve.base import Backend, Prepared


def prepare_cache_key(_: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """``Backend.prepare_key()``; None (run, do not cache) when there is none or it cannot be computed."""
    backend: Backend = parameters["backend"]
    try:
        return backend.prepare_key()
    except Exception:  # e.g. no engine answers: let the task run and report the real error
        return None


@task(name="build", cache_key_fn=prepare_cache_key, persist_result=True, result_serializer="json")
def prepare_task(backend: Backend) -> Prepared:
    """Build (or find) what ``backend`` serves from, logging each line."""
    logger = get_run_logger()
    prepared = backend.prepare(log=logger.info)
    if not prepared.skipped:
        logger.info("%s: %s (%.1f s)", "found" if prepared.cached else "built", prepared.note, prepared.seconds)
    return prepared


def build_task(backend: Backend) -> Prepared:
    """Run the build task from a flow: a cache hit only while what it made is still there."""
    return prepare_task.with_options(refresh_cache=not backend.is_prepared())(backend)
