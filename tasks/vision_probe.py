"""Vision-probe stage: one chat request with a generated PNG to a server whose checkpoint ships a
vision tower (``roost.serve.vision``). Never cached (it checks the running server); the API key is a
``SecretStr`` and is never logged."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost import catalogue as C
from roost.records import VisionProbe
from roost.serve.vision import probe
from roost.vllm.client import VllmClient, run_sync


@task(name="vision-probe", cache_policy=NO_CACHE, persist_result=False)
def vision_probe_task(base_url: str, model: str, api_key: SecretStr, timeout_s: float = 300.0) -> VisionProbe:
    """Send the image request; return what happened (pass/fail, latency, the server's error)."""

    async def go() -> VisionProbe:
        async with VllmClient(base_url, model, api_key=api_key.get_secret_value() or None) as client:
            return await probe(client, timeout_s=timeout_s)

    result = run_sync(go)
    latency = C.VISION_PROBE_LATENCY.format(result.latency_s)
    if result.ok:
        get_run_logger().info("vision probe: a %d-byte PNG answered in %s", result.image_bytes, latency)
    else:
        get_run_logger().error("vision probe failed after %s: %s", latency, result.error)
    return result
