"""The gateway's hot path (``Gateway.early``: a request admitted and written upstream by the HTTP
protocol's callback; ``roost.gateway.direct``: a stream's blocks written to the client from the
upstream connection's) answers and bills exactly as the whole door does: the same request sent in one
write (the hot path) and with its body a moment after its head (the task's path), a wrong key and a
bad body in one write (refused by the door, never forwarded)."""

from __future__ import annotations

import json
import socket
import time

from support.gateway import GatewayProcess, add_key, until_closed, wait_row

BODY = {"model": "synthetic", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 5,
        "stream": True, "stream_options": {"include_usage": True}}


def _exchange(gw: GatewayProcess, key: str, body: bytes, *, split_s: float | None = None) -> bytes:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=15) as s:
        if split_s is None:
            s.sendall(head + body)
        else:
            s.sendall(head)
            time.sleep(split_s)
            s.sendall(body)
        answer: bytes = until_closed(s)
    return answer


def _request_id(answer: bytes) -> str:
    head = answer.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    return next(line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.startswith("x-request-id:"))


def test_one_write_and_a_split_body_are_answered_and_billed_alike(gateway: GatewayProcess) -> None:
    key = add_key(gateway.db_url, "hot-path", "user")
    body = json.dumps(BODY).encode()
    rows = []
    for split in (None, None, 0.05, None):  # the first one warms the upstream connections
        answer = _exchange(gateway, key, body, split_s=split)
        assert answer.startswith(b"HTTP/1.1 200") and b"text/event-stream" in answer, answer[:300]
        assert b"data: [DONE]" in answer and answer.endswith(b"0\r\n\r\n")
        assert answer.count(b'"usage"') == 1  # the client asked for the last chunk's usage only
        rid = _request_id(answer)
        rows.append(wait_row(gateway.db_url, lambda r, rid=rid: r["request_id"] == rid))
    assert {(r["status"], r["completion_tokens"], r["completion_source"], r["prompt_source"]) for r in rows} == {
        ("ok", 5, "usage", "usage")}
    assert len({r["prompt_tokens"] for r in rows}) == 1


def test_refusals_in_one_write_are_the_doors(gateway: GatewayProcess) -> None:
    key = add_key(gateway.db_url, "hot-path-refused", "user")
    body = json.dumps(BODY).encode()
    assert _exchange(gateway, "rk-not-a-key", body).startswith(b"HTTP/1.1 401")
    assert _exchange(gateway, key, b'{"model": "synthetic", "stream": "sure"}').startswith(b"HTTP/1.1 400")
    assert _exchange(gateway, key, json.dumps({**BODY, "model": "nope"}).encode()).startswith(b"HTTP/1.1 404")
    assert _exchange(gateway, key, b"not json").startswith(b"HTTP/1.1 400")
