"""The vision probe: its PNG (checked byte by byte and by an independent decoder), its request, and
what it records against a FAKE server (``tests/support/fake_vision_server.py``) for each way an image
request can fail. The probe against a real vLLM CPU server with a tiny vision-language model is in
``test_vision_vllm.py``."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections.abc import Iterator

import pytest
from PIL import Image
from support.fake_vision_server import FakeVisionServer, check_image_request

from roost.records import VisionProbe
from roost.serve import vision as V
from roost.vllm.client import VllmClient, run_sync


def _chunks(png: bytes) -> list[tuple[bytes, bytes, int]]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, i = [], 8
    while i < len(png):
        (length,) = struct.unpack(">I", png[i:i + 4])
        kind, data = png[i + 4:i + 8], png[i + 8:i + 8 + length]
        (crc,) = struct.unpack(">I", png[i + 8 + length:i + 12 + length])
        out.append((kind, data, crc))
        i += 12 + length
    assert i == len(png)
    return out


def test_png_is_valid_chunk_by_chunk() -> None:
    png = V.png_bytes(64, 48)
    chunks = _chunks(png)
    assert [k for k, _, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    for kind, data, crc in chunks:
        assert crc == zlib.crc32(kind + data) & 0xFFFFFFFF, kind
    width, height, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (width, height, depth, colour, comp, filt, interlace) == (64, 48, 8, 2, 0, 0, 0)
    raw = zlib.decompress(chunks[1][1])
    assert len(raw) == 48 * (1 + 64 * 3) and all(raw[y * (1 + 64 * 3)] == 0 for y in range(48))
    assert chunks[2][1] == b""


def test_png_decodes_with_pillow() -> None:
    with Image.open(io.BytesIO(V.png_bytes())) as img:
        img.load()
        assert (img.format, img.mode, img.size) == ("PNG", "RGB", (64, 64))
        assert img.getpixel((0, 0)) == (255, 255, 255)  # on the diagonal stripe
        assert img.getpixel((63, 0)) == (255, 0, 128)  # the gradient's corner
        assert len({img.getpixel((x, y)) for x in range(64) for y in range(64)}) > 100  # a picture, not a flat colour


def test_png_needs_a_pixel() -> None:
    with pytest.raises(ValueError):
        V.png_bytes(0, 4)


def test_the_request_carries_the_png_as_a_data_url() -> None:
    png = V.png_bytes()
    body = V.probe_request("ornith", png)
    assert body["model"] == "ornith" and body["stream"] is False and body["temperature"] == 0
    [message] = body["messages"]
    image = next(p for p in message["content"] if p["type"] == "image_url")
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png
    assert check_image_request(body) == ""  # what the fake server checks


def test_the_fake_rejects_a_broken_image() -> None:
    png = bytearray(V.png_bytes())
    png[40] ^= 0xFF  # inside IDAT: its CRC no longer matches
    assert check_image_request(V.probe_request("m", bytes(png))).startswith("image does not decode")
    assert check_image_request({"messages": [{"role": "user", "content": "text"}]}) != ""


@pytest.mark.parametrize(("visual", "args", "expected"), [
    (333, ["--max-model-len", "4096"], True),
    (333, ["--language-model-only"], False),
    (0, [], False),
])
def test_when_to_probe(visual: int, args: list[str], expected: bool) -> None:
    assert V.needs_probe(visual, args) is expected


@pytest.fixture
def fake() -> Iterator[FakeVisionServer]:
    server = FakeVisionServer(api_key="k-123")
    yield server
    server.close()


def _probe(base_url: str, key: str = "k-123", timeout_s: float = 30.0) -> VisionProbe:
    async def go() -> VisionProbe:
        async with VllmClient(base_url, "vl", api_key=key) as client:
            return await V.probe(client, timeout_s=timeout_s)

    return run_sync(go)


def test_probe_passes_against_a_server_that_takes_the_image(fake: FakeVisionServer) -> None:
    result = _probe(fake.base_url)
    assert result.ok and result.status_code == 200 and result.completion_tokens == 2, result
    assert result.latency_s is not None and 0 < result.latency_s < 10
    assert result.image_bytes == len(V.png_bytes())
    assert len(fake.requests) == 1 and fake.requests[0]["model"] == "vl"


def test_a_text_only_server_fails_the_probe_with_its_message(fake: FakeVisionServer) -> None:
    fake.mode = "reject_images"
    result = _probe(fake.base_url)
    assert not result.ok and result.status_code == 400
    assert result.error == "HTTP 400: vl is not a multimodal model"
    err = V.VisionProbeFailed(result)
    assert err.failure_class == "vision_probe_failed" and "--language-model-only" in err.remediation
    assert str(err) == "vision-probe: a chat request with an image failed: HTTP 400: vl is not a multimodal model"


def test_an_engine_error_and_a_wrong_key_fail_the_probe(fake: FakeVisionServer) -> None:
    fake.mode = "server_error"
    assert _probe(fake.base_url).error.startswith("HTTP 500: EngineCore encountered an issue")
    fake.mode = "ok"
    wrong = _probe(fake.base_url, key="other-secret")
    assert not wrong.ok and wrong.status_code == 401 and "other-secret" not in wrong.error


def test_a_server_that_does_not_answer_in_time(fake: FakeVisionServer) -> None:
    fake.mode, fake.delay_s = "slow", 3.0
    result = _probe(fake.base_url, timeout_s=0.5)
    assert not result.ok and result.error.startswith("no answer within")
    assert result.latency_s is not None and result.latency_s < 3.0


def test_no_server_at_all() -> None:
    from roost.net import free_port

    result = _probe(f"http://127.0.0.1:{free_port()}")
    assert not result.ok and result.status_code is None and result.error.startswith("ConnectError")
