"""Gateway stage: a landing that keeps its server registers it for the metering gateway on the host
(``roost.gateway.registry``), and the servers it retired are deregistered, so the gateway routes the
new model's name without a restart. Never cached (it records what runs now); no key is written."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from blocks.secrets import secret_value
from roost.errors import UserError
from roost.gateway import registry
from roost.gateway.openwebui import OpenWebUIError, follow_swap_in_db
from roost.gateway.openwebui_api import follow_swap_via_api
from roost.hosts import HostProfile
from roost.settings import environment


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


def served_elsewhere(host: str, keep: str) -> list[str]:
    """The model names the host's other registered servers serve (those a new landing retires)."""
    return sorted({r.served_model_name for r in registry.registered()
                   if r.host == host and r.base_url != keep and r.served_model_name})


def openwebui_api_key(secret_block: str) -> str:
    """The Open WebUI admin key: the Secret block ``secret_block`` holds, else ROOST_OPENWEBUI_API_KEY.
    Never logged, never returned in an error."""
    if secret_block:
        return secret_value(secret_block, "an Open WebUI admin's API key (sk-...), as the host's "
                            "openwebui_api_key_secret names") or ""
    return environment().roost_openwebui_api_key or ""


@task(name="openwebui-default", cache_policy=NO_CACHE, persist_result=False)
def follow_swap_in_openwebui(host: HostProfile, served_model_name: str, old_names: list[str]) -> str:
    """Make ``served_model_name`` Open WebUI's default (and pinned, and first) in place of ``old_names``
    when the host names its database or its URL; returns what was done, as one line ("" when the host
    names neither). A failure is a warning and a ``failed: ...`` line: the landing goes on."""
    if not (host.openwebui_db or host.openwebui_url):
        return ""
    logger = get_run_logger()
    try:
        if host.openwebui_url:
            done = follow_swap_via_api(host.openwebui_url, openwebui_api_key(host.openwebui_api_key_secret),
                                       served_model_name, old_names)
        else:
            done = follow_swap_in_db(Path(host.openwebui_db), served_model_name, old_names)
    except (OpenWebUIError, UserError) as exc:
        logger.warning("Open WebUI: its default model was not changed: %s", exc)
        return f"failed: {exc}"
    logger.info("Open WebUI: %s", done.summary())
    if done.restart_needed:
        logger.warning("Open WebUI (before 0.10) reads its settings at start only: restart open-webui now to apply "
                       "the new default (and before an admin saves a setting there, which would undo it)")
    return done.summary()
