"""A speculative server's draft acceptance over its life so far (health-wait, warm-up, benchmark)."""

from __future__ import annotations

from pydantic import SecretStr

from roost.bench import mtp
from roost.records import SpecAcceptance
from roost.serve.base import Server
from roost.vllm import server_metrics, specdecode_log
from roost.vllm.client import VllmClient, run_sync


def spec_acceptance(server: Server, key: SecretStr) -> SpecAcceptance | None:
    """Draft acceptance from the server's ``/metrics`` counters, else the engine's SpecDecoding log
    lines; None when neither has any."""

    async def scrape() -> str | None:
        async with VllmClient(server.base_url, api_key=key.get_secret_value() or None) as client:
            return await client.metrics_text()

    text = run_sync(scrape)
    counters = server_metrics.spec_counters(server_metrics.parse_text(text)) if text else None
    if counters is not None:
        return mtp.acceptance(counters, "metrics")
    logged = specdecode_log.aggregate(specdecode_log.parse_lines(server.logs()))
    return mtp.acceptance(logged, "log") if logged is not None else None
