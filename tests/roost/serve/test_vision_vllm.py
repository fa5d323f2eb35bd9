"""The vision probe against real vLLM CPU servers: a tiny random-weight BLIP-2 (``support.tiny_vlm``:
the vision-language model vLLM on this CPU can serve without torchvision) takes the image; the
session's text-only tiny Qwen3 server refuses it, as a checkpoint served without its tower would."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tiny_vlm import write_tiny_blip2

from roost.records import VisionProbe
from roost.serve import vision as V
from roost.vllm.client import VllmClient, run_sync

pytestmark = pytest.mark.slow


def _probe(base_url: str, model: str, key: str | None) -> VisionProbe:
    async def go() -> VisionProbe:
        async with VllmClient(base_url, model, api_key=key) as client:
            return await V.probe(client, timeout_s=300)

    return run_sync(go)


@pytest.fixture(scope="module")
def blip2_server(session_dir: Path) -> Iterator[tuple[str, str]]:
    from roost.hosts import CPU
    from roost.net import free_port
    from roost.serve.base import ServeSpec
    from roost.serve.health import wait_until_ready
    from roost.serve.process import ProcessBackend
    from roost.settings import vllm_python

    py = vllm_python()
    if not py.exists():
        pytest.skip(f"no vLLM venv at {py}: run scripts/bootstrap")
    model_dir = write_tiny_blip2(session_dir / "tiny-blip2", py)
    key = "vl-key-" + os.urandom(6).hex()
    spec = ServeSpec(model_dir=model_dir, served_model_name="tinyvl", port=free_port(),
                     # eager with a pinned pool: no warm-up forward at all (vLLM on CPU skips it then); a
                     # window, pool and batch sized for the probe's one short request at a time
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager",
                                "--kv-cache-memory-bytes", str(64 * 1024**2), "--max-num-seqs", "2"],
                     log_path=session_dir / "vllm-blip2.log")
    backend = ProcessBackend(CPU.model_copy(update={"name": "test-vision"}))
    server = backend.start(spec, key, backend.prepare())
    try:
        wait_until_ready(server, api_key=key, timeout_s=600)
        yield server.base_url, key
    finally:
        server.stop()


def test_a_vision_language_server_answers_the_image(blip2_server: tuple[str, str]) -> None:
    base_url, key = blip2_server
    result = _probe(base_url, "tinyvl", key)
    assert result.ok, result.error
    assert result.status_code == 200 and result.completion_tokens == 8
    assert result.latency_s is not None and 0 < result.latency_s < 60


def test_the_image_reaches_the_model(blip2_server: tuple[str, str]) -> None:
    """The image's 4 Q-Former query tokens are in the prompt: the request was not answered as text only."""
    import httpx

    base_url, key = blip2_server
    headers = {"Authorization": f"Bearer {key}"}
    with_image = httpx.post(f"{base_url}/v1/chat/completions", headers=headers, timeout=120,
                            json=V.probe_request("tinyvl", V.png_bytes())).json()["usage"]["prompt_tokens"]
    text_only = httpx.post(f"{base_url}/v1/chat/completions", headers=headers, timeout=120,
                           json={"model": "tinyvl", "max_tokens": 1,
                                 "messages": [{"role": "user", "content": V.PROMPT}]}).json()["usage"]["prompt_tokens"]
    assert with_image == text_only + 4


def test_a_text_only_server_fails_the_probe(vllm_server: object) -> None:
    base_url, model, key = vllm_server.base_url, vllm_server.model, vllm_server.api_key  # type: ignore[attr-defined]
    result = _probe(base_url, model, key)
    assert not result.ok and result.status_code == 400, result
    assert result.error.startswith("HTTP 400: ") and key not in result.error
    err = V.VisionProbeFailed(result)
    assert err.failure_class == "vision_probe_failed"
