"""The gateway's ASGI application: authenticate, bound, route, forward, meter.

A request to ``/v1/chat/completions``, ``/v1/completions`` or ``/v1/embeddings``:

1. its key (``Authorization: Bearer``) is checked against the key cache; no key, a wrong or revoked
   key -> 401 and nothing is forwarded;
2. its body is read within ``max_body_bytes`` (413) and ``body_timeout_s`` (408), and must be a JSON
   object naming a ``model`` (400);
3. the model routes to a backend (404 listing the models; 503 at once when its backend is down);
4. it is forwarded with the upstream key (the client's headers are not) through the backend's
   :class:`~roost.vllm.client.VllmClient` (``relay``: keep-alive connections, bytes handed on as they
   arrive), its prompt counted by the backend's ``/tokenize`` right after it is sent (never on the
   way to the first token; ``tokenize_after_s`` > 0: only when the backend's own count is late);
5. the answer is passed back as it arrives, metered (``metering.StreamMeter``); a client that reads
   nothing for ``client_timeout_s`` is cut, a client that leaves is billed for what was streamed, and
   the backend's request is closed either way;
6. one usage row is stored; a completed request's row is committed before its last bytes are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import BaseModel, Field, SecretStr
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from roost.gateway import backend_errors
from roost.gateway.access import refusal, scope_access
from roost.gateway.db import GatewayDB, UsageWriter
from roost.gateway.keys import Principal, bearer_token, digest, forwarded_user, same_digest
from roost.gateway.metering import (
    Endpoint,
    StreamMeter,
    answer_texts,
    error_body,
    secret_pattern,
    tokenize_bodies,
    tokenize_count,
    usage_of,
)
from roost.gateway.metrics import GatewayMetrics
from roost.gateway.request import InvalidRequest, Reading, TooDeep, encode, forwarded_body, read_request
from roost.gateway.routing import Backend, BackendDown, ModelNotFound, Router
from roost.secrets import encoded_forms, redact
from roost.vllm.relay import Relay
from roost.vllm.timed_net import ConnectFailed, HttpError

log = logging.getLogger("roost.gateway")

PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
                              "embeddings": "/v1/embeddings"}
MAX_ERROR_BODY = 64 * 1024
MAX_ANSWER_BODY = 256 * 1024 * 1024


class GatewayConfig(BaseModel):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0, description="Largest request body accepted (413 above).")
    body_timeout_s: float = Field(default=30.0, gt=0, description="Time a client has to send its whole body (408).")
    client_timeout_s: float = Field(default=60.0, gt=0,
                                    description="A client that reads nothing for this long is cut off.")
    upstream_timeout_s: float = Field(default=900.0, gt=0,
                                      description="Longest silence from a backend (between bytes) before the request fails.")
    connect_timeout_s: float = Field(default=3.0, gt=0)
    commit_timeout_s: float = Field(default=10.0, gt=0,
                                    description="How long a completed request waits for its usage row's commit.")
    key_refresh_s: float = Field(default=1.0, gt=0, description="Revocations take effect within this time.")
    tokenize_after_s: float = Field(
        default=0.0, ge=0, description="When the prompt is counted by /tokenize: 0 at request start; > 0 only when "
        "the backend's own count has not arrived that long after the request was sent (and always, late, for a "
        "request that ends without it).")
    trusted_user_header: str = Field(default="x-openwebui-user-email",
                                     description="The header a trusted front end forwards its user in.")
    instance: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    metrics_token: SecretStr | None = Field(
        default=None, description="Bearer token every client of /metrics (and /health's details) must send; "
        "None: served to loopback clients only (roost.gateway.access).")

    @property
    def trusted_user_header_bytes(self) -> bytes:
        """The trusted header's name as ASGI gives it (lower-case bytes)."""
        return self.trusted_user_header.lower().encode("latin-1")


class KeyCache:
    """The active keys, reloaded every ``refresh_s`` (a revocation takes effect within it); a key not
    in the cache is looked up in the database at once (a key added a moment ago works), at most
    ``LOOKUPS`` at a time so a flood of wrong keys cannot flood the database. Keys are indexed by the
    first 16 hex digits of their digest and compared in full with :func:`hmac.compare_digest`."""

    LOOKUPS = 4

    def __init__(self, db: GatewayDB, refresh_s: float) -> None:
        self.db, self.refresh_s = db, refresh_s
        self._index: dict[str, list[tuple[str, Principal]]] = {}
        self.loaded_at = 0.0
        self._lookups = asyncio.Semaphore(self.LOOKUPS)
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        active = await self.db.active_keys()
        index: dict[str, list[tuple[str, Principal]]] = {}
        for d, p in active.items():
            index.setdefault(d[:16], []).append((d, p))
        self._index, self.loaded_at = index, time.monotonic()

    def _find(self, d: str) -> Principal | None:
        found = None
        for stored, p in self._index.get(d[:16], []):
            if same_digest(stored, d):
                found = p
        return found

    async def check(self, token: str | None) -> Principal | None:
        if not token or len(token) > 512:
            return None
        d = digest(token)
        found = self._find(d)
        if found is None:
            async with self._lookups:
                try:
                    found = await self.db.find_key(d)
                except Exception as exc:  # the database is away: only cached keys work meanwhile
                    log.error("keys: lookup failed (%s)", type(exc).__name__)
                    return None
            if found is not None:
                self._index.setdefault(d[:16], []).append((d, found))
        return found

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except Exception as exc:  # keep the last good set; the database may be back next time
                log.error("keys: could not reload from %s (%s)", self.db.display_url, type(exc).__name__)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="key-cache")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def size(self) -> int:
        return sum(len(v) for v in self._index.values())


class Refused(Exception):
    """A request refused before anything was forwarded."""

    def __init__(self, status: int, message: str, reason: str, *, kind: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.reason, self.kind, self.code, self.param = status, message, reason, kind, code, param
        self.close = close


async def respond(send: Send, status: int, body: bytes, *, close: bool = False,
                  content_type: bytes = b"application/json", extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())] + (extra or [])
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def read_body(scope: Scope, receive: Receive, limit: int, timeout_s: float) -> bytes:
    """The request body, within ``limit`` bytes and ``timeout_s`` seconds."""
    length = Headers(scope=scope).get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise Refused(413, f"request body of {int(length)} bytes is over the gateway's limit of {limit}",
                      "too_large", close=True)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):  # one timer for the whole body (no task per message)
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise Refused(499, "client closed the connection", "client_gone", close=True)
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise Refused(413, f"request body over the gateway's limit of {limit} bytes", "too_large",
                                  close=True)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except TimeoutError:
        raise Refused(408, f"request body not received within {timeout_s:g} s", "slow_body", close=True) from None


class Usage:
    """One request's usage row, filled in as the request goes."""

    def __init__(self, gw: Gateway, principal: Principal, endpoint: Endpoint, model: str, user: str | None,
                 stream: bool) -> None:
        self.t0 = time.perf_counter()
        ts = time.time()
        self.row: dict[str, Any] = {
            "request_id": uuid.uuid4().hex, "ts": ts, "day": time.strftime("%Y-%m-%d", time.gmtime(ts)),
            "key_name": principal.name, "kind": principal.kind, "user": user, "model": model, "backend": "",
            "endpoint": endpoint, "stream": stream, "status": "ok", "http_status": 200, "prompt_tokens": 0,
            "completion_tokens": 0, "prompt_source": "none", "completion_source": "none", "ttft_s": None,
            "duration_s": 0.0, "added_s": None, "gateway": gw.config.instance,
        }


class Gateway:
    """The application and what it holds: the database, the key cache, the usage writer, the router."""

    def __init__(self, db: GatewayDB, router: Router, config: GatewayConfig | None = None,
                 metrics: GatewayMetrics | None = None) -> None:
        self.db, self.router = db, router
        router.on_models = self._models_listed
        self.config = config or GatewayConfig()
        self.metrics = metrics or GatewayMetrics()
        self._direct_seen: set[str] = set()
        self.keys = KeyCache(db, self.config.key_refresh_s)
        self.writer = UsageWriter(db, on_error=self.metrics.usage_write_errors.inc)
        self._secrets = [router.upstream_key or ""]
        self.secret_pattern = secret_pattern(f.encode("utf-8", "surrogatepass") for s in self._secrets if s
                                             for f in (s, *encoded_forms(s)))
        # the forwarded endpoints are plain ASGI apps reached without a router (the hot path); the
        # rest, and the lifespan, go through Starlette
        self._proxies = {PATHS[e]: _Proxy(self, e) for e in PATHS}
        self._starlette = Starlette(routes=[Route("/v1/models", endpoint=self.list_models, methods=["GET"]),
                                            Route("/health", endpoint=self.health, methods=["GET"]),
                                            Route("/metrics", endpoint=self.metrics_endpoint, methods=["GET"])],
                                    lifespan=self._lifespan)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI application."""
        if scope["type"] == "http":
            proxy = self._proxies.get(scope["path"])
            if proxy is not None:
                if scope["method"] != "POST":
                    await respond(send, 405, error_body(f"{scope['path']} takes POST"), extra=[(b"allow", b"POST")])
                    return
                await proxy(scope, receive, send)
                return
        await self._starlette(scope, receive, send)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        await self.db.connect()
        await self.keys.refresh()
        await self.router.poll()
        self._update_backend_gauges()
        self.keys.start()
        self.writer.start()
        self.router.start()

    async def stop(self) -> None:
        await self.writer.close()
        await self.keys.close()
        await self.router.close()
        await self.db.close()

    def scrub(self, text: str) -> str:
        return redact(text, self._secrets)

    def scrub_bytes(self, data: bytes) -> bytes:
        """``data`` with every form of every secret masked, when it holds one (a fast check first)."""
        if self.secret_pattern is None or self.secret_pattern.search(data) is None:
            return data
        return self.scrub(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def _models_listed(self, models: set[str]) -> None:
        for model in models:  # the per-model request counter exists at 0 before its first request
            self.metrics.model_requests.labels(model)

    def _update_backend_gauges(self) -> None:
        for b in self.router.backends.values():
            self.metrics.backend_up.labels(b.name).set(1 if b.up else 0)
        expected = self.router.direct_expected()
        for model in expected | self._direct_seen:
            self.metrics.direct_expected.labels(model).set(1 if model in expected else 0)
        self._direct_seen |= expected

    # --- plain endpoints ----------------------------------------------------------------------

    async def list_models(self, request: Request) -> Response:
        if await self.keys.check(bearer_token(request.headers.get("authorization"))) is None:
            self.metrics.refused.labels("unauthorized").inc()
            return Response(_unauthorized(), 401, media_type="application/json")
        return Response(orjson.dumps({"object": "list", "data": self.router.models()}), media_type="application/json")

    async def health(self, request: Request) -> Response:
        if scope_access(request.scope, self.config.metrics_token) != "allow":  # alive, and nothing more
            return Response(b'{"status":"ok"}', media_type="application/json")
        backends = list(self.router.backends.values())
        up = sum(b.up for b in backends)
        body = {"status": "ok", "backends": len(backends), "backends_up": up,
                "models": sorted({m for b in backends if b.up for m in b.model_ids}), "keys": self.keys.size,
                "usage_pending": self.writer.pending}
        return Response(orjson.dumps(body), media_type="application/json")

    async def metrics_endpoint(self, request: Request) -> Response:
        access = scope_access(request.scope, self.config.metrics_token)
        if access != "allow":
            status, body, headers = refusal(access)
            return Response(body, status, headers=headers, media_type="application/json")
        self._update_backend_gauges()
        self.metrics.usage_pending.set(self.writer.pending)
        return Response(self.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # --- the stored row -----------------------------------------------------------------------

    def finish(self, usage: Usage, labels: tuple[str, str, str]) -> asyncio.Future[None]:
        row = usage.row
        row["duration_s"] = time.perf_counter() - usage.t0
        status = row["status"]
        self.metrics.requests.labels(*labels, status).inc()
        self.metrics.model_requests.labels(labels[2]).inc()
        if status != "ok":
            self.metrics.errors.labels(*labels, status).inc()
        log.info("%s %s key=%s kind=%s model=%s status=%s prompt=%d completion=%d %.3fs", row["request_id"][:12],
                 row["endpoint"], row["key_name"], row["kind"], row["model"], status, row["prompt_tokens"],
                 row["completion_tokens"], row["duration_s"])
        return self.writer.submit(row)


def _unauthorized() -> bytes:
    return error_body("missing or invalid API key: send `Authorization: Bearer <your gateway key>`",
                      kind="authentication_error", code="invalid_api_key")


class _Proxy:
    """``POST`` of one OpenAI endpoint, forwarded to the model's backend (an ASGI app)."""

    def __init__(self, gw: Gateway, endpoint: Endpoint) -> None:
        self.gw, self.endpoint, self.path = gw, endpoint, PATHS[endpoint]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        forwarded: list[_Forward] = []
        try:
            await self._handle(scope, receive, send, forwarded)
        except Exception as exc:  # a bug must not reach the client as a traceback, nor the log as one
            if forwarded:  # _Forward.run answers its own bugs; this is one in its bookkeeping
                log_failure("after forwarding", exc)
                return
            self.gw.metrics.refused.labels("gateway_error").inc()
            log_failure("before forwarding", exc)
            with contextlib.suppress(Exception):  # a refusal being sent when it failed: the client is gone
                await respond(send, 500, _gateway_error(), close=True)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, forwarded: list[_Forward]) -> None:
        gw = self.gw
        t_received = time.perf_counter()
        headers = Headers(scope=scope)
        try:
            principal = await gw.keys.check(bearer_token(headers.get("authorization")))
            if principal is None:
                raise Refused(401, "", "unauthorized", close=False)
            raw = await read_body(scope, receive, gw.config.max_body_bytes, gw.config.body_timeout_s)
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise Refused(400, "request body is not JSON", "bad_request") from None
            if not isinstance(body, dict):
                raise Refused(400, "request body must be a JSON object", "bad_request")
            model = body.get("model")
            if not isinstance(model, str) or not model:
                raise Refused(400, "`model` is required: the name of a served model (GET /v1/models lists them)",
                              "bad_request", param="model")
            try:
                reading = read_request(self.endpoint, body)
                upstream = forwarded_body(body, reading)
                content = raw if upstream is None else encode(upstream)
            except InvalidRequest as exc:
                raise Refused(400, exc.message, "bad_request", param=exc.param) from None
            except TooDeep as exc:
                raise Refused(400, f"{exc}: it nests deeper than about 1,000 levels", "bad_request") from None
            try:
                backend = await gw.router.resolve(model)
            except ModelNotFound as exc:
                listed = ", ".join(exc.available) or "none"
                raise Refused(404, f"The model `{model[:200]}` does not exist. Available models: {listed}",
                              "unknown_model", code="model_not_found", param="model") from None
            except BackendDown:
                raise Refused(503, f"the server for `{model[:200]}` is not reachable now; try again later",
                              "backend_down", kind="service_unavailable", code="backend_unavailable") from None
        except Refused as r:
            gw.metrics.refused.labels(r.reason).inc()
            if r.status == 499:
                return
            body_bytes = _unauthorized() if r.status == 401 else error_body(r.message, kind=r.kind, code=r.code,
                                                                            param=r.param)
            await respond(send, r.status, body_bytes, close=r.close)
            return
        user = None
        if principal.trusted:
            user = forwarded_user(next((v for k, v in scope["headers"] if k == gw.config.trusted_user_header_bytes),
                                       None))
        usage = Usage(gw, principal, self.endpoint, model, user, reading.stream)
        usage.t0 = t_received
        usage.row["backend"] = backend.name
        forward = _Forward(gw, self, backend, body, content, reading, usage, receive, send)
        forwarded.append(forward)
        await forward.run()


def log_failure(when: str, exc: BaseException) -> None:
    """One line for a bug met while handling a request: the exception's type and where it was raised
    (no message, no values: they may hold a client's data)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}" if tb is not None else "?"
    log.error("gateway error %s: %s at %s", when, type(exc).__name__, where)


_CONTENT_TYPE = re.compile(rb"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}(?: ?; ?[A-Za-z0-9_-]{1,32}=[A-Za-z0-9_.-]{1,32})*")


def _content_type(value: bytes | None) -> bytes:
    """A backend's content type, passed on only when it is a plain media type (else JSON's)."""
    return value if value is not None and _CONTENT_TYPE.fullmatch(value) else b"application/json"


def _gateway_error() -> bytes:
    return error_body("the gateway failed on this request; it was not billed as completed", kind="api_error",
                      code="gateway_error")


class _Forward:
    """One forwarded request, from sending it upstream to its usage row."""

    def __init__(self, gw: Gateway, proxy: _Proxy, backend: Backend, body: dict[str, Any], content: bytes,
                 reading: Reading, usage: Usage, receive: Receive, send: Send) -> None:
        self.gw, self.proxy, self.backend, self.body, self.content = gw, proxy, backend, body, content
        self.reading, self.stream = reading, reading.stream
        self.usage, self.receive, self._client_send = usage, receive, send
        self.started = False  # the response's head went out
        row = usage.row
        self.labels = (row["key_name"], row["kind"], row["model"])
        self.completion_counter = gw.metrics.completion_tokens.labels(*self.labels)
        self.committed = False
        self.tokenize: asyncio.Task[int | None] | None = None
        self.metered_completion = 0
        self.sending_since: float | None = None  # perf_counter when a send to the client started, until it ends
        self.client_timed_out = False
        self.delivered = False  # the client has the whole answer (a stream's [DONE] handed on)
        self.work: asyncio.Future[None] | None = None

    async def _send(self, message: Any) -> None:
        self.started = True
        await self._client_send(message)

    async def _respond(self, status: int, body: bytes, *, content_type: bytes = b"application/json",
                       close: bool = False) -> None:
        """A whole answer, with the request's id (its usage row's) as every forwarded answer has."""
        await respond(self._send, status, body, content_type=content_type, close=close,
                      extra=[(b"x-request-id", self.usage.row["request_id"].encode())])

    async def send(self, message: dict[str, Any]) -> None:
        """A message to the client; the watchdog cuts a client that takes ``client_timeout_s`` to take one."""
        self.sending_since = time.perf_counter()
        self.started = True
        await self._client_send(message)  # type: ignore[arg-type]
        self.sending_since = None

    async def _failed(self, exc: Exception) -> None:
        """A bug met while forwarding: the row says ``gateway_error``; the client gets an OpenAI-style
        500, or, mid-answer, an error event (a stream) and the end of the response."""
        self.usage.row.update(status="gateway_error", http_status=500)
        log_failure(f"forwarding {self.usage.row['request_id'][:12]}", exc)
        with contextlib.suppress(Exception):
            if not self.started:
                await self._respond(500, _gateway_error(), close=True)
            else:
                tail = b"data: " + _gateway_error() + b"\n\n" if self.stream else b""
                await self._send({"type": "http.response.body", "body": tail, "more_body": False})

    def _watch(self) -> None:
        """Every quarter of ``client_timeout_s``: is a send blocked on a client that stopped reading?"""
        if self.work is None or self.work.done():
            return
        limit = self.gw.config.client_timeout_s
        since = self.sending_since
        if since is not None and time.perf_counter() - since > limit:
            self.client_timed_out = True
            self.work.cancel()
            return
        asyncio.get_running_loop().call_later(limit / 4, self._watch)

    async def run(self) -> None:
        gw, backend, row = self.gw, self.backend, self.usage.row
        in_flight = gw.metrics.in_flight.labels(row["model"])
        in_flight.inc()
        backend.in_flight += 1
        work = self.work = asyncio.ensure_future(self._forward())
        gone = asyncio.ensure_future(self._wait_disconnect())

        def left(_: object) -> None:  # the client left first: stop the backend's work, bill what was sent
            # a client leaving once it has [DONE] left nothing unread (openai's client closes right there)
            if not work.done() and not gone.cancelled() and not self.delivered:
                row["status"] = "client_disconnected"
                work.cancel()

        gone.add_done_callback(left)
        asyncio.get_running_loop().call_later(gw.config.client_timeout_s / 4, self._watch)
        try:
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    await work
            except Exception as exc:
                await self._failed(exc)
            if self.client_timed_out:
                row["status"] = "client_timeout"
        finally:
            gone.cancel()
            backend.in_flight -= 1
            in_flight.dec()
            if self.tokenize is not None and not self.tokenize.done():
                self.tokenize.cancel()
            if not self.committed:
                await self._settle_prompt()
                self._meter_completion(row["completion_tokens"])
                gw.finish(self.usage, self.labels)

    async def _wait_disconnect(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                return

    async def _count_tokens(self, bodies: list[dict[str, Any]], known: int = 0) -> int | None:
        """Tokens of ``bodies`` by the backend's ``/tokenize`` (plus ``known``); None when it cannot say."""
        client = self.backend.client
        total = known
        for b in bodies:
            relay, _ = await client.relay("/tokenize", encode(b))
            try:
                async with asyncio.timeout(self.gw.config.upstream_timeout_s):
                    status = await relay.head()
                data = await self._read_all(relay, MAX_ERROR_BODY * 16)
            finally:
                client.release(relay)
            n = tokenize_count(backend_errors.parse(data)) if status == 200 else None
            if n is None:
                return None
            total += n
        return total

    def _start_tokenize(self) -> None:
        bodies, known = tokenize_bodies(self.proxy.endpoint, self.body)
        if not bodies and not known:
            return
        self.tokenize = asyncio.ensure_future(self._count_tokens(bodies, known))

    def _tokenize_if_uncounted(self) -> None:
        """``tokenize_after_s`` after the send: count the prompt now unless the backend's usage has."""
        if self.tokenize is None and self.usage.row["prompt_source"] != "usage" and not self.committed:
            self._start_tokenize()

    async def _settle_prompt(self) -> None:
        """The prompt count for the row: the backend's usage when it gave one, else /tokenize's."""
        row = self.usage.row
        counted: int | None = None
        if self.tokenize is None and row["prompt_source"] != "usage" and row["status"] != "backend_unreachable" \
                and not row["status"].startswith("http_"):
            self._start_tokenize()  # the backend's count never came: count it now
        if self.tokenize is not None:
            if not self.tokenize.done() and row["prompt_source"] != "usage":
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.tokenize), 5.0)
            if self.tokenize.done() and not self.tokenize.cancelled() and self.tokenize.exception() is None:
                counted = self.tokenize.result()
        if row["prompt_source"] == "usage":
            if counted is not None and counted != row["prompt_tokens"]:
                self.gw.metrics.prompt_mismatch.labels(row["model"]).inc()
        elif counted is not None and row["status"] != "backend_unreachable" and not row["status"].startswith("http_"):
            row["prompt_tokens"], row["prompt_source"] = counted, "tokenize"
        self.gw.metrics.prompt_tokens.labels(*self.labels).inc(row["prompt_tokens"])

    def _meter_completion(self, total: int) -> None:
        if total > self.metered_completion:
            self.completion_counter.inc(total - self.metered_completion)
            self.metered_completion = total

    async def _unreachable(self) -> None:
        """The backend took no connection: 503, and a poll of it decides whether it is down for everyone
        (a connect timed out on a loaded machine is not a dead server)."""
        row = self.usage.row
        self.gw.router.confirm(self.backend)
        row.update(status="backend_unreachable", http_status=503)
        self.gw.metrics.refused.labels("backend_down").inc()
        await self._respond(503, error_body(f"the server for `{row['model'][:200]}` is not reachable now; "
                                            "try again later", kind="service_unavailable", code="backend_unavailable"))

    async def _forward(self) -> None:
        row = self.usage.row
        client = self.backend.client
        relay: Relay | None = None
        t_sent = time.perf_counter()
        try:
            for attempt in (1, 2):
                try:
                    relay, reused = await client.relay(self.proxy.path, self.content,
                                                       headers={"X-Request-Id": row["request_id"]})
                except ConnectFailed:
                    await self._unreachable()
                    return
                if attempt == 1:
                    t_sent = time.perf_counter()
                    after = self.gw.config.tokenize_after_s
                    if after <= 0:
                        self._start_tokenize()  # after the request is on its way: never ahead of it
                    else:
                        asyncio.get_running_loop().call_later(after, self._tokenize_if_uncounted)
                try:
                    async with asyncio.timeout(self.gw.config.upstream_timeout_s):
                        status = await relay.head()
                    break
                except (HttpError, OSError) as exc:
                    answered = relay.conn.received > 0
                    client.release(relay)
                    relay = None
                    # Sent again only when a kept-alive connection closed as the request went out: not
                    # one byte came back, so the backend never read it. A backend that answered
                    # anything (garbage included) may have started generating: never twice.
                    if reused and attempt == 1 and not answered:
                        continue
                    row.update(status="backend_cut", http_status=502)
                    await self._respond(502, error_body(f"the model's server failed: {type(exc).__name__}",
                                                        kind="api_error", code="backend_error"))
                    return
            assert relay is not None
            if status != 200:
                await self._pass_error(relay)
            elif self.stream and relay.headers.get(b"content-type", b"").startswith(b"text/event-stream"):
                await self._pump(relay, t_sent, self._meter())
            else:
                await self._whole(relay, t_sent)
        except TimeoutError:
            row.update(status="backend_cut", http_status=504)
            await self._respond(504, error_body("the model's server did not answer in time", kind="api_error",
                                                code="backend_timeout"))
        finally:
            if relay is not None:
                client.release(relay)

    def _meter(self, *, as_sent: bool = False) -> StreamMeter:
        """The meter of this request's stream; ``as_sent``: a stream the client did not ask for as one
        (its usage chunks, if any, are passed on as they are)."""
        r = self.reading
        return StreamMeter(client_include_usage=as_sent or r.include_usage,
                           client_continuous=as_sent or r.continuous_usage, prompts=r.prompts,
                           per_prompt=max(r.n, 1), error_event=self._error_event,
                           secrets=self.gw.secret_pattern, scrub=self.gw.scrub_bytes)

    def _error_event(self, obj: dict[str, Any]) -> bytes:
        return backend_errors.stream_error_event(obj, self.gw.scrub)

    async def _read_all(self, relay: Relay, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async with asyncio.timeout(self.gw.config.upstream_timeout_s) as cm:
            while (block := await relay.read()) is not None:
                cm.reschedule(asyncio.get_running_loop().time() + self.gw.config.upstream_timeout_s)
                chunks.append(block)
                size += len(block)
                if size > limit:
                    break
        return b"".join(chunks)

    async def _pass_error(self, relay: Relay) -> None:
        """A backend's non-200 answer, relayed as an OpenAI-style error (:mod:`backend_errors`)."""
        data = b""
        with contextlib.suppress(HttpError, OSError, TimeoutError):
            data = await self._read_all(relay, MAX_ERROR_BODY)
        status, body = backend_errors.relayed_error(relay.status, backend_errors.parse(data[:MAX_ERROR_BODY]),
                                                    self.gw.scrub)
        self.usage.row.update(status=f"http_{relay.status}", http_status=status)
        await self._respond(status, body)

    def _first_byte(self, t_sent: float, t_upstream_first: float) -> None:
        now = time.perf_counter()
        row = self.usage.row
        row["ttft_s"] = now - self.usage.t0
        added = (t_sent - self.usage.t0) + (now - t_upstream_first)
        row["added_s"] = added
        self.gw.metrics.added_latency.observe(added)

    async def _whole(self, relay: Relay, t_sent: float) -> None:
        row = self.usage.row
        try:
            data = await self._read_all(relay, MAX_ANSWER_BODY)
        except (HttpError, OSError) as exc:
            row.update(status="backend_cut", http_status=502)
            await self._respond(502, error_body(f"the model's server failed mid-answer: {type(exc).__name__}",
                                                kind="api_error", code="backend_error"))
            return
        content_type = _content_type(relay.headers.get(b"content-type"))
        if content_type.startswith(b"text/event-stream"):
            # a stream where the request was read as none: metered as one, never billed as 0
            meter = self._meter(as_sent=True)
            data = meter.feed(data) + meter.flush()
            if meter.prompt_tokens is not None:
                row.update(prompt_tokens=meter.prompt_tokens, prompt_source="usage")
            row.update(completion_tokens=meter.completion_tokens, completion_source=meter.completion_source)
        else:
            data = self.gw.scrub_bytes(data)
            answer = backend_errors.parse(data)
            p, c = usage_of(answer)
            if p is not None:
                row.update(prompt_tokens=p, prompt_source="usage")
            if c is not None:
                row.update(completion_tokens=c, completion_source="usage")
            elif (texts := answer_texts(answer)):  # no usage: the answer's text, counted by the backend
                model = self.body.get("model")
                with contextlib.suppress(HttpError, OSError, TimeoutError, ConnectFailed):
                    counted = await self._count_tokens([{"model": model, "prompt": t, "add_special_tokens": False}
                                                        for t in texts])
                    if counted is not None:
                        row.update(completion_tokens=counted, completion_source="tokenize")
        self._first_byte(t_sent, relay.t_first or time.perf_counter())
        await self._settle_prompt()
        self._meter_completion(row["completion_tokens"])
        self.committed = True
        fut = self.gw.finish(self.usage, self.labels)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), self.gw.config.commit_timeout_s)
        await self._respond(200, data, content_type=content_type)

    async def _pump(self, relay: Relay, t_sent: float, meter: StreamMeter) -> None:
        row = self.usage.row
        await self.send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-request-id", row["request_id"].encode())]})
        first = True
        silence = self.gw.config.upstream_timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(silence) as cm:
                while (block := await relay.read()) is not None:
                    cm.reschedule(loop.time() + silence)
                    out = meter.feed(block)
                    row["completion_tokens"] = meter.completion_tokens
                    if meter.prompt_tokens is not None:  # every prompt's, or the whole request's at the end
                        row.update(prompt_tokens=meter.prompt_tokens, prompt_source="usage")
                    if out:
                        await self.send({"type": "http.response.body", "body": out, "more_body": True})
                        self.delivered = meter.done and meter.error is None
                        if first:
                            self._first_byte(t_sent, relay.t_first or t_sent)
                            first = False
                        self._meter_completion(meter.completion_tokens)
            tail = meter.flush()
            if tail:
                await self.send({"type": "http.response.body", "body": tail, "more_body": True})
                self.delivered = meter.done and meter.error is None
        except (HttpError, OSError, TimeoutError):  # the backend went away mid-stream: say so in the stream
            row.update(status="backend_cut", http_status=502, completion_source=meter.completion_source)
            self.gw.router.confirm(self.backend)  # down for everyone only if its poll says so too
            with contextlib.suppress(Exception):
                await self.send({"type": "http.response.body", "more_body": False, "body": b"data: " + error_body(
                    "the model's server stopped mid-answer", kind="api_error", code="backend_error") + b"\n\n"})
            return
        finally:
            row["completion_source"] = meter.completion_source
        if meter.error is not None or not (meter.done or meter.finished):
            row.update(status="backend_cut", http_status=502)
        await self._settle_prompt()
        self._meter_completion(meter.completion_tokens)
        self.committed = True
        fut = self.gw.finish(self.usage, self.labels)
        if row["status"] == "ok":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), self.gw.config.commit_timeout_s)
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})
