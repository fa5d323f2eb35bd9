"""The gateway's ASGI application: authenticate, bound, route, forward, meter.

A request to ``/v1/chat/completions``, ``/v1/completions`` or ``/v1/embeddings``:

1. its key (``Authorization: Bearer``) is checked against the key cache; no key, a wrong or revoked
   key -> 401 and nothing is forwarded;
2. its body is read within ``max_body_bytes`` (413) and ``body_timeout_s`` (408), and must be a JSON
   object naming a ``model`` (400);
3. the model routes to an upstream (404 listing the models; 503 at once when its upstream is down);
4. it is forwarded with the upstream key (the client's headers are not) through the upstream's
   :class:`~roost.gateway.upstream_client.UpstreamClient` (``relay``: keep-alive connections, bytes
   handed on as they arrive), its prompt counted by the upstream's ``/tokenize``, written right behind
   the request (never ahead of it: the backend reads both at once; ``tokenize_after_s`` > 0: only
   when the upstream's own count is late);
5. the answer is passed back as it arrives, metered (``metering.StreamMeter``); a client that reads
   nothing for ``client_timeout_s`` is cut, a client that leaves is billed for what was streamed, and
   the upstream's request is closed either way;
6. one usage row is stored; a completed request's row is committed before its last bytes are sent.

Steps 1 to 3 are :mod:`~roost.gateway.admission` (keys through :mod:`~roost.gateway.key_cache`), 4 to 6
:mod:`~roost.gateway.forward`; what the gateway answers on its own is :mod:`~roost.gateway.responses`.

The hot path: a ``POST`` whose head and body come in one read is taken through steps 1 to 3 and
written upstream by the HTTP protocol's callback itself (:meth:`Gateway.early`, from
:class:`~roost.gateway.connections.LimitedHttpToolsProtocol`), before uvicorn builds its request
cycle and task: when its key is cached, its body reads plainly, its model routes to an upstream that
is up and a kept-alive connection to it is idle; any other request takes the same steps in its task
(with the database, the router's poll and every refusal). A stream's blocks then go to the client from
the upstream connection's callback while the client takes them (:mod:`~roost.gateway.direct`).
This module holds the application (settings: :mod:`~roost.gateway.config`): its lifespan, ``/v1/models``, ``/health`` and
``/metrics``, and the stored row's metrics and log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from roost.gateway.access import refusal, scope_access
from roost.gateway.admission import Admitted, Proxy
from roost.gateway.config import GatewayConfig
from roost.gateway.db import GatewayDB, UsageWriter
from roost.gateway.forward import PATHS, Usage
from roost.gateway.key_cache import KeyCache
from roost.gateway.keys import bearer_token
from roost.gateway.metering import error_body, secret_pattern
from roost.gateway.metrics import GatewayMetrics
from roost.gateway.responses import respond, unauthorized
from roost.gateway.routing import Router
from roost.secrets import encoded_forms, redact

log = logging.getLogger("roost.gateway")


class Gateway:
    """The application and what it holds: the database, the key cache, the usage writer, the router."""

    def __init__(self, db: GatewayDB, router: Router, config: GatewayConfig | None = None,
                 metrics: GatewayMetrics | None = None) -> None:
        self.db, self.router = db, router
        router.on_models = self._models_listed
        self.config = config or GatewayConfig()
        self.metrics = metrics or GatewayMetrics(self.config.metrics_users)
        self._direct_seen: set[str] = set()
        self.keys = KeyCache(db, self.config.key_refresh_s)
        self.writer = UsageWriter(db, on_error=self.metrics.usage_write_errors.inc)
        self._secrets = [router.upstream_key or ""]
        self.secret_pattern = secret_pattern(f.encode("utf-8", "surrogatepass") for s in self._secrets if s
                                             for f in (s, *encoded_forms(s)))
        # the forwarded endpoints are plain ASGI apps reached without a router (the hot path); the
        # rest, and the lifespan, go through Starlette
        self._proxies = {PATHS[e]: Proxy(self, e) for e in PATHS}
        self._early = {path.encode(): proxy for path, proxy in self._proxies.items()}
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

    def early(self, url: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> Admitted | None:
        """A ``POST`` that arrived whole in one read, before uvicorn builds its task (the HTTP protocol's
        :data:`~roost.gateway.connections.Early` hook): a forwarded endpoint's request that
        :meth:`Proxy.admit_now` admits is sent upstream now and handed to its task. Anything else (and
        any failure here) is left to the task, which takes it through the whole door."""
        proxy = self._early.get(url)
        if proxy is None:
            return None
        try:
            return proxy.admit_now(headers, body)
        except Exception:  # the task's door answers (and logs) whatever this was
            return None

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
        self._update_upstream_gauges()
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

    def _update_upstream_gauges(self) -> None:
        for u in self.router.upstreams.values():
            self.metrics.backend_up.labels(u.name).set(1 if u.up else 0)
        expected = self.router.direct_expected()
        for model in expected | self._direct_seen:
            self.metrics.direct_expected.labels(model).set(1 if model in expected else 0)
        self._direct_seen |= expected

    # --- plain endpoints ----------------------------------------------------------------------

    async def list_models(self, request: Request) -> Response:
        if await self.keys.check(bearer_token(request.headers.get("authorization"))) is None:
            self.metrics.refused.labels("unauthorized").inc()
            return Response(unauthorized(), 401, media_type="application/json")
        return Response(orjson.dumps({"object": "list", "data": self.router.models()}), media_type="application/json")

    async def health(self, request: Request) -> Response:
        if scope_access(request.scope, self.config.metrics_token) != "allow":  # alive, and nothing more
            return Response(b'{"status":"ok"}', media_type="application/json")
        upstreams = list(self.router.upstreams.values())
        up = sum(u.up for u in upstreams)
        body = {"status": "ok", "backends": len(upstreams), "backends_up": up,
                "models": sorted({m for u in upstreams if u.up for m in u.model_ids}), "keys": self.keys.size,
                "usage_pending": self.writer.pending}
        return Response(orjson.dumps(body), media_type="application/json")

    async def metrics_endpoint(self, request: Request) -> Response:
        access = scope_access(request.scope, self.config.metrics_token)
        if access != "allow":
            status, body, headers = refusal(access)
            return Response(body, status, headers=headers, media_type="application/json")
        self._update_upstream_gauges()
        self.metrics.usage_pending.set(self.writer.pending)
        return Response(self.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # --- the stored row -----------------------------------------------------------------------

    def finish(self, usage: Usage, labels: tuple[str, str, str]) -> asyncio.Future[None]:
        row = usage.row
        row["duration_s"] = time.perf_counter() - usage.t0
        status = row["status"]
        m = self.metrics
        m.child(m.requests, *labels, status).inc()
        m.child(m.model_requests, labels[2]).inc()
        m.child(m.user_requests, usage.user_label, *labels[1:]).inc()
        if status != "ok":
            self.metrics.errors.labels(*labels, status).inc()
        log.info("%s %s key=%s kind=%s model=%s status=%s prompt=%d completion=%d %.3fs", row["request_id"][:12],
                 row["endpoint"], row["key_name"], row["kind"], row["model"], status, row["prompt_tokens"],
                 row["completion_tokens"], row["duration_s"])
        return self.writer.submit(row)
