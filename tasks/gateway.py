"""Gateway stage: a landing that keeps its server registers it for the metering gateway on the host
(``roost.gateway.registry``), and the servers it retired are deregistered, so the gateway routes the
new model's name without a restart. Never cached (it records what runs now); no key is written."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from roost.gateway import registry


@task(name="gateway-register", cache_policy=NO_CACHE, persist_result=False)
def register_backend(base_url: str, served_model_name: str, host: str, run_id: str,
                     decode_tok_s: float | None = None, decode_concurrency: int = 0) -> list[str]:
    """Register ``base_url`` for ``host`` (with the decode rate its landing measured, the monitoring
    floor); returns the URLs of the host's earlier servers it replaced."""
    path = registry.register(base_url, served_model_name, host, run_id, decode_tok_s, decode_concurrency)
    replaced = registry.forget_host(host, keep=base_url)
    get_run_logger().info("gateway: %s (%s) registered in %s%s", base_url, served_model_name, path.parent,
                          f"; replaced {', '.join(replaced)}" if replaced else "")
    return replaced


@task(name="gateway-deregister", cache_policy=NO_CACHE, persist_result=False)
def deregister_host(host: str) -> list[str]:
    """Deregister every server registered for ``host`` (retired by a new landing or stopped)."""
    gone = registry.forget_host(host)
    if gone:
        get_run_logger().info("gateway: deregistered %s", ", ".join(gone))
    return gone
