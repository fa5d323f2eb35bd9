"""A forwarded endpoint's door (steps 1 to 3 of :mod:`roost.gateway.app`): the key, the body within
its bounds, a JSON object naming a model, the model's upstream; a request refused here is answered
(:class:`~roost.gateway.responses.Refused`) and nothing of it is forwarded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from starlette.types import Receive, Scope, Send

from roost.gateway.connections import EARLY, STREAM
from roost.gateway.forward import PATHS, Forward, Host, Usage, send_now
from roost.gateway.key_cache import KeyCache
from roost.gateway.keys import Principal, bearer_token, forwarded_user
from roost.gateway.metering import Endpoint, error_body
from roost.gateway.request import InvalidRequest, Reading, TooDeep, encode, forwarded_body, read_request
from roost.gateway.responses import Refused, gateway_error, log_failure, respond, unauthorized
from roost.gateway.routing import ModelNotFound, Upstream, UpstreamDown
from roost.vllm.relay import Relay


class AdmissionHost(Host, Protocol):
    """What admission uses of the application (:class:`roost.gateway.app.Gateway`): what a forwarded
    request uses, and the key cache."""

    keys: KeyCache


class _RequestIds:
    """Request ids: 32 random hex digits each (as ``uuid4().hex``), cut from 4 KiB of ``os.urandom`` at a
    time rather than one system call and one UUID object per request."""

    def __init__(self) -> None:
        self._pool, self._at = b"", 0

    def __call__(self) -> str:
        if self._at >= len(self._pool):
            self._pool, self._at = os.urandom(4096), 0
        at = self._at
        self._at = at + 16
        return self._pool[at:at + 16].hex()


request_id = _RequestIds()


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header ``name`` (lower case), as Starlette's ``Headers.get`` gives it."""
    for k, v in headers:
        if k == name:
            return str(v.decode("latin-1"))
    return None


@dataclass(slots=True)
class Admitted:
    """A request through the door: who sent it, what it asks, where it goes (and, from
    :meth:`Proxy.admit_now`, its request already written upstream)."""

    principal: Principal
    body: dict[str, Any]
    content: bytes
    reading: Reading
    model: str
    upstream: Upstream
    t_received: float
    request_id: str
    relay: Relay | None = None
    t_sent: float = 0.0
    tokenize: Relay | None = None  # its /tokenize request, written right behind it


async def read_body(scope: Scope, receive: Receive, limit: int, timeout_s: float) -> bytes:
    """The request body, within ``limit`` bytes and ``timeout_s`` seconds."""
    length = header(scope["headers"], b"content-length")
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


class Proxy:
    """``POST`` of one OpenAI endpoint, forwarded to the model's upstream (an ASGI app)."""

    def __init__(self, gw: AdmissionHost, endpoint: Endpoint) -> None:
        self.gw, self.endpoint, self.path = gw, endpoint, PATHS[endpoint]

    def admit_now(self, headers: list[tuple[bytes, bytes]], raw: bytes) -> Admitted | None:
        """The door's hot path, run by the HTTP protocol as the request's last byte arrives (before any
        task runs): a request whose key is cached, whose body reads plainly and whose model routes to an
        upstream that is up is admitted and written upstream at once when a kept-alive connection is
        idle. None for any other request: :meth:`__call__` takes it through the whole door (the same
        checks, with the database, the router's poll, and every refusal answered)."""
        t_received = time.perf_counter()
        gw = self.gw
        if len(raw) > gw.config.max_body_bytes:
            return None
        principal = gw.keys.check_now(bearer_token(header(headers, b"authorization")))
        if principal is None:
            return None
        body = orjson.loads(raw)
        model = body.get("model") if type(body) is dict else None
        if not isinstance(model, str) or not model:
            return None
        reading = read_request(self.endpoint, body)
        rewritten = forwarded_body(body, reading)
        content = raw if rewritten is None else encode(rewritten)
        upstream = gw.router.resolve_now(model)
        if upstream is None:
            return None
        admitted = Admitted(principal, body, content, reading, model, upstream, t_received, request_id())
        admitted.relay, admitted.t_sent, admitted.tokenize = send_now(
            upstream, self.endpoint, content, body, admitted.request_id, gw.config.tokenize_after_s)
        return admitted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        forwarded: list[Forward] = []
        admitted: Admitted | None = scope.pop(EARLY, None)  # type: ignore[misc]
        try:
            if admitted is None:
                admitted = await self._admit(scope, receive, send)
                if admitted is None:
                    return
            await self._forward(scope, receive, send, admitted, forwarded)
        except Exception as exc:  # a bug must not reach the client as a traceback, nor the log as one
            if forwarded:  # Forward.run answers its own bugs; this is one in its bookkeeping
                log_failure("after forwarding", exc)
                return
            if admitted is not None:
                for unread in (admitted.relay, admitted.tokenize):
                    if unread is not None:  # sent, and nobody will read it
                        admitted.upstream.client.release(unread)
            self.gw.metrics.refused.labels("gateway_error").inc()
            log_failure("before forwarding", exc)
            with contextlib.suppress(Exception):  # a refusal being sent when it failed: the client is gone
                await respond(send, 500, gateway_error(), close=True)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> Admitted | None:
        """The whole door: the request admitted, or None once its refusal is answered."""
        gw = self.gw
        t_received = time.perf_counter()
        try:
            principal = await gw.keys.check(bearer_token(header(scope["headers"], b"authorization")))
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
                rewritten = forwarded_body(body, reading)
                content = raw if rewritten is None else encode(rewritten)
            except InvalidRequest as exc:
                raise Refused(400, exc.message, "bad_request", param=exc.param) from None
            except TooDeep as exc:
                raise Refused(400, f"{exc}: it nests deeper than about 1,000 levels", "bad_request") from None
            try:
                upstream = await gw.router.resolve(model)
            except ModelNotFound as exc:
                listed = ", ".join(exc.available) or "none"
                raise Refused(404, f"The model `{model[:200]}` does not exist. Available models: {listed}",
                              "unknown_model", code="model_not_found", param="model") from None
            except UpstreamDown:
                raise Refused(503, f"the server for `{model[:200]}` is not reachable now; try again later",
                              "backend_down", kind="service_unavailable", code="backend_unavailable") from None
        except Refused as r:
            gw.metrics.refused.labels(r.reason).inc()
            if r.status == 499:
                return None
            body_bytes = unauthorized() if r.status == 401 else error_body(r.message, kind=r.kind, code=r.code,
                                                                            param=r.param)
            await respond(send, r.status, body_bytes, close=r.close)
            return None
        return Admitted(principal, body, content, reading, model, upstream, t_received, request_id())

    async def _forward(self, scope: Scope, receive: Receive, send: Send, a: Admitted,
                       forwarded: list[Forward]) -> None:
        gw = self.gw
        user = None
        if a.principal.trusted:
            user = forwarded_user(next((v for k, v in scope["headers"] if k == gw.config.trusted_user_header_bytes),
                                       None))
        usage = Usage(gw, a.principal, self.endpoint, a.model, user, a.reading.stream, request_id=a.request_id)
        usage.t0 = a.t_received
        usage.row["backend"] = a.upstream.name
        forward = Forward(gw, self.endpoint, a.upstream, a.body, a.content, a.reading, usage, receive, send,
                          sent=a.relay, t_sent=a.t_sent, client_stream=scope.get(STREAM), tokenize_sent=a.tokenize)
        forwarded.append(forward)
        await forward.run()
