"""The streaming client: SSE parsing, token chunks, and every server fault recorded, none raised."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bench_synthetic import Synthetic, start_synthetic

from roost.errors import UserError
from roost.net import free_port
from roost.vllm.client import RequestBudget, VllmClient, normalize_base_url
from roost.vllm.stream import RequestRecord, SSEParser, is_token_delta

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":" a"}}]}\r\n\r\n'
    b"event: message\ndata: {\"choices\":[{\"delta\":\ndata: {\"content\":\" b\"}}]}\n\n"
    b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


def test_sse_parser_is_independent_of_network_chunking() -> None:
    whole = SSEParser().feed(STREAM)
    bytewise: list[bytes] = []
    p = SSEParser()
    for i in range(len(STREAM)):
        bytewise += p.feed(STREAM[i : i + 1])
    assert whole == bytewise
    assert len(whole) == 5
    assert json.loads(whole[2]) == {"choices": [{"delta": {"content": " b"}}]}  # two data lines joined
    assert whole[-1] == b"[DONE]"


def test_sse_parser_flushes_an_unterminated_last_event_only_if_complete() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"usage": {"completion_tokens": 3}}') == []
    assert p.close() == [b'{"usage": {"completion_tokens": 3}}']
    p = SSEParser()
    p.feed(b'data: {"usage": {"comp')
    assert p.close() == []


@pytest.mark.parametrize(
    ("delta", "token"),
    [
        ({"role": "assistant", "content": ""}, False),  # vLLM's role chunk
        ({}, False),  # a bare finish chunk
        ({"content": " x"}, True),
        ({"content": ""}, True),  # a token that ends inside a multi-byte character
        ({"reasoning": "think"}, True),
        ({"reasoning_content": "think"}, True),
        ({"role": "assistant", "content": "Hi"}, True),
        ({"tool_calls": [{"index": 0}]}, True),
    ],
)
def test_is_token_delta(delta: dict[str, Any], token: bool) -> None:
    assert is_token_delta(delta) is token


def test_normalize_base_url() -> None:
    assert normalize_base_url("127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert normalize_base_url("https://h/x/v1") == "https://h/x"


@pytest.mark.parametrize(("url", "why"), [("http://h:99999", "out of range"), ("http://h:notaport", "notaport"),
                                          ("ftp://h", "give e.g. http://127.0.0.1:8000")])
def test_an_unusable_url_is_a_user_error(url: str, why: str) -> None:
    with pytest.raises(UserError, match=why):
        normalize_base_url(url)


def _run(srv: Synthetic, faults: list[str], n: int = 12, budget: RequestBudget | None = None,
         api_key: str | None = "use-server") -> list[RequestRecord]:
    srv.control(faults=faults, tokens_per_s=200.0, ttft_s=0.02)

    async def go() -> list[RequestRecord]:
        key = srv.api_key if api_key == "use-server" else api_key
        async with VllmClient(srv.base_url, srv.model, api_key=key) as client:
            out = []
            for i in range(len(faults)):
                payload = {"model": srv.model, "messages": [{"role": "user", "content": "one two three"}],
                           "max_tokens": n, "stream": True, "stream_options": {"include_usage": True}}
                out.append(await client.stream_chat(payload, request_id=f"t-{i}",
                                                    budget=budget or RequestBudget(10.0, 20.0)))
            return out

    return asyncio.run(go())


def test_a_healthy_stream(synthetic: Synthetic) -> None:
    (r,) = _run(synthetic, ["ok"])
    assert r.ok and r.error == "" and r.status_code == 200
    assert r.completion_tokens == 12 and r.prompt_tokens == 8 and not r.usage_missing
    assert len(r.token_times) == 12 and r.finish_reason == "length"
    assert r.t_sent < r.t_first <= r.t_last <= r.t_end  # type: ignore[operator]


def test_each_bad_server_behaviour_is_recorded_not_raised(synthetic: Synthetic) -> None:
    faults = ["cut", "error", "no_usage", "no_done", "empty_deltas", "500", "400", "ok"]
    cut, err, no_usage, no_done, empty, e500, e400, ok = _run(synthetic, faults)
    assert cut.error_kind == "cut" and 0 < len(cut.token_times) < 12
    assert err.error_kind == "stream_error" and "synthetic engine failure" in err.error
    assert no_usage.ok and no_usage.usage_missing and no_usage.completion_tokens == 12
    assert no_done.ok and no_done.completion_tokens == 12  # finish reason + usage, no [DONE]: complete
    assert empty.ok and len(empty.token_times) == 12 and empty.completion_tokens == 12
    assert e500.error_kind == "http" and e500.status_code == 500 and "synthetic internal error" in e500.error
    assert e400.error_kind == "http" and "maximum context length" in e400.error
    assert ok.ok  # the connection pool survived all of the above


def test_a_server_that_never_answers_times_out(synthetic: Synthetic) -> None:
    hang, after = _run(synthetic, ["hang", "ok"], budget=RequestBudget(1.0, 2.0))
    assert hang.error_kind == "timeout" and "no first token within 1.0 s" in hang.error
    assert hang.t_end - hang.t_sent < 5  # type: ignore[operator]
    assert after.ok


def test_a_stream_that_stalls_after_its_first_token_times_out(synthetic: Synthetic) -> None:
    synthetic.control(tokens_per_s=0.2, ttft_s=0.01)

    async def go() -> RequestRecord:
        async with VllmClient(synthetic.base_url, synthetic.model, api_key=synthetic.api_key,
                               stall_timeout_s=0.5) as client:
            payload = {"model": synthetic.model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
                       "stream": True}
            return await client.stream_chat(payload, request_id="stall", budget=RequestBudget(5.0, 60.0))

    r = asyncio.run(go())
    assert r.error_kind == "timeout" and r.error.startswith("stalled") and len(r.token_times) == 1
    assert r.t_end - r.t_sent < 4.5  # type: ignore[operator]  # caught by the stall limit, not the first-token budget


def test_a_stream_that_outlasts_its_total_budget_times_out(synthetic: Synthetic) -> None:
    synthetic.control(tokens_per_s=10.0, ttft_s=0.01)

    async def go() -> RequestRecord:
        async with VllmClient(synthetic.base_url, synthetic.model, api_key=synthetic.api_key) as client:
            payload = {"model": synthetic.model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 40,
                       "stream": True}
            return await client.stream_chat(payload, request_id="slow", budget=RequestBudget(0.5, 1.0))

    r = asyncio.run(go())  # 40 tokens at 10/s take 4 s; the budget is 0.5 s to the first, 1 s in all
    assert r.error_kind == "timeout" and r.error == "not finished within 1.0 s" and 0 < len(r.token_times) < 40


def test_nothing_listening_is_a_connect_error() -> None:
    async def go() -> RequestRecord:
        async with VllmClient(f"http://127.0.0.1:{free_port()}", "m") as client:
            return await client.stream_chat({"model": "m", "messages": [], "stream": True}, request_id="c",
                                            budget=RequestBudget(5.0, 5.0))

    r = asyncio.run(go())
    assert r.error_kind == "connect" and not r.ok


def test_a_wrong_key_is_an_http_error_and_the_key_never_appears(synthetic: Synthetic) -> None:
    (r,) = _run(synthetic, ["ok"], api_key="wrong-key-123")
    assert r.status_code == 401 and r.error_kind == "http"
    assert "wrong-key-123" not in r.model_dump_json()
    client = VllmClient("http://x", "m", api_key="s3cret")
    assert client.scrub("failed with s3cret") == "failed with ***"


def test_https_streams_and_plain_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    srv = start_synthetic("--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert srv.base_url.startswith("https://")
        (r,) = _run(srv, ["ok"])  # not trusted yet: the certificate is self-signed
        assert r.error_kind == "connect" and "CERTIFICATE_VERIFY_FAILED" in r.error
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted from here on (httpx reads it)
        ok, cut = _run(srv, ["ok", "cut"])
        assert ok.ok and ok.completion_tokens == 12 and len(ok.token_times) == 12
        assert cut.error_kind == "cut"

        async def models() -> list[str]:
            async with VllmClient(srv.base_url, srv.model, api_key=srv.api_key) as client:
                return (await client.models()).ids

        assert asyncio.run(models()) == [srv.model]
    finally:
        srv.stop()
