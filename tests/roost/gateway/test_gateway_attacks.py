"""The gateway tried as an attacker would: a key holder dodging the meter, bodies the encoder cannot
write, UTF-8 in the trusted header, backends leaking internals, garbage on a kept-alive connection, a
cut stream, a backend without usage. Against the real ``roost gateway serve`` process, raw sockets
where the bytes matter, and a recording upstream (``support.recording_upstream``, a fake) for the
backend faults vLLM cannot produce. How vLLM itself reads ``stream``: ``test_request_parity.py`` and
``test_gateway_vllm.py``; connection limits: ``test_gateway_connections.py``; ``/metrics`` access:
``test_gateway_metrics_access.py``."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.gateway import ROOST, UPSTREAM_KEY, GatewayProcess, add_key, until_closed, usage_rows, wait_row
from support.recording_upstream import MODEL, RecordingUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    with RecordingUpstream(UPSTREAM_KEY) as up:
        yield up


@pytest.fixture(scope="module")
def gw(upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    where = tmp_path_factory.mktemp("gateway-attacks")
    g = GatewayProcess(f"sqlite:///{where / 'usage.db'}", [upstream.base_url], log_path=where / "gateway.log",
                       extra=["--poll-interval", "30"])
    g.start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture(scope="module")
def key(gw: GatewayProcess) -> str:
    return add_key(gw.db_url, "mallory", "user")


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def post(gw: GatewayProcess, key: str, body: Any, path: str = "/v1/chat/completions") -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(gw.url + path, content=data, headers={"Authorization": f"Bearer {key}",
                                                            "content-type": "application/json"}, timeout=30)


def row_of(gw: GatewayProcess, resp: httpx.Response) -> dict[str, Any]:
    rid = resp.headers["x-request-id"]
    return wait_row(gw.db_url, lambda r: r["request_id"] == rid)


def raw(port: int, request: bytes) -> bytes:
    """Send ``request`` as bytes on a fresh connection, read until the gateway closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        return until_closed(sock)


def assert_no_internals(text: str, upstream: RecordingUpstream) -> None:
    forms = [UPSTREAM_KEY, base64.b64encode(UPSTREAM_KEY.encode()).decode(),
             base64.b64encode(f"x:{UPSTREAM_KEY}".encode()).decode()]
    for leak in (*forms, "Traceback", "site-packages", upstream.base_url, f"127.0.0.1:{upstream.port}"):
        assert leak not in text, leak


@pytest.mark.parametrize("spelling", ["true", 1, "yes", "on"])
def test_a_stream_spelled_otherwise_is_metered_as_the_stream_it_is(gw: GatewayProcess, key: str,
                                                                   upstream: RecordingUpstream,
                                                                   spelling: Any) -> None:
    resp = post(gw, key, chat(f"spelled {spelling!r}", stream=spelling, max_tokens=4))
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    assert resp.text.rstrip().endswith("data: [DONE]") and '"usage"' not in resp.text  # not asked: not shown
    sent = next(r for r in upstream.posts("/v1/chat/completions") if f"spelled {spelling!r}" in r.body.decode())
    assert sent.json()["stream"] is True  # the backend is told what the gateway read
    assert sent.json()["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    row = row_of(gw, resp)
    assert (row["stream"], row["status"], row["completion_tokens"], row["completion_source"]) == (True, "ok", 2,
                                                                                                   "usage")


def test_a_stream_vllm_would_refuse_is_refused_and_not_forwarded(gw: GatewayProcess, key: str,
                                                                 upstream: RecordingUpstream) -> None:
    before = len(upstream.posts("/v1/chat/completions"))
    resp = post(gw, key, chat("maybe", stream="maybe"))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stream"
    resp = post(gw, key, chat("opts", stream=False, stream_options={"include_usage": True}))
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stream_options"
    assert len(upstream.posts("/v1/chat/completions")) == before


def test_a_stream_answered_where_none_was_read_is_billed_from_what_was_relayed(gw: GatewayProcess, key: str) -> None:
    resp = post(gw, key, chat("sse-anyway"))
    assert resp.status_code == 200 and "data: [DONE]" in resp.text
    row = row_of(gw, resp)
    assert row["status"] == "ok" and row["completion_tokens"] == 3 and row["completion_source"] == "stream-count"


def test_a_whole_answer_to_a_stream_is_billed_from_its_usage(gw: GatewayProcess, key: str) -> None:
    resp = post(gw, key, chat("json-anyway", stream=True))
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 2
    row = row_of(gw, resp)
    assert (row["status"], row["completion_tokens"], row["completion_source"]) == ("ok", 2, "usage")


def test_an_answer_without_usage_is_billed_by_its_text(gw: GatewayProcess, key: str) -> None:
    resp = post(gw, key, chat("no-usage"))
    assert resp.status_code == 200
    row = row_of(gw, resp)
    assert (row["completion_tokens"], row["completion_source"]) == (3, "tokenize")  # "hello there friend"
    assert row["prompt_source"] == "tokenize" and row["prompt_tokens"] > 0


@pytest.mark.parametrize("depth", [300, 900])
def test_a_deeply_nested_body_is_forwarded_not_crashed_on(gw: GatewayProcess, key: str, upstream: RecordingUpstream,
                                                           depth: int) -> None:
    nested: Any = "x"
    for _ in range(depth):
        nested = {"a": nested}
    resp = post(gw, key, chat(f"deep {depth}", stream=True, metadata=nested))
    assert resp.status_code == 200 and resp.text.rstrip().endswith("data: [DONE]")
    sent = next(r for r in upstream.posts("/v1/chat/completions") if f"deep {depth}" in r.body.decode())
    assert sent.json()["metadata"] == nested
    assert row_of(gw, resp)["status"] == "ok"


def test_a_body_deeper_than_json_parsers_read_is_a_clean_400(gw: GatewayProcess, key: str) -> None:
    resp = post(gw, key, b'{"model": "rec", "stream": true, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    assert "Traceback" not in gw.log()


def test_a_trusted_user_in_utf8_is_stored_as_the_same_text(gw: GatewayProcess, upstream: RecordingUpstream) -> None:
    app = add_key(gw.db_url, "webui", "app", trusted=True)
    email = "jöhn.dœ@exämple.com"
    body = json.dumps(chat("ok", max_tokens=2)).encode()
    forms = [email.encode("utf-8"), b"UTF-8''" + "".join(f"%{b:02X}" if b > 127 or chr(b) in "@%" else chr(b)
                                                         for b in email.encode()).encode()]
    for form in forms:
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: "
                b"application/json\r\nAuthorization: Bearer " + app.encode() + b"\r\nX-OpenWebUI-User-Email: " + form
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        answer = raw(gw.port, head + body)
        assert answer.startswith(b"HTTP/1.1 200")
        rid = answer.split(b"x-request-id: ", 1)[1].split(b"\r\n", 1)[0].decode()
        assert wait_row(gw.db_url, lambda r, rid=rid: r["request_id"] == rid)["user"] == email
    by_user = {r["user"] for r in usage_rows(gw.db_url) if r["key_name"] == "webui"}
    assert by_user == {email}  # one person, one user
    assert email not in gw.log()
    shown = subprocess.run([str(ROOST), "gateway", "usage", "--by", "user", "--json", "--db", gw.db_url],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert shown.returncode == 0, shown.stderr
    assert [r["requests"] for r in json.loads(shown.stdout) if r["user"] == email] == [2]  # shown as stored


def test_a_backend_traceback_never_reaches_the_client(gw: GatewayProcess, key: str,
                                                      upstream: RecordingUpstream) -> None:
    resp = post(gw, key, chat("traceback-500"))
    assert resp.status_code == 500
    assert resp.json()["error"] == {"message": "the model's server failed (HTTP 500)", "type": "api_error",
                                    "param": None, "code": "backend_error"}
    assert_no_internals(resp.text, upstream)
    assert row_of(gw, resp)["status"] == "http_500"


def test_an_error_event_echoing_the_key_is_scrubbed_in_the_stream(gw: GatewayProcess, key: str,
                                                                  upstream: RecordingUpstream) -> None:
    resp = post(gw, key, chat("stream-error-echo", stream=True))
    assert resp.status_code == 200
    assert_no_internals(resp.text, upstream)
    error = next(json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith('data: {"error"'))
    assert error["error"]["message"].startswith("Authorization Bearer ***")
    assert row_of(gw, resp)["status"] == "backend_cut"  # an error event: not a completed answer


def test_garbage_on_a_kept_alive_connection_is_never_sent_twice(gw: GatewayProcess, key: str,
                                                                upstream: RecordingUpstream) -> None:
    with httpx.Client(timeout=30) as http:  # a first request leaves a kept-alive backend connection behind
        for content in ("ok", "garbage"):
            resp = http.post(gw.url + "/v1/chat/completions", json=chat(content),
                             headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "backend_error"
    assert len(upstream.posts("/v1/chat/completions", "garbage")) == 1  # a POST the backend read: once


def test_one_cut_stream_does_not_take_the_backend_away_from_everyone(gw: GatewayProcess, key: str) -> None:
    resp = post(gw, key, chat("cut", stream=True))
    assert resp.status_code == 200 and "stopped mid-answer" in resp.text
    assert row_of(gw, resp)["status"] == "backend_cut"
    for _ in range(3):  # the next clients are served: the backend's poll answered
        assert post(gw, key, chat("ok", max_tokens=2)).status_code == 200
    assert httpx.get(gw.url + "/health", timeout=10).json()["backends_up"] == 1


def test_the_model_list_names_models_not_the_backends_disk(gw: GatewayProcess, key: str) -> None:
    listed = httpx.get(gw.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10).json()["data"]
    assert listed == [{"id": MODEL, "object": "model", "max_model_len": 4096}]  # vLLM's root is its weights' path


def test_nothing_the_attacks_did_left_a_traceback_or_a_secret_in_the_log(gw: GatewayProcess, key: str) -> None:
    post(gw, key, chat("ok"))
    log = gw.log()
    assert "Traceback" not in log and UPSTREAM_KEY not in log and key not in log


def test_the_books_hold_one_row_per_forwarded_request(gw: GatewayProcess, upstream: RecordingUpstream) -> None:
    rows = usage_rows(gw.db_url)
    assert all(r["status"] != "ok" or r["completion_source"] != "none" for r in rows)  # nothing billed as 0 unseen
    assert len({r["request_id"] for r in rows}) == len(rows)


def test_a_bug_while_forwarding_is_an_openai_500_and_a_gateway_error_row(tmp_path: Path,
                                                                         upstream: RecordingUpstream) -> None:
    """The one fault no real part produces: a bug in the gateway, planted in-process (the meter raises)."""
    import asyncio

    from roost.gateway import forward as gateway_app
    from roost.gateway.app import Gateway
    from roost.gateway.config import GatewayConfig
    from roost.gateway.db import GatewayDB
    from roost.gateway.routing import Router

    class Broken(gateway_app.StreamMeter):
        def feed(self, data: bytes) -> bytes:
            raise RuntimeError("planted bug holding a client's data: secret-prompt")

    def broken_usage(_answer: Any) -> tuple[int | None, int | None]:
        raise RuntimeError("planted bug holding a client's data: secret-prompt")

    async def go() -> tuple[list[httpx.Response], list[dict[str, Any]]]:
        db_url = f"sqlite:///{tmp_path / 'u.db'}"
        gw = Gateway(GatewayDB(db_url), Router([upstream.base_url], UPSTREAM_KEY, use_registry=False), GatewayConfig())
        await gw.start()
        try:
            k = await gw.db.add_key("bug", "user")
            originals = gateway_app.StreamMeter, gateway_app.usage_of
            gateway_app.StreamMeter, gateway_app.usage_of = Broken, broken_usage  # type: ignore[misc]
            try:
                transport = httpx.ASGITransport(app=gw.app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
                    out = [await http.post("/v1/chat/completions", json=chat("ok", stream=stream),
                                           headers={"Authorization": f"Bearer {k}"}) for stream in (True, False)]
            finally:
                gateway_app.StreamMeter, gateway_app.usage_of = originals  # type: ignore[misc]
        finally:
            await gw.stop()  # commits the queued rows
        db = await GatewayDB(db_url).connect()
        try:
            return out, await db.usage_rows()
        finally:
            await db.close()

    (streamed, whole), rows = asyncio.run(go())
    assert streamed.status_code == 200  # the head was out: the stream ends with an error event
    assert '"code":"gateway_error"' in streamed.text and "secret-prompt" not in streamed.text
    assert whole.status_code == 500 and whole.json()["error"]["code"] == "gateway_error"
    assert "secret-prompt" not in whole.text
    assert sorted(r["status"] for r in rows) == ["gateway_error", "gateway_error"]
    assert all(r["http_status"] == 500 for r in rows)
