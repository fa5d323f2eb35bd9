"""The streaming client: one ``httpx.AsyncClient`` (one connection pool) per benchmark run.

:meth:`BenchClient.stream_chat` sends one streamed ``/v1/chat/completions`` request and returns a
:class:`~roost.bench.metrics.RequestRecord`; it never raises for anything the server does. What
it handles, each recorded with an ``error_kind``:

- ``http``: a non-200 status (the server's error message is kept, e.g. vLLM's 400 for a prompt
  longer than the window; 5xx);
- ``stream_error``: an error event in the middle of the stream (``data: {"error": ...}``);
- ``cut``: the connection closed before ``[DONE]`` (or before a finish reason and usage);
- ``timeout``: no first token within the request's first-token budget (scaled to prompt length by
  the caller), no completion within its total budget, or no byte for ``stall_timeout_s``;
- ``connect``: the server does not accept connections;
- ``protocol``: a stream that finished without a single token.

Malformed ``data:`` lines are skipped (and counted in the error text if the request fails).
Timestamps are ``time.perf_counter()`` taken when the bytes arrive (``roost/bench/timed_net.py``:
in the socket's ``data_received``, not when the coroutine gets to parse them). The
API key is sent as ``Authorization: Bearer``; it is never logged, and scrubbed from any text
that is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import httpx

from roost.bench.metrics import ErrorKind, Phase, RequestRecord
from roost.bench.timed_net import TimedStream, timed_transport
from roost.errors import UserError


def normalize_base_url(base_url: str) -> str:
    """``http://host:port`` from what a user may type (a trailing ``/``, ``/v1``); a UserError for
    what cannot be a server's URL."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
    except ValueError as exc:
        raise UserError(f"server URL {base_url!r} is not usable ({exc}): give e.g. http://127.0.0.1:8000") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"server URL {base_url!r} is not usable: give e.g. http://127.0.0.1:8000")
    return url


def display_url(base_url: str) -> str:
    """The URL without any ``user:password@`` part, safe for logs and results."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class SSEParser:
    """Incremental Server-Sent Events parser over bytes.

    ``feed`` returns the ``data`` payload of every complete event (events end with a blank
    line; several ``data:`` lines join with newlines; ``:`` comments and other fields are
    ignored; ``\\r\\n`` and ``\\n`` line ends both work). ``close`` returns a last event that
    the server did not terminate with a blank line, if it is complete JSON or ``[DONE]``.
    """

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if not chunk:
            return []
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        events: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events

    def close(self) -> list[bytes]:
        tail = self._partial.rstrip(b"\r")
        self._partial = b""
        if tail.startswith(b"data:"):
            value = tail[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        data, self._data = b"\n".join(self._data), []
        if not data:
            return []
        if data.strip() == b"[DONE]":
            return [data.strip()]
        try:
            json.loads(data)
        except ValueError:
            return []
        return [data]


_TEXT_KEYS = ("content", "reasoning", "reasoning_content")


def is_token_delta(delta: Mapping[str, Any]) -> bool:
    """Does this ``delta`` carry generated output? (See ``roost/bench/metrics.py``: token chunk.)"""
    if any(delta.get(k) for k in _TEXT_KEYS) or delta.get("tool_calls"):
        return True
    # vLLM: a token ending inside a multi-byte character streams as {"content": ""}; the role
    # chunk {"role": "assistant", "content": ""} and a bare {} finish chunk are not tokens.
    return "role" not in delta and any(k in delta for k in _TEXT_KEYS)


def error_text(obj: Any) -> str:
    """The message of an OpenAI/vLLM/FastAPI error body, whatever its shape."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    return str(err[key])
            return json.dumps(err)[:300]
        if isinstance(err, str):
            return err
        if "detail" in obj:
            return str(obj["detail"])[:300]
    return str(obj)[:300]


class RequestBudget:
    """How long one request may take: to its first token, and in total."""

    def __init__(self, first_token_s: float, total_s: float) -> None:
        self.first_token_s = first_token_s
        self.total_s = max(total_s, first_token_s)


SHARD_CONNECTIONS = 16
"""Streams per ``httpx.AsyncClient``. httpcore's pool re-scans every connection (and, for each idle
one, every connection again) whenever a request starts or ends, which at 256 streams in one pool
blocks the event loop for seconds and delays the very timestamps being measured. Streams are
therefore spread over pools of 16 connections, created once per run and reused by every step."""


class BenchClient:
    """The connections to one OpenAI-compatible server, for a whole benchmark run.

    Streams go to a set of small connection pools (see :data:`SHARD_CONNECTIONS`), created as
    concurrency requires and kept for the whole run; ``/tokenize``, ``/metrics`` and
    ``/v1/models`` use a separate pool, so polling never waits behind a stream.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        stall_timeout_s: float = 120.0,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self._secret = api_key or ""
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.connect_timeout_s = connect_timeout_s
        self.stall_timeout_s = stall_timeout_s
        # One TLS context for every pool (building one loads the CA bundle: ~40 ms each).
        self._ssl = httpx.create_ssl_context() if self.base_url.startswith("https:") else None
        self._http = self._new_pool(8)
        self._shards: list[httpx.AsyncClient] = []
        self._inflight: list[int] = []
        self._closing: list[tuple[int, httpx.Response]] = []

    def _new_pool(self, connections: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            # Reads are bounded by each request's own budget (see stream_chat), not by httpx.
            timeout=httpx.Timeout(connect=self.connect_timeout_s, read=None, write=60.0, pool=None),
            transport=timed_transport(connections=connections, ssl_context=self._ssl),
            trust_env=False,
        )

    async def preconnect(self, streams: int) -> None:
        """Open the pools and connections ``streams`` concurrent streams need, before a step is timed.

        One cheap ``GET /health`` per connection, sent concurrently so that each opens its own
        keep-alive connection (servers close idle ones after a few seconds, so this runs before
        every step). The answer does not matter; failures are left to the step to record.
        """
        while len(self._shards) * SHARD_CONNECTIONS < streams:
            self._shards.append(self._new_pool(SHARD_CONNECTIONS))
            self._inflight.append(0)

        async def touch(pool: httpx.AsyncClient) -> None:
            with contextlib.suppress(httpx.HTTPError):
                await pool.get("/health", timeout=self.connect_timeout_s)

        jobs = []
        for i in range(len(self._shards)):
            k = min(SHARD_CONNECTIONS, streams - i * SHARD_CONNECTIONS)
            jobs += [touch(self._shards[i]) for _ in range(max(0, k))]
        await asyncio.gather(*jobs)

    def _take_shard(self) -> int:
        for i, n in enumerate(self._inflight):
            if n < SHARD_CONNECTIONS:
                self._inflight[i] += 1
                return i
        self._shards.append(self._new_pool(SHARD_CONNECTIONS))
        self._inflight.append(1)
        return len(self._shards) - 1

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.settle()
        for pool in [self._http, *self._shards]:
            await pool.aclose()

    def scrub(self, text: str) -> str:
        """``text`` with the API key removed (error messages are recorded and logged)."""
        return text.replace(self._secret, "***") if self._secret else text

    # --- plain requests -----------------------------------------------------------------------

    async def get(self, path: str, *, timeout_s: float = 10.0) -> httpx.Response:
        return await self._http.get(path, timeout=timeout_s)

    async def post_json(self, path: str, body: Mapping[str, Any], *, timeout_s: float = 60.0) -> httpx.Response:
        return await self._http.post(path, json=dict(body), timeout=timeout_s)

    async def metrics_text(self, *, timeout_s: float = 5.0) -> str | None:
        """``/metrics`` as text, or None if the server has none or does not answer in time."""
        try:
            resp = await self._http.get("/metrics", timeout=timeout_s)
        except httpx.HTTPError:
            return None
        return resp.text if resp.status_code == 200 else None

    async def alive(self, *, timeout_s: float = 5.0) -> bool:
        """Does the server answer ``/v1/models`` at all (any HTTP status) within ``timeout_s``?"""
        try:
            await self._http.get("/v1/models", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return True

    # --- the streamed request -----------------------------------------------------------------

    async def stream_chat(
        self,
        payload: Mapping[str, Any],
        *,
        request_id: str,
        budget: RequestBudget,
        phase: Phase = "prompt_length",
        point: int = -1,
        repeat: int = 0,
        concurrency: int = 1,
        prompt_tokens_target: int | None = None,
        defer_close: bool = False,
        start: asyncio.Event | None = None,
    ) -> RequestRecord:
        """Send one streamed chat completion; return what was seen. Never raises for server faults.

        With ``defer_close`` the finished response is handed back to its pool only at
        :meth:`settle`: releasing a connection costs the pool a scan of its connections, and doing
        that for every stream as they all finish together would delay the very last-token reads
        of the streams still running. With ``start``, the request is built and then held until
        the event is set, so that a step's users all send in one tight burst.
        """
        loop = asyncio.get_running_loop()
        st = _Stream()
        rec = RequestRecord(
            request_id=request_id,
            phase=phase,
            point=point,
            repeat=repeat,
            concurrency=concurrency,
            prompt_tokens_target=prompt_tokens_target,
            max_tokens=int(payload.get("max_tokens") or payload.get("max_completion_tokens") or 0),
            t_sent=0.0,
        )
        shard = self._take_shard()
        pool = self._shards[shard]
        request = pool.build_request(
            "POST", "/v1/chat/completions", json=dict(payload), headers={"X-Request-Id": request_id}
        )
        resp: httpx.Response | None = None
        slack = min(1.0, self.stall_timeout_s / 4)
        stalled = False
        if start is not None:
            await start.wait()
        rec.t_sent = time.perf_counter()
        deadline_first = loop.time() + budget.first_token_s
        deadline_total: float | None = None
        deadline = deadline_first
        try:
            async with asyncio.timeout_at(deadline_first) as cm:
                resp = await pool.send(request, stream=True)
                rec.status_code = resp.status_code
                if resp.status_code != 200:
                    body = await resp.aread()
                    try:
                        msg = error_text(json.loads(body))
                    except ValueError:
                        msg = body.decode("utf-8", "replace")[:300] or resp.reason_phrase
                    self._fail(rec, "http", f"HTTP {resp.status_code}: {msg}")
                    return rec
                parser = SSEParser()
                net = resp.extensions.get("network_stream")
                timed = net if isinstance(net, TimedStream) else None
                # The transport stream itself: aiter_raw() adds a chunker and a context manager per chunk.
                async for chunk in cast(AsyncIterator[bytes], resp.stream):
                    # when the bytes arrived, not when this coroutine got to them (timed_net.py)
                    now = timed.arrival if timed is not None and timed.arrival else time.perf_counter()
                    if st.done:  # drain to the end so the connection can be reused
                        continue
                    for data in parser.feed(chunk):
                        if self._on_event(data, now, rec, st):
                            break
                    if st.stop:
                        break
                    if rec.t_first is not None:
                        # After the first token: the decode budget, and no silence longer than the
                        # stall limit (give or take `slack`: the deadline moves at most once per
                        # `slack`, since rescheduling a timer costs a heap push).
                        lt = loop.time()
                        if deadline_total is None:
                            deadline_total = lt + budget.total_s - budget.first_token_s
                            deadline = math.inf
                        want = min(deadline_total, lt + self.stall_timeout_s + slack)
                        if want < deadline or want - deadline > slack:
                            deadline = want
                            stalled = want < deadline_total
                            cm.reschedule(deadline)
                else:
                    if not st.done:
                        for data in parser.close():
                            self._on_event(data, time.perf_counter(), rec, st)
        except TimeoutError:
            if rec.t_first is None:
                self._fail(rec, "timeout", f"no first token within {budget.first_token_s:.1f} s")
            elif stalled:
                self._fail(rec, "timeout", f"stalled: no data for {self.stall_timeout_s:.1f} s after {len(rec.token_times)} token chunks")
            else:
                self._fail(rec, "timeout", f"not finished within {budget.total_s:.1f} s")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self._fail(rec, "connect", f"cannot connect to {display_url(self.base_url)}: {exc}")
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            self._fail(rec, "cut", f"connection closed mid-stream after {len(rec.token_times)} token chunks: {exc}")
        except httpx.HTTPError as exc:
            self._fail(rec, "client", f"{type(exc).__name__}: {exc}")
        finally:
            rec.t_end = time.perf_counter()
            if resp is not None and defer_close and st.done:
                self._closing.append((shard, resp))
            else:
                try:
                    if resp is not None:
                        with contextlib.suppress(Exception):  # best effort: the record is what matters
                            await resp.aclose()
                finally:
                    self._inflight[shard] -= 1
        self._finish(rec, st)
        return rec

    async def settle(self) -> None:
        """Hand the deferred responses (see ``stream_chat``'s ``defer_close``) back to their pools."""
        closing, self._closing = self._closing, []
        for shard, resp in closing:
            try:
                with contextlib.suppress(Exception):
                    await resp.aclose()
            finally:
                self._inflight[shard] -= 1

    def _fail(self, rec: RequestRecord, kind: ErrorKind, message: str) -> None:
        if not rec.error:
            rec.error = self.scrub(message)
            rec.error_kind = kind

    def _on_event(self, data: bytes, now: float, rec: RequestRecord, st: _Stream) -> bool:
        """Apply one SSE data payload; True when the stream is over (``[DONE]`` or an error event)."""
        if data.strip() == b"[DONE]":
            st.done = True
            return True
        try:
            obj = json.loads(data)
        except ValueError:
            st.malformed += 1
            return False
        if not isinstance(obj, dict):
            st.malformed += 1
            return False
        if obj.get("error") or obj.get("object") == "error":
            self._fail(rec, "stream_error", f"error event mid-stream: {error_text(obj)}")
            st.stop = True
            return True
        choices = obj.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta") or {}
            if isinstance(delta, dict) and is_token_delta(delta):
                rec.token_times.append(now)
                if rec.t_first is None:
                    rec.t_first = now
            if choice.get("finish_reason"):
                rec.finish_reason = str(choice["finish_reason"])
        usage = obj.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                rec.completion_tokens = usage["completion_tokens"]
                st.usage = True
            if isinstance(usage.get("prompt_tokens"), int):
                rec.prompt_tokens = usage["prompt_tokens"]
        return False

    def _finish(self, rec: RequestRecord, st: _Stream) -> None:
        if rec.token_times:
            rec.t_last = rec.token_times[-1]
        if not st.usage and rec.token_times:
            rec.completion_tokens = len(rec.token_times)
            rec.usage_missing = True
        if rec.error:
            return
        if not st.done and not (rec.finish_reason and st.usage):
            self._fail(rec, "cut", f"stream ended without [DONE] after {len(rec.token_times)} token chunks")
        elif rec.t_first is None:
            extra = f" ({st.malformed} malformed data lines)" if st.malformed else ""
            self._fail(rec, "protocol", f"stream finished without a single token{extra}")


class _Stream:
    __slots__ = ("done", "malformed", "stop", "usage")

    def __init__(self) -> None:
        self.done = False
        self.stop = False
        self.usage = False
        self.malformed = 0
