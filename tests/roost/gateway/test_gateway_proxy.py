"""The gateway as a user runs it (``roost gateway serve``) in front of the synthetic server (FAKE
backend: exact usage, a request log, faults on demand): metering, auth, limits, routing errors,
disconnects, a backend killed mid-stream, trusted-header attribution, and no secret in what it prints."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench_synthetic import Synthetic, start_synthetic
from prometheus_client.parser import text_string_to_metric_families
from support.gateway import (
    ROOST,
    UPSTREAM_KEY,
    GatewayProcess,
    add_key,
    until_closed,
    usage_rows,
    wait_row,
    wait_rows,
)
from support.wait import wait_for

TEMPLATE = 5  # the synthetic server's chat template, in tokens


def chat(gw: GatewayProcess, key: str, *, model: str = "synthetic", content: str = "one two three",
         max_tokens: int = 4, stream: bool = False, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "stream": stream, **extra}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                      timeout=30)


def events(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def refused(gw: GatewayProcess, reason: str) -> float:
    """The gateway's ``roost_gateway_refused_total`` for ``reason``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in gw.metrics().splitlines()
               if line.startswith("roost_gateway_refused_total{") and f'reason="{reason}"' in line)


def backend_log(backend: Synthetic) -> list[list[str]]:
    """Every request the backend received, but the gateway's /v1/models polls."""
    return [e for e in backend.stats()["log"] if e[1] != "/v1/models"]


@pytest.fixture(scope="module")
def alice(gateway: GatewayProcess) -> str:
    return add_key(gateway.db_url, "alice", "user")


def test_whole_and_streamed_answers_are_metered_exactly(gateway: GatewayProcess, alice: str) -> None:
    before = len(usage_rows(gateway.db_url))
    whole = chat(gateway, alice, content="a b c d", max_tokens=6)
    assert whole.status_code == 200, whole.text
    assert whole.json()["usage"] == {"prompt_tokens": TEMPLATE + 4, "completion_tokens": 6, "total_tokens": 15}
    plain = chat(gateway, alice, content="a b", max_tokens=3, stream=True)
    got = events(plain.text)
    assert got[-1] == "[DONE]" and all("usage" not in e for e in got[:-1])  # not asked for: not sent
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in got[:-1]) == " tok" * 3
    asked = chat(gateway, alice, content="a b c", max_tokens=5, stream=True, stream_options={"include_usage": True})
    usage_chunks = [e for e in events(asked.text)[:-1] if e.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0]["choices"] == []  # as the client asked: one, at the end
    assert usage_chunks[0]["usage"]["completion_tokens"] == 5
    rows = usage_rows(gateway.db_url)[before:]
    assert [(r["prompt_tokens"], r["completion_tokens"], r["status"], r["stream"]) for r in rows] == [
        (TEMPLATE + 4, 6, "ok", False), (TEMPLATE + 2, 3, "ok", True), (TEMPLATE + 3, 5, "ok", True)]
    assert {r["key_name"] for r in rows} == {"alice"} and {r["kind"] for r in rows} == {"user"}
    assert all(r["prompt_source"] == "usage" and r["completion_source"] == "usage" for r in rows)
    assert all(r["added_s"] is not None and 0 <= r["added_s"] < r["ttft_s"] for r in rows)


def test_without_usage_from_the_backend_tokens_are_counted(gateway: GatewayProcess, backend: Synthetic,
                                                          alice: str) -> None:
    """A backend that sends no usage: the prompt counted by its /tokenize at request start, the completion
    one token per streamed chunk with text."""
    backend.control(faults=["no_usage"])
    resp = chat(gateway, alice, content="x y z w", max_tokens=7, stream=True)
    assert resp.status_code == 200 and events(resp.text)[-1] == "[DONE]"
    row = usage_rows(gateway.db_url)[-1]
    assert (row["prompt_tokens"], row["prompt_source"]) == (TEMPLATE + 4, "tokenize")
    assert (row["completion_tokens"], row["completion_source"]) == (7, "stream-count")
    assert ["POST", "/tokenize"] in backend_log(backend)


def test_no_key_wrong_key_revoked_key_are_refused_and_nothing_is_forwarded(gateway: GatewayProcess,
                                                                           backend: Synthetic) -> None:
    bob = add_key(gateway.db_url, "bob", "app")
    assert chat(gateway, bob).status_code == 200  # a key made a moment ago works at once
    revoke = subprocess.run([str(ROOST), "gateway", "key", "revoke", "bob", "--db", gateway.db_url],
                            capture_output=True, text=True, timeout=60)
    assert revoke.returncode == 0, revoke.stderr
    # the revocation takes effect at the gateway's next key reload (every --key-refresh, 1 s): seen on its
    # /v1/models, which forwards nothing (how soon is a figure for benchmarks/, not a bound here)
    wait_for("bob's key refused after its revocation",
             lambda: httpx.get(f"{gateway.url}/v1/models", headers={"Authorization": f"Bearer {bob}"},
                               timeout=10).status_code == 401, timeout_s=60, every_s=0.1)
    seen = len(backend_log(backend))
    url = f"{gateway.url}/v1/chat/completions"
    body = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}]}
    for headers in ({}, {"Authorization": "Bearer rk-not-a-key"}, {"Authorization": f"Basic {bob}"},
                    {"Authorization": f"Bearer {bob}"}, {"Authorization": f"Bearer {UPSTREAM_KEY}"}):
        resp = httpx.post(url, json=body, headers=headers, timeout=10)
        assert resp.status_code == 401, (headers.keys(), resp.text)
        assert resp.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{gateway.url}/v1/models", timeout=10).status_code == 401
    assert len(backend_log(backend)) == seen  # nothing reached the backend


def test_models_are_the_union_and_unknown_models_and_bad_bodies_are_refused(gateway: GatewayProcess, alice: str,
                                                                           backend: Synthetic) -> None:
    models = httpx.get(f"{gateway.url}/v1/models", headers={"Authorization": f"Bearer {alice}"}, timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["synthetic"]
    seen = len(backend_log(backend))
    missing = chat(gateway, alice, model="gpt-17")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found" and "synthetic" in missing.json()["error"]["message"]
    headers = {"Authorization": f"Bearer {alice}", "Content-Type": "application/json"}
    url = f"{gateway.url}/v1/chat/completions"
    assert httpx.post(url, content=b"{not json", headers=headers, timeout=10).status_code == 400
    assert httpx.post(url, content=b"[1, 2]", headers=headers, timeout=10).status_code == 400
    assert httpx.post(url, json={"messages": []}, headers=headers, timeout=10).status_code == 400
    big = httpx.post(url, content=b'{"model": "synthetic", "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}',
                     headers=headers, timeout=30)
    assert big.status_code == 413
    assert backend_log(backend)[seen:] == []


def test_a_client_that_sends_its_body_slowly_is_cut_before_anything_is_forwarded(gateway: GatewayProcess, alice: str,
                                                                                 backend: Synthetic) -> None:
    seen = len(backend_log(backend))
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as s:  # a hang fails here
        t0 = time.monotonic()  # before the gateway can have started its body timer
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"model\": ".encode())
        first = s.recv(65536)
        waited = time.monotonic() - t0
        answer = (first + until_closed(s)).decode()  # the head and the body may come in two segments
    assert answer.startswith("HTTP/1.1 408"), answer[:200]
    assert "request body not received within 2 s" in answer, answer  # the gateway's own --body-timeout
    assert waited >= 1.99, waited  # not cut before it (a loaded machine only makes the answer later)
    assert backend_log(backend)[seen:] == []


def test_a_client_that_stops_reading_is_cut_and_billed_for_what_was_sent(gw_dir: Path, alice: str,
                                                                         gateway: GatewayProcess) -> None:
    """A reader that never reads cannot hold a backend stream: after --client-timeout of blocked writes
    the gateway closes both sides and stores what it had sent."""
    fast = start_synthetic("--max-model-len", "400000", "--tokens-per-s", "50000", api_key=UPSTREAM_KEY, model="fast")
    gw = GatewayProcess(gateway.db_url, [fast.base_url], log_path=gw_dir / "slow-reader.log",
                        extra=["--client-timeout", "2"]).start()
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", gw.port))
            body = json.dumps({"model": "fast", "messages": [{"role": "user", "content": "go"}],
                               "max_tokens": 300000, "stream": True}).encode()
            s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            row = wait_row(gw.db_url, lambda r: r["model"] == "fast", timeout_s=60)  # the blocked stream ended
        assert row["status"] == "client_timeout"
        assert 0 < row["completion_tokens"] < 300000
        sent = next(iter(fast.record().values()))["tokens"]
        assert sent < 300000  # the backend's stream was closed too
    finally:
        gw.stop()
        fast.stop()


def test_a_client_that_leaves_mid_stream_is_billed_for_what_was_streamed(gateway: GatewayProcess, alice: str,
                                                                         backend: Synthetic) -> None:
    backend.control(tokens_per_s=50)
    try:
        before = len(usage_rows(gateway.db_url))
        got = 0
        body = {"model": "synthetic", "messages": [{"role": "user", "content": "tell me"}], "max_tokens": 200,
                "stream": True}
        with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {alice}"}) as resp:
            rid = resp.headers["x-request-id"]
            for line in resp.iter_lines():
                if line.startswith("data: ") and '"content": " tok"' in line:
                    got += 1
                    if got == 10:
                        break
        rows = wait_rows(gateway.db_url, before + 1)
        row = next(r for r in rows[before:] if r["request_id"] == rid)
        assert row["status"] == "client_disconnected"
        assert 10 <= row["completion_tokens"] <= 14  # what was streamed (a chunk or two may have been in flight)
        assert row["prompt_tokens"] == TEMPLATE + 2
        # (that the backend's request is closed with the client's is seen on vLLM, which aborts it:
        # test_gateway_vllm; this FAKE server writes on into a closed socket)
    finally:
        backend.control(tokens_per_s=25)


def test_a_client_that_closes_on_done_has_a_whole_answer(gateway: GatewayProcess, alice: str,
                                                        backend: Synthetic) -> None:
    """openai's client closes the connection as soon as it reads ``[DONE]``; a backend that ends its chunked
    stream a second after ``[DONE]`` (``slow_end``) must not turn that answer into ``client_disconnected``."""
    before = len(usage_rows(gateway.db_url))
    backend.control(faults=["slow_end"])
    body = {"model": "synthetic", "messages": [{"role": "user", "content": "a b"}], "max_tokens": 5,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {alice}"}) as resp:
        rid = resp.headers["x-request-id"]
        for line in resp.iter_lines():
            if line == "data: [DONE]":
                break  # and close, as openai >= 2 does
        else:
            raise AssertionError("no [DONE]")
    rows = wait_rows(gateway.db_url, before + 1)
    row = next(r for r in rows[before:] if r["request_id"] == rid)
    assert (row["status"], row["completion_tokens"], row["completion_source"]) == ("ok", 5, "usage")


def test_a_backend_killed_mid_stream(gw_dir: Path, gateway: GatewayProcess, alice: str) -> None:
    """The client gets an error in the stream, usage keeps the partial count, and the cut makes the gateway
    poll the backend at once (its scheduled polls are an hour apart here): once that poll finds it dead, a
    request for the model is refused with 503 before anything is forwarded (never a hang on a connect)."""
    from openai import APIError, OpenAI

    doomed = start_synthetic("--tokens-per-s", "40", api_key=UPSTREAM_KEY, model="doomed")
    gw = GatewayProcess(gateway.db_url, [doomed.base_url], log_path=gw_dir / "doomed.log",
                        extra=["--poll-interval", "3600"]).start()
    try:
        before = len(usage_rows(gw.db_url))  # the module's database already holds other tests' rows
        client = OpenAI(base_url=f"{gw.url}/v1", api_key=alice, max_retries=0)
        stream = client.chat.completions.create(model="doomed", messages=[{"role": "user", "content": "go"}],
                                                max_tokens=400, stream=True)
        seen = 0
        with pytest.raises(APIError):
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    seen += 1
                    if seen == 8:
                        os.kill(doomed.proc.pid, signal.SIGKILL)
        doomed.proc.wait()
        (row,) = [r for r in wait_rows(gw.db_url, before + 1) if r["model"] == "doomed"]
        assert row["status"] == "backend_cut"
        assert 8 <= row["completion_tokens"] < 400
        # only the poll the cut asks for can mark the backend down (the scheduled one is an hour away)
        health = wait_for("the gateway's poll to find the killed backend down",
                          lambda: (h := httpx.get(f"{gw.url}/health", timeout=10).json())["backends_up"] == 0 and h,
                          timeout_s=60, every_s=0.1)
        assert health["backends"] == 1 and health["models"] == []
        down_before = refused(gw, "backend_down")
        resp = httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {alice}"},
                          json={"model": "doomed", "messages": [{"role": "user", "content": "again"}]}, timeout=30)
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "backend_unavailable", resp.text
        # refused at admission from the gateway's own record of the backend: no connection was tried (a
        # forwarded request that failed to connect would leave a usage row), so nothing could hang on one
        assert refused(gw, "backend_down") == down_before + 1
        assert [r for r in usage_rows(gw.db_url)[before:] if r["model"] == "doomed"] == [row]
    finally:
        gw.stop()
        doomed.stop()


def test_a_trusted_front_end_attributes_its_users_and_the_email_stays_out_of_logs(gateway: GatewayProcess,
                                                                                  alice: str) -> None:
    webui = add_key(gateway.db_url, "open-webui", "app", trusted=True)
    email = "carol.secret-user@example.org"
    header = {"X-OpenWebUI-User-Email": email}
    for key, stream in ((webui, False), (alice, False), (webui, True)):
        resp = httpx.post(f"{gateway.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}", **header},
                          json={"model": "synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                "stream": stream}, timeout=30)
        assert resp.status_code == 200
    rows = usage_rows(gateway.db_url)[-3:]
    assert [(r["key_name"], r["user"]) for r in rows] == [("open-webui", email), ("alice", None), ("open-webui", email)]
    by_user = subprocess.run([str(ROOST), "gateway", "usage", "--by", "user", "--json", "--db", gateway.db_url],
                             capture_output=True, text=True, timeout=60)
    assert any(r["user"] == email for r in json.loads(by_user.stdout))
    assert email not in gateway.log()
    # /metrics names the forwarded user in the per-user series' user label only (bounded: test_user_metrics)
    samples = [s for f in text_string_to_metric_families(gateway.metrics()) for s in f.samples]
    mine = {s.name: s.value for s in samples if email in s.labels.values()}
    assert all(s.labels.get("user") == email for s in samples if email in s.labels.values())
    assert mine["roost_gateway_user_requests_total"] == 2  # a whole answer and a stream
    assert mine["roost_gateway_user_ttft_seconds_count"] == 2 and mine["roost_gateway_user_ttft_seconds_sum"] > 0
    assert mine["roost_gateway_user_completion_tokens_total"] == rows[0]["completion_tokens"] + rows[2]["completion_tokens"]


def test_metrics_count_per_key_kind_and_model_and_no_secret_is_printed(gateway: GatewayProcess, alice: str) -> None:
    text = gateway.metrics()
    rows = [r for r in usage_rows(gateway.db_url) if r["key_name"] == "alice" and r["model"] == "synthetic"]

    def sample(name: str, **labels: str) -> float:
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    assert sample("roost_gateway_prompt_tokens_total", key="alice", kind="user", model="synthetic") == sum(
        r["prompt_tokens"] for r in rows)
    assert sample("roost_gateway_completion_tokens_total", key="alice", kind="user", model="synthetic") == sum(
        r["completion_tokens"] for r in rows)
    assert sample("roost_gateway_requests_total", key="alice", model="synthetic") == len(rows)
    # alice forwards nobody: her per-user series are her key's
    assert sample("roost_gateway_user_requests_total", user="alice", kind="user", model="synthetic") == len(rows)
    assert sample("roost_gateway_user_completion_tokens_total", user="alice", kind="user", model="synthetic") == sum(
        r["completion_tokens"] for r in rows)
    assert sample("roost_gateway_refused_total", reason="unauthorized") >= 1
    assert "roost_gateway_added_latency_seconds_bucket" in text
    for secret in (alice, UPSTREAM_KEY):
        assert secret not in text and secret not in gateway.log()


class _EchoHeaders:
    """A FAKE backend for a fault a healthy vLLM does not produce: its error bodies echo the request's
    headers (as some proxies and frameworks do), the upstream key among them."""

    def __init__(self) -> None:
        import http.server
        import threading

        from support.hostile_servers import QuietHandler

        class Handler(QuietHandler):
            _send = QuietHandler.send_body

            def do_GET(self) -> None:
                self._send(200, json.dumps({"object": "list", "data": [{"id": "echo", "object": "model"}]}).encode())

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                echoed = {k: v for k, v in self.headers.items()}
                self._send(400, json.dumps({"error": {"message": f"bad request; headers were {echoed}"}}).encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_backend_error_that_echoes_headers_never_shows_the_upstream_key(gw_dir: Path, gateway: GatewayProcess,
                                                                          alice: str) -> None:
    echo = _EchoHeaders()
    gw = GatewayProcess(gateway.db_url, [echo.url], log_path=gw_dir / "echo.log").start()
    try:
        resp = chat(gw, alice, model="echo")
        assert resp.status_code == 400 and "headers were" in resp.text
        assert UPSTREAM_KEY not in resp.text and alice not in resp.text and "***" in resp.text
        row = wait_row(gw.db_url, lambda r: r["model"] == "echo")
        assert (row["status"], row["prompt_tokens"], row["completion_tokens"]) == ("http_400", 0, 0)
        assert UPSTREAM_KEY not in gw.log()
    finally:
        gw.stop()
        echo.server.shutdown()


def test_tokenize_after_counts_only_what_the_backend_did_not(gw_dir: Path, gateway: GatewayProcess, alice: str,
                                                            backend: Synthetic) -> None:
    """``--tokenize-after S``: no /tokenize for an answer that brings its own usage within S; a request
    that ends without one is still counted (late)."""
    gw = GatewayProcess(gateway.db_url, [backend.base_url], log_path=gw_dir / "lazy.log",
                        extra=["--tokenize-after", "30"]).start()
    try:
        seen = len(backend_log(backend))
        assert chat(gw, alice, content="p q r", max_tokens=3).status_code == 200
        assert ["POST", "/tokenize"] not in backend_log(backend)[seen:]
        backend.control(faults=["no_usage"])
        assert chat(gw, alice, content="p q r s", max_tokens=3, stream=True).status_code == 200
        row = usage_rows(gw.db_url)[-1]
        assert (row["prompt_tokens"], row["prompt_source"], row["completion_tokens"]) == (TEMPLATE + 4, "tokenize", 3)
        assert ["POST", "/tokenize"] in backend_log(backend)[seen:]
    finally:
        gw.stop()
