"""The one client roost talks to a vLLM (or any OpenAI-compatible) server with.

:class:`VllmClient` holds the connections to one server for as long as the caller needs them and
knows every endpoint roost uses: ``/health``, ``/v1/models``, ``/version``, ``/tokenize``,
``/metrics``, one-token ``/v1/completions`` (readiness) and streamed ``/v1/chat/completions``.
The health wait, server discovery, the benchmark, the accuracy runs and the metering gateway
(:meth:`VllmClient.relay`: a forwarded request's answer handed on as it arrives) all go through it, so
authentication (:func:`auth_headers`: ``Authorization: Bearer``), URL handling and error parsing
are defined once. The API key is never logged and is scrubbed from any text that is recorded.

:meth:`VllmClient.stream_chat` sends one streamed chat completion and returns a
:class:`~roost.vllm.stream.RequestRecord`; it never raises for anything the server does. What it
handles, each recorded with an ``error_kind``:

- ``http``: a non-200 status (the server's error message is kept, e.g. vLLM's 400 for a prompt
  longer than the window; 5xx);
- ``stream_error``: an error event in the middle of the stream (``data: {"error": ...}``);
- ``cut``: the connection closed before ``[DONE]`` (or before a finish reason and usage);
- ``timeout``: no first token within the request's first-token budget (scaled to prompt length by
  the caller), no completion within its total budget, or no byte for ``stall_timeout_s``;
- ``connect``: the server does not accept connections;
- ``protocol``: a stream that finished without a single token.

Malformed ``data:`` lines are skipped (and counted in the error text if the request fails).
Timestamps are ``time.perf_counter()`` taken when the bytes arrive (``roost/vllm/timed_net.py``:
in the socket's ``data_received``, not when the coroutine gets to parse them).

The client is asynchronous; synchronous callers (a Prefect task, the CLI) run a coroutine with
:func:`run_sync`.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
import orjson
from pydantic import BaseModel, Field

from roost.errors import UserError
from roost.inputs.jsondoc import parse_json
from roost.inputs.text import redact_url, shown
from roost.inputs.urls import http_url_problem
from roost.secrets import redact
from roost.vllm.relay import Relay
from roost.vllm.stream import ChatStream, ErrorKind, Phase, RequestRecord, error_text
from roost.vllm.timed_net import KEEPALIVE_S, ConnectFailed, Connection, ConnectionPool, HttpError

MAX_WINDOW = 1 << 31
"""The largest served window (``max_model_len``) an answer may claim; beyond it the claim is ignored."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest JSON answer roost parses from a server (a model list, a token count)."""


def answer_json(resp: httpx.Response) -> Any:
    """A server's JSON answer parsed with bounded depth and size; None when it is not JSON (or too big)."""
    body = resp.content
    if len(body) > MAX_ANSWER_BYTES:
        return None
    try:
        return parse_json(body, "answer", "")
    except UserError:
        return None


def body_message(body: bytes) -> str:
    """What an error answer's body says: its JSON error message, else its first 300 characters; one line."""
    try:
        obj = parse_json(body[:MAX_ANSWER_BYTES], "answer", "") if body else None
        msg = error_text(obj) if obj is not None else ""
    except UserError:
        msg = ""
    return shown(msg or body[:300].decode("utf-8", "replace"), 300)


def normalize_base_url(base_url: str) -> str:
    """``http://host:port`` from what a user may type (a trailing ``/``, ``/v1``); a UserError for
    what cannot be a server's URL."""
    url = base_url.strip()
    if "://" not in url and url:
        url = "http://" + url
    head, sep, rest = url.partition("://")
    rest = rest.rstrip("/")
    if rest.endswith("/v1"):
        rest = rest[: -len("/v1")]
    url = head + sep + rest
    problem = http_url_problem(url, "server")
    if problem is not None:
        raise UserError(f"server URL {shown(redact_url(base_url.strip()), 200)!r} is not usable ({problem}): give e.g. "
                        "http://127.0.0.1:8000")
    return url


def display_url(base_url: str) -> str:
    """The URL without any ``user:password@`` part, safe for logs and results."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class RequestBudget:
    """How long one request may take: to its first token, and in total."""

    def __init__(self, first_token_s: float, total_s: float) -> None:
        self.first_token_s = first_token_s
        self.total_s = max(total_s, first_token_s)


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The headers that authenticate roost to a vLLM server started with ``--api-key`` / ``VLLM_API_KEY``."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ServedModel(BaseModel):
    """One entry of ``/v1/models``."""

    id: str
    max_model_len: int | None = None


class ModelsAnswer(BaseModel):
    """What ``GET /v1/models`` answered: the HTTP status and the served models (empty unless 200)."""

    status_code: int
    models: list[ServedModel] = Field(default_factory=list)
    data: list[dict[str, Any]] = Field(default_factory=list, description="The entries as the server sent them.")
    problem: str = Field(default="", description="Why a 200 answer is not an OpenAI model list ('' when it is).")

    def listing(self, limit: int = 10) -> str:
        """The served ids for a message: the first ``limit``, then how many more."""
        ids = self.ids
        shown_ids = ", ".join(shown(i, 80) for i in ids[:limit])
        return shown_ids + (f" and {len(ids) - limit:,} more" if len(ids) > limit else "") if ids else "nothing"

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.models]

    def get(self, model: str) -> ServedModel | None:
        return next((m for m in self.models if m.id == model), None)


class VllmClient:
    """The connections to one OpenAI-compatible server, for as long as the caller needs them.

    Streamed chat completions go over :class:`~roost.vllm.timed_net.ConnectionPool` (one
    keep-alive connection per concurrent stream, bytes stamped on arrival); ``/health``,
    ``/tokenize``, ``/metrics`` and ``/v1/models`` use a separate httpx pool, so polling never
    waits behind a stream. ``model`` is the served model name requests name (``/tokenize`` and
    readiness completions use it). ``keepalive_s``: how long an idle streaming connection is reused.
    """

    def __init__(
        self,
        base_url: str,
        model: str = "",
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        stall_timeout_s: float = 120.0,
        http_connections: int = 8,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self._secret = api_key or ""
        self._headers = auth_headers(api_key)
        self.connect_timeout_s = connect_timeout_s
        self.stall_timeout_s = stall_timeout_s
        parts = urlsplit(self.base_url)
        https = parts.scheme == "https"
        # One TLS context for both pools (building one loads the CA bundle: ~40 ms each).
        self._ssl = httpx.create_ssl_context() if https else None
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            # Reads are bounded by each call's own timeout_s, not by httpx.
            timeout=httpx.Timeout(connect=self.connect_timeout_s, read=None, write=60.0, pool=None),
            # plain requests (polling; the accuracy runs' answers, as many as they keep in flight)
            limits=httpx.Limits(max_connections=http_connections, max_keepalive_connections=http_connections),
            verify=self._ssl if self._ssl is not None else False,
            trust_env=False,
        )
        self._streams = ConnectionPool(
            parts.hostname or "", parts.port or (443 if https else 80),
            ssl_context=self._ssl, connect_timeout_s=connect_timeout_s, keepalive_s=keepalive_s,
        )
        self._chat_head = _request_head(parts, "/v1/chat/completions", self._headers)
        self._relay_heads: dict[str, bytes] = {}

    async def preconnect(self, streams: int) -> None:
        """Open the connections ``streams`` concurrent streams need, before a step is timed.

        Idle connections the server may be about to close (idle for a few seconds) are replaced,
        so this runs before every step. Failures are left to the step's requests to record.
        """
        await self._streams.preopen(streams)

    async def __aenter__(self) -> VllmClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._streams.aclose()
        await self._http.aclose()

    def scrub(self, text: str) -> str:
        """``text`` with the API key removed (error messages are recorded and logged)."""
        return redact(text, [self._secret])

    def error_message(self, resp: httpx.Response) -> str:
        """What a failed answer says, as roost may record it: the server's error message (or the start
        of its body), one line, at most 300 characters, the API key removed (a server may echo the
        request's headers back)."""
        return self.scrub(body_message(resp.content))

    # --- plain requests -----------------------------------------------------------------------

    async def post_json(self, path: str, body: Mapping[str, Any], *, timeout_s: float = 60.0) -> httpx.Response:
        return await self._http.post(path, json=dict(body), timeout=timeout_s)

    async def send(self, path: str, content: bytes, *, timeout: httpx.Timeout,
                   headers: Mapping[str, str] | None = None) -> httpx.Response:
        """``POST path`` with a body already encoded, its answer left open for streaming (the caller
        reads it and closes it). The gateway forwards requests through this: the server's key and URL
        handling are this client's; ``headers`` adds to them (never ``Authorization``)."""
        request = self._http.build_request("POST", path, content=content, timeout=timeout,
                                           headers={"Content-Type": "application/json", **(headers or {})})
        return await self._http.send(request, stream=True)

    async def relay(self, path: str, body: bytes, *, headers: Mapping[str, str] | None = None) -> tuple[Relay, bool]:
        """``POST path`` with ``body`` on one of the streaming connections; the answer arrives on the
        returned :class:`~roost.vllm.relay.Relay`, with whether the connection was reused (a kept-alive
        connection the server closed as the request went out ends before any status line: the caller
        may send it again). The gateway forwards requests through this: the server's key and URL
        handling are this client's. Raises :class:`ConnectFailed` when the server takes no
        connection. The caller ends it with :meth:`release`."""
        data = self.relay_request(path, body, headers)
        for _attempt in (1, 2):
            conn, reused = await self._streams.acquire()
            if (relay := self.start_on(conn, data)) is not None:
                return relay, reused
        raise ConnectFailed("the connection closed before the request was sent")

    def relay_request(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> bytes:
        """The bytes :meth:`relay` writes for ``POST path`` with ``body`` (a header with CR or LF in it is
        left out)."""
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items() if "\n" not in k + v and "\r" not in k + v)
        request = self._relay_heads.get(path)
        if request is None:
            request = self._relay_heads[path] = _request_head(urlsplit(self.base_url), path, self._headers)
        return request + f"{extra}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body

    def start_on(self, conn: Connection, data: bytes) -> Relay | None:
        """``data`` written on ``conn`` from the streaming pool, its answer to come on the returned
        :class:`Relay`; None when the connection closed before the write (nothing was sent; it goes
        back to the pool, which drops it)."""
        relay = Relay(conn)
        try:
            conn.start(data, relay)
        except ConnectionResetError:
            self._streams.release(conn)
            return None
        return relay

    def release(self, relay: Relay) -> None:
        """Give a relayed request's connection back: kept for the next request when its response was
        read whole, closed otherwise (the backend sees the client go and stops generating)."""
        if not relay.complete:
            relay.conn.close()
        self._streams.release(relay.conn)

    async def health(self, *, timeout_s: float = 5.0) -> int | None:
        """``GET /health``: its HTTP status, or None when the server does not answer."""
        try:
            return (await self._http.get("/health", timeout=timeout_s)).status_code
        except httpx.HTTPError:
            return None

    async def models(self, *, timeout_s: float = 10.0) -> ModelsAnswer:
        """``GET /v1/models``: the status and the served models. Raises ``httpx.HTTPError`` when the
        server does not answer (callers say what that means for them)."""
        resp = await self._http.get("/v1/models", timeout=timeout_s)
        models: list[ServedModel] = []
        data: list[dict[str, Any]] = []
        if resp.status_code == 200:
            obj = answer_json(resp)
            entries = obj.get("data") if isinstance(obj, dict) else None
            if not isinstance(entries, list):
                what = "not JSON" if obj is None else f'"data": {shown(orjson.dumps(entries).decode(), 40)}' \
                    if isinstance(obj, dict) else f"a JSON {type(obj).__name__}"
                return ModelsAnswer(status_code=200, problem=f"{what}, not a model list")
            for m in entries:
                if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]:
                    window = m.get("max_model_len")
                    models.append(ServedModel(id=m["id"], max_model_len=window if type(window) is int and
                                              0 < window <= MAX_WINDOW else None))
                    data.append(m)
            if entries and not models:
                return ModelsAnswer(status_code=200, problem="a model list whose entries have no string id")
        return ModelsAnswer(status_code=resp.status_code, models=models, data=data)

    async def version(self, *, timeout_s: float = 5.0) -> str:
        """vLLM's version as the running server reports it (``GET /version``); "" when it does not say."""
        try:
            resp = await self._http.get("/version", timeout=timeout_s)
            version = resp.json().get("version") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return ""
        return version if isinstance(version, str) else ""

    async def tokenize(
        self, messages: list[dict[str, str]], *, chat_template_kwargs: Mapping[str, Any] | None = None,
        timeout_s: float = 300.0,
    ) -> httpx.Response:
        """``POST /tokenize`` of chat ``messages`` as the chat endpoint would template them (vLLM)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if chat_template_kwargs:
            body["chat_template_kwargs"] = dict(chat_template_kwargs)
        return await self.post_json("/tokenize", body, timeout_s=timeout_s)

    async def complete_one_token(self, prompt: str, *, timeout_s: float = 60.0) -> bool:
        """Does a one-token greedy ``/v1/completions`` of ``prompt`` come back with a choice?"""
        body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        try:
            resp = await self.post_json("/v1/completions", body, timeout_s=timeout_s)
            return resp.status_code == 200 and bool(resp.json().get("choices"))
        except (httpx.HTTPError, ValueError, AttributeError):
            return False

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
        start: asyncio.Event | None = None,
    ) -> RequestRecord:
        """Send one streamed chat completion; return what was seen. Never raises for server faults.

        With ``start``, the request is built and then held until the event is set, so that a
        step's users all send in one tight burst. ``t_sent`` is taken just before the request
        is written to its connection.
        """
        loop = asyncio.get_running_loop()
        request = self._chat_request(payload, request_id)
        if start is not None:
            await start.wait()
        t_sent = time.perf_counter()
        clock = _Deadlines(loop, budget, self.stall_timeout_s, t_sent)
        st = ChatStream(loop.create_future(), clock.first_token)
        conn: Connection | None = None
        failure: tuple[ErrorKind, str] | None = None
        try:
            for attempt in (1, 2):
                async with asyncio.timeout(max(0.0, clock.first_at - time.perf_counter())):
                    conn, reused = await self._streams.acquire()
                clock.watch(st)
                try:
                    conn.start(request, st)
                except ConnectionResetError:  # closed between the pool and the write
                    stale = True
                    if attempt == 2:
                        failure = ("cut", "the connection closed before the request was sent")
                else:
                    await st.finished
                    # a kept-alive connection the server closed as the request went out
                    stale = reused and st.end_error is not None and not st.head and not st.expired
                if not stale or attempt == 2:
                    break
                self._streams.release(conn)
                conn = None
                st = ChatStream(loop.create_future(), clock.first_token)  # once more, on a new connection
        except TimeoutError:
            failure = ("timeout", f"no first token within {budget.first_token_s:.1f} s")
        except ConnectFailed as exc:
            failure = ("connect", f"cannot connect to {display_url(self.base_url)}: {exc}")
        finally:
            clock.cancel()
            if conn is not None:
                if not (st.done or st.ended):  # a response left unfinished (a time-out, an error event)
                    conn.close()
                self._streams.release(conn)
        return self._record(st, failure, request_id=request_id, phase=phase, point=point, repeat=repeat,
                            concurrency=concurrency, prompt_tokens_target=prompt_tokens_target,
                            max_tokens=int(payload.get("max_tokens") or payload.get("max_completion_tokens") or 0),
                            t_sent=t_sent)

    async def settle(self) -> None:
        """Close the connections whose last response is still being read after its stream ended
        (a server that sent ``[DONE]`` and never ended the response); call between steps."""
        self._streams.settle()

    def _chat_request(self, payload: Mapping[str, Any], request_id: str) -> bytes:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        rid = request_id.replace("\r", "").replace("\n", "")
        return self._chat_head + f"X-Request-Id: {rid}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body

    def _record(self, st: ChatStream, failure: tuple[ErrorKind, str] | None, **fields: Any) -> RequestRecord:
        """The :class:`RequestRecord` of a finished stream, with the first failure that explains it."""
        chunks = len(st.token_times)
        if failure is None:
            if st.expired:
                failure = ("timeout", st.expired)
            elif st.error_body is not None:
                body = bytes(st.error_body)
                msg = body_message(body) or st.reason
                failure = ("http", f"HTTP {st.status}: {msg}")
            elif st.stream_error:
                failure = ("stream_error", f"error event mid-stream: {st.stream_error}")
            elif st.end_error is not None and not st.done:
                if isinstance(st.end_error, HttpError):
                    failure = ("cut", f"{st.end_error} after {chunks} token chunks")
                else:
                    why = str(st.end_error) or type(st.end_error).__name__
                    failure = ("cut", f"connection closed mid-stream after {chunks} token chunks: {why}")
            elif not st.done and not (st.finish_reason and st.usage):
                failure = ("cut", f"stream ended without [DONE] after {chunks} token chunks")
            elif st.t_first is None:
                extra = f" ({st.malformed} malformed data lines)" if st.malformed else ""
                failure = ("protocol", f"stream finished without a single token{extra}")
        usage_missing = not st.usage and chunks > 0
        return RequestRecord(
            **fields,
            t_first=st.t_first,
            t_last=st.token_times[-1] if chunks else None,
            t_end=time.perf_counter(),
            token_times=st.token_times,
            completion_tokens=chunks if usage_missing else st.completion_tokens,
            prompt_tokens=st.prompt_tokens,
            usage_missing=usage_missing,
            finish_reason=st.finish_reason,
            status_code=st.status,
            error=self.scrub(failure[1]) if failure else "",
            error_kind=failure[0] if failure else None,
        )


def _request_head(parts: SplitResult, endpoint: str, headers: Mapping[str, str]) -> bytes:
    """The start of every request to ``endpoint`` (the request id, length and body follow)."""
    host = parts.netloc.rpartition("@")[2]
    lines = [f"POST {parts.path.rstrip('/')}{endpoint} HTTP/1.1", f"Host: {host}", "User-Agent: roost",
             "Accept: text/event-stream", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


class _Deadlines:
    """The time budget of one stream on one timer: the first token within ``budget.first_token_s``
    of the send, then the whole within ``budget.total_s`` and no silence longer than ``stall_s``.

    The timer is set when the stream starts and moved once, at the first token; after that it
    fires at most once per ``stall_s`` and re-arms from the last arrival (nothing per chunk)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: RequestBudget, stall_s: float, t_sent: float) -> None:
        self.loop = loop
        self.budget = budget
        self.stall_s = stall_s
        self.first_at = t_sent + budget.first_token_s
        self.total_at = math.inf
        self.stream: ChatStream | None = None
        self.handle: asyncio.TimerHandle | None = None

    def watch(self, stream: ChatStream) -> None:
        self.stream = stream
        self._arm(self.first_at)

    def _arm(self, at: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle = self.loop.call_later(max(0.0, at - time.perf_counter()), self._check)

    def first_token(self, t: float) -> None:
        self.total_at = t + self.budget.total_s - self.budget.first_token_s
        self._arm(min(self.total_at, t + self.stall_s))

    def _check(self) -> None:
        st, now = self.stream, time.perf_counter()
        if st is None or st.over:
            return
        if st.t_first is None:
            if now >= self.first_at:
                st.expire(f"no first token within {self.budget.first_token_s:.1f} s")
            else:
                self._arm(self.first_at)
            return
        stall_at = st.last_arrival + self.stall_s
        due = min(self.total_at, stall_at)
        if now < due:
            self._arm(due)
        elif stall_at < self.total_at:
            st.expire(f"stalled: no data for {self.stall_s:.1f} s after {len(st.token_times)} token chunks")
        else:
            st.expire(f"not finished within {self.budget.total_s:.1f} s")

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()


T = TypeVar("T")


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, even on a thread that already runs a loop
    (it then runs on a helper thread, with the caller's context variables)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    ctx = contextvars.copy_context()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = ctx.run(asyncio.run, factory())
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=target, name="roost-vllm-client")
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
