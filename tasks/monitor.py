"""Monitor stage: after the gateway registry changes (a landing kept or retired a server), the
monitoring files are re-rendered and Prometheus reloaded the way that works for how it was started
(``roost.monitor.sync``). Nothing to do where ``roost monitor render``/``up`` never ran; a
monitoring failure is a warning, never a failed landing."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from roost.errors import RoostError
from roost.monitor.sync import sync


@task(name="monitor-sync", cache_policy=NO_CACHE, persist_result=False)
def sync_monitoring() -> str:
    """Returns how Prometheus took the change (``none``, ``unchanged``, ``lifecycle-reload``,
    ``container-restart``, ``failed``, or ``''`` with no monitoring set up)."""
    logger = get_run_logger()
    try:
        result = sync()
    except (RoostError, OSError) as exc:
        logger.warning("monitoring: could not update Prometheus: %s", exc)
        return "failed"
    if result is None:
        return ""
    logger.info("monitoring: %d vLLM target(s) %s; Prometheus %s%s", len(result.targets or result.rendered.targets.vllm),
                ", ".join(t.address for t in result.rendered.targets.vllm), result.method,
                f" ({result.note})" if result.note else "")
    return result.method
