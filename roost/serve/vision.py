"""The vision probe: one chat request carrying an image, sent after the health-wait to a server whose
checkpoint ships a vision tower (and was not started with ``--language-model-only``).

A server can answer text and still fail every image: a processor file missing from the download,
a tower vLLM built but cannot run, a multimodal limit of zero. The health-wait only asks for text,
so this probe is what proves the tower works. It sends a small PNG made on the spot (no Pillow:
:func:`png_bytes` writes the chunks with ``zlib`` and ``struct``) as a ``data:image/png;base64,...``
URL in an OpenAI ``image_url`` content part, through :class:`~roost.vllm.client.VllmClient`, and
records pass/fail, latency and the server's error. A failed probe fails the landing with the
failure class ``vision_probe_failed``.
"""

from __future__ import annotations

import base64
import struct
import time
import zlib
from typing import Any

import httpx

from roost.errors import StageFailed
from roost.failures import FailureClass
from roost.records import VisionProbe
from roost.vllm.argv import VllmArgv
from roost.vllm.client import VllmClient
from roost.vllm.stream import error_text

FAILURE_CLASS = FailureClass.VISION_PROBE_FAILED
REMEDIATION = (
    "The server answers text but not an image: check that the download has the processor files "
    "(preprocessor_config.json / processor_config.json) and the whole vision tower, and vLLM's log for the "
    "multimodal error; to serve text only, pass --language-model-only."
)
PROMPT = "Describe this image in one word."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class VisionProbeFailed(StageFailed):
    """The image request failed: the landing fails with its own class and remediation."""

    failure_class = FAILURE_CLASS
    remediation = REMEDIATION

    def __init__(self, probe: VisionProbe) -> None:
        super().__init__("vision-probe", f"a chat request with an image failed: {probe.error}")
        self.probe = probe


def _chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC-32 of type + data."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width: int = 64, height: int = 64) -> bytes:
    """An RGB PNG (8 bits per channel, no interlace) of a colour gradient with a diagonal stripe.

    64 x 64 by default: larger than the smallest image the Qwen-VL processors accept (28 or 32
    pixels a side), small enough to cost the server almost nothing.
    """
    if width < 1 or height < 1:
        raise ValueError("a PNG needs at least one pixel")
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter type 0 (None) for every scanline
        for x in range(width):
            stripe = abs(x - y) < max(1, width // 16)
            r = 255 if stripe else (x * 255) // max(1, width - 1)
            g = 255 if stripe else (y * 255) // max(1, height - 1)
            b = 255 if stripe else 128
            rows += bytes((r, g, b))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # depth 8, colour type 2 (RGB)
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(bytes(rows), 9)) + _chunk(b"IEND", b"")


def data_url(png: bytes) -> str:
    """``data:image/png;base64,...`` for ``png``."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def probe_request(model: str, png: bytes, *, max_tokens: int = 8) -> dict[str, Any]:
    """The chat completion the probe sends: one user turn with a text part and an ``image_url`` part."""
    return {
        "model": model,
        "messages": [{
            "role": "user",
            "content": [
                {"type": "text", "text": PROMPT},
                {"type": "image_url", "image_url": {"url": data_url(png)}},
            ],
        }],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": False,
    }


def _server_message(resp: httpx.Response) -> str:
    """vLLM's error message from an error response (``roost.vllm.stream.error_text``), else the text."""
    try:
        return error_text(resp.json())[:500]
    except ValueError:
        return resp.text.strip()[:500]


async def probe(client: VllmClient, *, timeout_s: float = 300.0, width: int = 64, height: int = 64) -> VisionProbe:
    """Send the image request to ``client``'s server and model; never raises for what the server does."""
    png = png_bytes(width, height)
    body = probe_request(client.model, png)
    t0 = time.perf_counter()
    try:
        resp = await client.post_json("/v1/chat/completions", body, timeout_s=timeout_s)
    except httpx.TimeoutException:
        return VisionProbe(ok=False, latency_s=time.perf_counter() - t0, image_bytes=len(png),
                           error=f"no answer within {timeout_s:.0f} s")
    except httpx.HTTPError as exc:
        return VisionProbe(ok=False, latency_s=time.perf_counter() - t0, image_bytes=len(png),
                           error=client.scrub(f"{type(exc).__name__}: {exc}"))
    latency = time.perf_counter() - t0
    if resp.status_code != 200:
        return VisionProbe(ok=False, latency_s=latency, status_code=resp.status_code, image_bytes=len(png),
                           error=client.scrub(f"HTTP {resp.status_code}: {_server_message(resp)}"))
    try:
        data = resp.json()
        choices = data.get("choices") or []
        usage = data.get("usage") or {}
    except (ValueError, AttributeError):
        return VisionProbe(ok=False, latency_s=latency, status_code=200, image_bytes=len(png),
                           error="HTTP 200 but the body is not a chat completion")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not choices:
        return VisionProbe(ok=False, latency_s=latency, status_code=200, image_bytes=len(png),
                           error="HTTP 200 but the completion has no choices")
    return VisionProbe(ok=True, latency_s=latency, status_code=200, image_bytes=len(png),
                       completion_tokens=tokens if type(tokens) is int else None)


def needs_probe(visual_tensor_count: int, vllm_args: list[str]) -> bool:
    """Probe when the checkpoint ships a vision tower and the server was not told to drop it
    (``--language-model-only`` in any spelling vLLM reads, not turned off again by ``--no-language-model-only``)."""
    return visual_tensor_count > 0 and not VllmArgv(vllm_args).enabled("--language-model-only")


__all__ = ["FAILURE_CLASS", "REMEDIATION", "VisionProbeFailed", "data_url", "needs_probe", "png_bytes", "probe",
           "probe_request"]
