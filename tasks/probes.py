"""Probe stage: the capability probes (``roost.serve.probes``: reasoning, tool, tool-auto, structured) against
the running server, after the health-wait. Never cached (it checks the running server); the API key is a
``SecretStr`` and is never logged (errors are scrubbed of it)."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost.records import ProbeResult
from roost.serve.probes import run_probes
from roost.vllm.client import VllmClient, run_sync


@task(name="probes", cache_policy=NO_CACHE, persist_result=False)
def probes_task(base_url: str, model: str, api_key: SecretStr, probes: Sequence[str],
                timeout_s: float = 120.0) -> list[ProbeResult]:
    """Run ``probes`` one after another; return what each did (pass/fail, latency, the server's error)."""

    async def go() -> list[ProbeResult]:
        async with VllmClient(base_url, model, api_key=api_key.get_secret_value() or None) as client:
            return await run_probes(client, probes, timeout_s=timeout_s)

    results = run_sync(go)
    logger = get_run_logger()
    for r in results:
        took = f"{r.latency_s:.2f} s" if r.latency_s is not None else "?"
        if r.ok:
            logger.info("%s probe passed in %s: %s", r.name, took, r.detail)
        else:
            logger.error("%s probe failed after %s (%s): %s", r.name, took, r.failure_class, r.error)
    return results
