"""A forwarded endpoint's door (steps 1 to 3 of :mod:`roost.gateway.app`): the key, the body within
its bounds, a JSON object naming a model, the model's upstream; a request refused here is answered
(:class:`~roost.gateway.responses.Refused`) and nothing of it is forwarded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

import orjson
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from roost.gateway.forward import PATHS, Forward, Host, Usage
from roost.gateway.key_cache import KeyCache
from roost.gateway.keys import bearer_token, forwarded_user
from roost.gateway.metering import Endpoint, error_body
from roost.gateway.request import InvalidRequest, TooDeep, encode, forwarded_body, read_request
from roost.gateway.responses import Refused, gateway_error, log_failure, respond, unauthorized
from roost.gateway.routing import ModelNotFound, UpstreamDown


class AdmissionHost(Host, Protocol):
    """What admission uses of the application (:class:`roost.gateway.app.Gateway`): what a forwarded
    request uses, and the key cache."""

    keys: KeyCache


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


class Proxy:
    """``POST`` of one OpenAI endpoint, forwarded to the model's upstream (an ASGI app)."""

    def __init__(self, gw: AdmissionHost, endpoint: Endpoint) -> None:
        self.gw, self.endpoint, self.path = gw, endpoint, PATHS[endpoint]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        forwarded: list[Forward] = []
        try:
            await self._handle(scope, receive, send, forwarded)
        except Exception as exc:  # a bug must not reach the client as a traceback, nor the log as one
            if forwarded:  # Forward.run answers its own bugs; this is one in its bookkeeping
                log_failure("after forwarding", exc)
                return
            self.gw.metrics.refused.labels("gateway_error").inc()
            log_failure("before forwarding", exc)
            with contextlib.suppress(Exception):  # a refusal being sent when it failed: the client is gone
                await respond(send, 500, gateway_error(), close=True)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, forwarded: list[Forward]) -> None:
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
                return
            body_bytes = unauthorized() if r.status == 401 else error_body(r.message, kind=r.kind, code=r.code,
                                                                            param=r.param)
            await respond(send, r.status, body_bytes, close=r.close)
            return
        user = None
        if principal.trusted:
            user = forwarded_user(next((v for k, v in scope["headers"] if k == gw.config.trusted_user_header_bytes),
                                       None))
        usage = Usage(gw, principal, self.endpoint, model, user, reading.stream)
        usage.t0 = t_received
        usage.row["backend"] = upstream.name
        forward = Forward(gw, self.endpoint, upstream, body, content, reading, usage, receive, send)
        forwarded.append(forward)
        await forward.run()
