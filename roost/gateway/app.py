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
import socket
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from roost.gateway.db import GatewayDB, UsageWriter
from roost.gateway.keys import Principal, bearer_token, digest, same_digest
from roost.gateway.metering import (
    Endpoint,
    StreamMeter,
    error_body,
    stream_shape,
    tokenize_bodies,
    tokenize_count,
    upstream_stream_options,
    usage_of,
)
from roost.gateway.metrics import GatewayMetrics
from roost.gateway.routing import Backend, BackendDown, ModelNotFound, Router
from roost.secrets import redact
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

    async def health(self, _request: Request) -> Response:
        backends = list(self.router.backends.values())
        up = sum(b.up for b in backends)
        body = {"status": "ok", "backends": len(backends), "backends_up": up,
                "models": sorted({m for b in backends if b.up for m in b.model_ids}), "keys": self.keys.size,
                "usage_pending": self.writer.pending}
        return Response(orjson.dumps(body), media_type="application/json")

    async def metrics_endpoint(self, _request: Request) -> Response:
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
            value = headers.get(gw.config.trusted_user_header)
            user = value.strip()[:320] if value and value.strip() else None
        stream = body.get("stream") is True and self.endpoint != "embeddings"
        usage = Usage(gw, principal, self.endpoint, model, user, stream)
        usage.t0 = t_received
        usage.row["backend"] = backend.name
        await _Forward(gw, self, backend, body, raw, usage, stream, receive, send).run()


class _Forward:
    """One forwarded request, from sending it upstream to its usage row."""

    def __init__(self, gw: Gateway, proxy: _Proxy, backend: Backend, body: dict[str, Any], raw: bytes, usage: Usage,
                 stream: bool, receive: Receive, send: Send) -> None:
        self.gw, self.proxy, self.backend, self.body, self.raw = gw, proxy, backend, body, raw
        self.usage, self.stream, self.receive, self._send = usage, stream, receive, send
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

    async def send(self, message: dict[str, Any]) -> None:
        """A message to the client; the watchdog cuts a client that takes ``client_timeout_s`` to take one."""
        self.sending_since = time.perf_counter()
        await self._send(message)  # type: ignore[arg-type]
        self.sending_since = None

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
            with contextlib.suppress(asyncio.CancelledError):
                await work
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

    def _start_tokenize(self) -> None:
        bodies, known = tokenize_bodies(self.proxy.endpoint, self.body)
        if not bodies and not known:
            return
        client = self.backend.client

        async def count() -> int | None:
            total = known
            for b in bodies:
                relay, _ = await client.relay("/tokenize", orjson.dumps(b))
                try:
                    status = await relay.head()
                    data = b""
                    while (block := await relay.read()) is not None:
                        data += block
                finally:
                    client.release(relay)
                try:
                    n = tokenize_count(orjson.loads(data)) if status == 200 else None
                except orjson.JSONDecodeError:
                    n = None
                if n is None:
                    return None
                total += n
            return total

        self.tokenize = asyncio.ensure_future(count())

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

    async def _unreachable(self, why: str) -> None:
        row = self.usage.row
        self.backend.mark_down(why)
        row.update(status="backend_unreachable", http_status=503)
        self.gw.metrics.refused.labels("backend_down").inc()
        await respond(self._send, 503, error_body(f"the server for `{row['model'][:200]}` is not reachable now; "
                                                  "try again later", kind="service_unavailable",
                                                  code="backend_unavailable"))

    async def _forward(self) -> None:
        row = self.usage.row
        client_wants = (True, True)
        content = self.raw
        if self.stream:
            client_wants = upstream_stream_options(self.body)
            content = orjson.dumps(self.body)
        client = self.backend.client
        relay: Relay | None = None
        t_sent = time.perf_counter()
        try:
            for attempt in (1, 2):
                try:
                    relay, reused = await client.relay(self.proxy.path, content,
                                                       headers={"X-Request-Id": row["request_id"]})
                except ConnectFailed as exc:
                    await self._unreachable(f"refused a connection ({exc})")
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
                    client.release(relay)
                    relay = None
                    if reused and attempt == 1:  # a kept-alive connection closed as the request went out
                        continue
                    row.update(status="backend_cut", http_status=502)
                    await respond(self._send, 502, error_body(f"the model's server failed: {type(exc).__name__}",
                                                              kind="api_error", code="backend_error"))
                    return
            assert relay is not None
            if status != 200:
                await self._pass_error(relay)
            elif self.stream:
                prompts, per_prompt = stream_shape(self.proxy.endpoint, self.body)
                await self._pump(relay, t_sent, StreamMeter(client_include_usage=client_wants[0],
                                                            client_continuous=client_wants[1], prompts=prompts,
                                                            per_prompt=per_prompt))
            else:
                await self._whole(relay, t_sent)
        except TimeoutError:
            row.update(status="backend_cut", http_status=504)
            await respond(self._send, 504, error_body("the model's server did not answer in time", kind="api_error",
                                                      code="backend_timeout"))
        finally:
            if relay is not None:
                client.release(relay)

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
        """A backend's non-200 answer, passed on (bounded, the upstream key scrubbed)."""
        data = b""
        with contextlib.suppress(HttpError, OSError, TimeoutError):
            data = await self._read_all(relay, MAX_ERROR_BODY)
        text = self.gw.scrub(data[:MAX_ERROR_BODY].decode("utf-8", "replace"))
        self.usage.row.update(status=f"http_{relay.status}", http_status=relay.status)
        await respond(self._send, relay.status, text.encode(),
                      content_type=relay.headers.get(b"content-type", b"application/json"))

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
            await respond(self._send, 502, error_body(f"the model's server failed mid-answer: {type(exc).__name__}",
                                                      kind="api_error", code="backend_error"))
            return
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            answer = None
        p, c = usage_of(answer)
        if p is not None:
            row.update(prompt_tokens=p, prompt_source="usage")
        if c is not None:
            row.update(completion_tokens=c, completion_source="usage")
        self._first_byte(t_sent, relay.t_first or time.perf_counter())
        await self._settle_prompt()
        self._meter_completion(row["completion_tokens"])
        self.committed = True
        fut = self.gw.finish(self.usage, self.labels)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), self.gw.config.commit_timeout_s)
        await respond(self._send, 200, data, content_type=relay.headers.get(b"content-type", b"application/json"),
                      extra=[(b"x-request-id", row["request_id"].encode())])

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
        except (HttpError, OSError, TimeoutError) as exc:  # the backend went away mid-stream: say so in the stream
            row.update(status="backend_cut", http_status=502, completion_source=meter.completion_source)
            self.backend.mark_down(f"cut a stream ({type(exc).__name__})")
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
