"""A synthetic OpenAI-compatible streaming server: the ground truth for the benchmark client.

This is the one test double of the benchmark (a FAKE server, named as such): it emits tokens on
an exact, known schedule, so what roost measures can be compared with what was sent, and it
produces on demand the faults a healthy vLLM cannot (a stream cut midway, an error event
mid-stream, a missing usage chunk, a 5xx, a request that never answers, a crash).

Run it as a script (its own process, so it does not share the client's interpreter)::

    python synthetic_server.py [--port 0] [--api-key KEY] [--tokens-per-s 25] [--ttft-s 0.05] [--tls-cert C --tls-key K]

It prints ``READY <port>`` once listening. Endpoints:

- ``POST /v1/chat/completions`` (stream or not): token ``i`` of a request is written at
  ``t0 + ttft + i / tokens_per_s`` on the event loop's monotonic clock, ``t0`` being when the
  request was read; the schedule is absolute, so lateness never accumulates. Usage is exact.
- ``POST /tokenize``: ``{"count": 5 + words}``: the "template" is 5 tokens, each
  whitespace-separated word of the message contents is one token (the same count usage reports).
- ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (vLLM-named counters and gauges).
- ``POST /_control`` ``{"tokens_per_s", "ttft_s", "prefill_tok_s", "batch", "faults": [...]}``: with
  ``batch`` N > 1 the server starts streams in batches of N, all on one clock once the N-th has
  arrived (as continuous batching schedules every waiting request together). The next
  chat requests take the listed faults in order: ``ok``, ``cut``, ``error``, ``no_usage``,
  ``no_done``, ``empty_deltas``, ``500``, ``400``, ``hang``, ``die``, ``slow_end`` (``[DONE]`` is
  written, the chunked stream's end a second later, as a loaded server may). ``tokenize_left`` N: the
  server answers N more ``/tokenize`` calls, then dies on the next (a death while prompts are built).
- ``GET /_stats``: ``log``, every request received (method, path); the server's record of what it did, per request id (``X-Request-Id``): when it
  read the request (``t_received``), when it wrote each token (``sent``; ``t_first`` and
  ``t_last`` are the first and last of them), the token count; and the largest lateness of any
  write against its schedule. Times are ``time.perf_counter()`` (CLOCK_MONOTONIC, comparable
  across processes on Linux), so a client's arrival times can be set against the same stream's
  write times: that, not the nominal schedule, is the truth the tests compare with (a loaded
  machine delays the server's writes too).
- ``/metrics`` also carries vLLM's per-request histograms ``vllm:request_time_per_output_token_seconds``
  and ``vllm:request_decode_time_seconds`` (``_sum`` and ``_count``), computed from the write times
  as vLLM computes them from its engine's token times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import sys
import time
from typing import Any

TEMPLATE_TOKENS = 5


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.log: list[list[str]] = []  # [method, path] of every request (not the /_ control ones)
        self.api_key: str | None = args.api_key
        self.model: str = args.model
        self.max_model_len: int = args.max_model_len
        self.tokens_per_s: float = args.tokens_per_s
        self.ttft_s: float = args.ttft_s
        self.prefill_tok_s: float | None = None
        self.faults: list[str] = []
        self.tokenize_left: int | None = None  # /tokenize answers left before the server dies on the next one
        self.stats: dict[str, dict[str, Any]] = {}
        self.max_lag_s = 0.0
        self.running = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.requests_seen = 0
        self.tpot_sum = 0.0
        self.decode_sum = 0.0
        self.finished = 0
        self.batch = 0
        self._arrived = 0
        self._batch_ready: asyncio.Event | None = None
        self._batch_t0 = 0.0

    async def join_batch(self) -> float:
        """Wait until ``batch`` requests have arrived (at most 60 s); return the batch's start time."""
        loop = asyncio.get_running_loop()
        if self._batch_ready is None:
            self._batch_ready = asyncio.Event()
        ready = self._batch_ready
        self._arrived += 1
        if self._arrived >= self.batch:
            self._batch_t0 = loop.time()
            self._arrived = 0
            self._batch_ready = None
            ready.set()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), 60)
        return self._batch_t0 if ready.is_set() else loop.time()


def count_tokens(messages: list[dict[str, Any]]) -> int:
    words = 0
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        words += len(str(content).split())
    return TEMPLATE_TOKENS + words


def _http(status: int, body: bytes, ctype: str = "application/json", extra: str = "") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 500: "Internal Server Error"}
    head = (
        f"HTTP/1.1 {status} {reason.get(status, 'X')}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def _json(status: int, obj: Any) -> bytes:
    return _http(status, json.dumps(obj).encode())


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(obj: Any) -> bytes:
    return _chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = b""
    n = int(headers.get("content-length", "0") or 0)
    if n:
        body = await reader.readexactly(n)
    return method, path, headers, body


async def stream_chat(
    st: State, writer: asyncio.StreamWriter, reader: asyncio.StreamReader, req: dict[str, Any], rid: str, fault: str
) -> bool:
    """Write one completion; False when the connection must close."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    t_received = time.perf_counter()
    prompt_tokens = count_tokens(req.get("messages", []))
    n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
    if fault == "400" or prompt_tokens + n > st.max_model_len:
        msg = (
            f"This model's maximum context length is {st.max_model_len} tokens. However, you requested "
            f"{prompt_tokens + n} tokens ({prompt_tokens} in the messages, {n} in the completion)."
        )
        writer.write(_json(400, {"error": {"message": msg, "type": "BadRequestError", "code": 400}}))
        return True
    if fault == "500":
        writer.write(_json(500, {"error": {"message": "synthetic internal error", "type": "InternalServerError"}}))
        return True
    if fault == "hang":
        with contextlib.suppress(Exception):
            await reader.read()  # until the client gives up
        return False
    if fault == "die":
        os._exit(3)
    if st.batch > 1:  # continuous batching: wait for the batch, then all start on the same clock
        t0 = await st.join_batch()
    rate = st.tokens_per_s
    ttft = st.ttft_s + (prompt_tokens / st.prefill_tok_s if st.prefill_tok_s else 0.0)
    st.requests_total += 1
    st.prompt_tokens_total += prompt_tokens
    stat: dict[str, Any] = {"prompt_tokens": prompt_tokens, "tokens": 0, "t_received": t_received,
                            "t_first": None, "t_last": None, "sent": []}
    st.stats[rid] = stat
    base = {"id": f"chatcmpl-{rid}", "object": "chat.completion.chunk", "created": int(time.time()), "model": st.model}
    stream = bool(req.get("stream"))
    include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
    st.running += 1
    try:
        if not stream:
            await asyncio.sleep(max(0.0, t0 + ttft + (n - 1) / rate - loop.time()))
            body = {
                "id": f"chatcmpl-{rid}", "object": "chat.completion", "model": st.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": " tok" * n}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n},
            }
            st.generation_tokens_total += n
            writer.write(_json(200, body))
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for i in range(n):
            target = t0 + ttft + i / rate
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = loop.time() - target
            st.max_lag_s = max(st.max_lag_s, lag)
            out = b""
            if i == 0:
                out += _event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
            if fault in ("cut", "error") and i == n // 2:
                if fault == "cut":
                    writer.write(out)
                    with contextlib.suppress(Exception):
                        await writer.drain()
                    writer.transport.abort()
                    return False
                out += _event({"error": {"message": "synthetic engine failure mid-stream", "type": "InternalServerError", "code": 500}})
                out += _event(b"[DONE]") + b"0\r\n\r\n"
                writer.write(out)
                return True
            content = "" if fault == "empty_deltas" and i % 4 == 3 else " tok"
            last = i == n - 1
            out += _event({**base, "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "length" if last else None}]})
            now = time.perf_counter()  # before the write: the client cannot see it earlier
            writer.write(out)
            if stat["t_first"] is None:
                stat["t_first"] = now
            stat["t_last"] = now
            stat["sent"].append(now)
            stat["tokens"] += 1
            st.generation_tokens_total += 1
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
        if stat["tokens"] > 1:  # as vLLM: decode time = last - first token, TPOT = that / (tokens - 1)
            st.finished += 1
            st.decode_sum += stat["t_last"] - stat["t_first"]
            st.tpot_sum += (stat["t_last"] - stat["t_first"]) / (stat["tokens"] - 1)
        out = b""
        if include_usage and fault != "no_usage":
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            out += _event({**base, "choices": [], "usage": usage})
        if fault != "no_done":
            out += _event(b"[DONE]")
        if fault == "slow_end":
            writer.write(out)
            await writer.drain()
            await asyncio.sleep(1.0)
            out = b""
        writer.write(out + b"0\r\n\r\n")
        await writer.drain()
        return True
    finally:
        st.running -= 1


def metrics_text(st: State) -> str:
    lines = [
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{model_name="{st.model}"}} {float(st.prompt_tokens_total)}',
        f'vllm:generation_tokens_total{{model_name="{st.model}"}} {float(st.generation_tokens_total)}',
        f'vllm:prefix_cache_queries_total{{model_name="{st.model}"}} {float(st.prompt_tokens_total)}',
        f'vllm:prefix_cache_hits_total{{model_name="{st.model}"}} 0.0',
        f'vllm:request_success_total{{finished_reason="length",model_name="{st.model}"}} {float(st.requests_total)}',
        f'vllm:num_requests_running{{model_name="{st.model}"}} {float(st.running)}',
        f'vllm:kv_cache_usage_perc{{model_name="{st.model}"}} {st.running / 256}',
        f'vllm:request_time_per_output_token_seconds_sum{{model_name="{st.model}"}} {st.tpot_sum!r}',
        f'vllm:request_time_per_output_token_seconds_count{{model_name="{st.model}"}} {float(st.finished)}',
        f'vllm:request_decode_time_seconds_sum{{model_name="{st.model}"}} {st.decode_sum!r}',
        f'vllm:request_decode_time_seconds_count{{model_name="{st.model}"}} {float(st.finished)}',
    ]
    return "\n".join(lines) + "\n"


async def handle(st: State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            got = await read_request(reader)
            if got is None:
                break
            method, path, headers, body = got
            path = path.split("?", 1)[0]
            if not path.startswith("/_"):  # every request anyone sent, for tests that assert nothing was forwarded
                st.log.append([method, path])
            keep = headers.get("connection", "").lower() != "close"
            if path.startswith("/v1/") and st.api_key and headers.get("authorization") != f"Bearer {st.api_key}":
                writer.write(_json(401, {"error": "Unauthorized"}))
            elif method == "POST" and path == "/v1/chat/completions":
                fault = st.faults.pop(0) if st.faults else "ok"
                st.requests_seen += 1
                rid = headers.get("x-request-id") or f"anon-{st.requests_seen}"
                keep = await stream_chat(st, writer, reader, json.loads(body), rid, fault) and keep
            elif method == "POST" and path == "/tokenize":
                if st.tokenize_left is not None:
                    if st.tokenize_left <= 0:
                        os._exit(3)  # dies while a prompt is being built, between measured steps
                    st.tokenize_left -= 1
                req = json.loads(body)
                n = count_tokens(req["messages"]) if "messages" in req else len(str(req.get("prompt", "")).split())
                writer.write(_json(200, {"count": n, "max_model_len": st.max_model_len, "tokens": list(range(n))}))
            elif method == "GET" and path == "/v1/models":
                writer.write(_json(200, {"object": "list", "data": [{"id": st.model, "object": "model", "max_model_len": st.max_model_len}]}))
            elif method == "GET" and path == "/health":
                writer.write(_http(200, b""))
            elif method == "GET" and path == "/metrics":
                writer.write(_http(200, metrics_text(st).encode(), "text/plain"))
            elif method == "POST" and path == "/_control":
                ctl = json.loads(body)
                for key in ("tokens_per_s", "ttft_s", "prefill_tok_s", "batch", "tokenize_left"):
                    if key in ctl:
                        setattr(st, key, ctl[key])
                if "faults" in ctl:
                    st.faults = list(ctl["faults"])
                if ctl.get("reset_stats"):
                    st.stats.clear()
                    st.max_lag_s = 0.0
                writer.write(_json(200, {"ok": True}))
            elif method == "GET" and path == "/_stats":
                writer.write(_json(200, {"requests": st.stats, "max_lag_s": st.max_lag_s, "log": st.log}))
            else:
                writer.write(_json(404, {"error": f"no route {method} {path}"}))
            await writer.drain()
            if not keep:
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--api-key", default=os.environ.get("SYNTHETIC_API_KEY"))
    p.add_argument("--model", default="synthetic")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--tokens-per-s", type=float, default=25.0)
    p.add_argument("--ttft-s", type=float, default=0.05)
    p.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM) ...")
    p.add_argument("--tls-key", help="... and this key")
    args = p.parse_args()
    st = State(args)
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    server = await asyncio.start_server(lambda r, w: handle(st, r, w), args.host, args.port, backlog=1024, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    sys.exit(0)
