"""Health-wait stage: poll the starting server until ready, with a Prefect progress artifact."""

from __future__ import annotations

from typing import cast
from uuid import UUID

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost.naming import artifact_key
from roost.progress import terminal_progress
from roost.serve.base import Readiness, Server
from roost.serve.health import wait_until_ready


@task(name="health-wait", cache_policy=NO_CACHE, persist_result=False)
def health_wait_task(server: Server, api_key: SecretStr, timeout_s: float, *, profile: str = "",
                     host: str = "") -> Readiness:
    """Wait until ``server`` answers /health, /v1/models and a one-token completion (``roost.serve.health``).

    ``profile`` and ``host`` key the progress artifact (``roost-health-<profile>-<host>``)."""
    logger = get_run_logger()
    what = f"cold load of {server.served_model_name}" + (f" ({profile} on {host})" if profile and host else "")
    artifact_id = cast(UUID, create_progress_artifact(progress=0.0, key=artifact_key("roost-health", profile, host),
                                                      description=what))
    # bars on a terminal; elsewhere the log lines below are the plain form
    terminal = terminal_progress(what, plain=False, secrets=[api_key.get_secret_value()])

    def on_progress(milestone: str, fraction: float) -> None:
        logger.info("cold load: %s (%.0f%%)", milestone, 100 * fraction)
        update_progress_artifact(artifact_id=artifact_id, progress=round(100 * fraction, 1),
                                 description=f"{what}: {milestone}")
        terminal.update(fraction, 1.0, status=milestone)

    with terminal:
        ready = wait_until_ready(server, api_key=api_key.get_secret_value() or None, timeout_s=timeout_s,
                                 on_progress=on_progress)
    logger.info("server ready: /health after %.1f s, /v1/models after %.1f s, first completion after %.1f s",
                ready.health_ok_s, ready.models_ok_s, ready.completion_ok_s)
    return ready
