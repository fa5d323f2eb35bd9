"""One forwarded request, from sending it upstream to its usage row (steps 4 to 6 of
:mod:`roost.gateway.app`).

The request goes out through the upstream's :class:`~roost.gateway.upstream_client.UpstreamClient`
(written before any task runs when a kept-alive connection is idle: ``relay_now``; else ``relay``):
sent again only when a kept-alive connection closed before one byte came back; its prompt is counted
by the upstream's ``/tokenize``, written right behind it (on an idle connection, in the same callback:
the backend reads both at once rather than being woken again while it prepares the first token;
:func:`tokenize_now`), or ``tokenize_after_s`` later, only when the upstream's own count is late. The answer is passed back as
it arrives (a stream through :class:`~roost.gateway.metering.StreamMeter`, its blocks written to the
client from the upstream connection's callback while the client takes them: :mod:`roost.gateway.direct`;
a whole answer read within :data:`MAX_ANSWER_BODY`), an
upstream's error as an OpenAI-style error (:mod:`roost.gateway.upstream_errors`); a watchdog cuts a
client that reads nothing for ``client_timeout_s``, a client that leaves is billed for what was
streamed, and the usage row is committed before a completed request's last bytes are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from starlette.types import Receive, Send

from roost.gateway import upstream_errors
from roost.gateway.config import GatewayConfig
from roost.gateway.connections import ClientStream
from roost.gateway.direct import DirectSink
from roost.gateway.keys import Principal
from roost.gateway.metering import (
    Endpoint,
    SecretForms,
    StreamMeter,
    answer_texts,
    error_body,
    tokenize_bodies,
    tokenize_count,
    usage_of,
)
from roost.gateway.metrics import GatewayMetrics
from roost.gateway.request import Reading, encode
from roost.gateway.responses import gateway_error, log_failure, respond
from roost.gateway.routing import Router, Upstream
from roost.vllm.relay import Relay
from roost.vllm.timed_net import ConnectFailed, HttpError

PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
                              "embeddings": "/v1/embeddings"}
"""The forwarded endpoints, each at the same path on the gateway and upstream."""
METER_EVERY = 16
"""A stream's completion counters move in steps of this many tokens (and at its end), not per block."""
MAX_ERROR_BODY = 64 * 1024
MAX_ANSWER_BODY = 256 * 1024 * 1024


class Host(Protocol):
    """What a forwarded request uses of the application it runs in (:class:`roost.gateway.app.Gateway`,
    which builds the requests: described here so that this module does not import it back)."""

    config: GatewayConfig
    metrics: GatewayMetrics
    router: Router
    secret_pattern: SecretForms | None

    def scrub(self, text: str) -> str: ...

    def scrub_bytes(self, data: bytes) -> bytes: ...

    def finish(self, usage: Usage, labels: tuple[str, str, str]) -> asyncio.Future[None]: ...


def tokenize_now(upstream: Upstream, endpoint: Endpoint, body: dict[str, Any]) -> Relay | None:
    """The ``/tokenize`` request of ``body``'s (first) prompt written now on an idle kept-alive connection,
    right behind the request itself (the backend reads both at once, rather than being woken again
    while it prepares the first token); None when there is none to count or no connection is idle."""
    bodies, _ = tokenize_bodies(endpoint, body)
    return upstream.client.relay_now("/tokenize", encode(bodies[0]), "") if bodies else None


def send_now(upstream: Upstream, endpoint: Endpoint, content: bytes, body: dict[str, Any], request_id: str,
             tokenize_after_s: float) -> tuple[Relay | None, float, Relay | None]:
    """The request written now when a kept-alive connection is idle (its relay or None), when it was
    written, and its ``/tokenize`` right behind it when the gateway counts prompts at once
    (``tokenize_after_s`` 0; :func:`tokenize_now`)."""
    sent = upstream.client.relay_now(PATHS[endpoint], content, request_id)
    t_sent = time.perf_counter()
    tokenize = tokenize_now(upstream, endpoint, body) if sent is not None and tokenize_after_s <= 0 else None
    return sent, t_sent, tokenize


class Usage:
    """One request's usage row, filled in as the request goes (its ``backend`` column, named before
    upstreams were, holds the upstream's name: :attr:`Upstream.name`), and the ``user`` label of its
    per-user metrics (:class:`~roost.gateway.metrics.UserLabels`)."""

    def __init__(self, gw: Host, principal: Principal, endpoint: Endpoint, model: str, user: str | None,
                 stream: bool, *, request_id: str) -> None:
        self.t0 = time.perf_counter()
        ts = time.time()
        self.row: dict[str, Any] = {
            "request_id": request_id, "ts": ts, "day": time.strftime("%Y-%m-%d", time.gmtime(ts)),
            "key_name": principal.name, "kind": principal.kind, "user": user, "model": model, "backend": "",
            "endpoint": endpoint, "stream": stream, "status": "ok", "http_status": 200, "prompt_tokens": 0,
            "completion_tokens": 0, "prompt_source": "none", "completion_source": "none", "ttft_s": None,
            "duration_s": 0.0, "added_s": None, "gateway": gw.config.instance,
        }
        self.user_label = gw.metrics.users.label(principal.name, user)


_CONTENT_TYPE = re.compile(rb"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}(?: ?; ?[A-Za-z0-9_-]{1,32}=[A-Za-z0-9_.-]{1,32})*")


def _content_type(value: bytes | None) -> bytes:
    """An upstream's content type, passed on only when it is a plain media type (else JSON's)."""
    return value if value is not None and _CONTENT_TYPE.fullmatch(value) else b"application/json"


class Forward:
    """One forwarded request, from sending it upstream to its usage row."""

    def __init__(self, gw: Host, endpoint: Endpoint, upstream: Upstream, body: dict[str, Any], content: bytes,
                 reading: Reading, usage: Usage, receive: Receive, send: Send, *, sent: Relay | None = None,
                 t_sent: float = 0.0, client_stream: ClientStream | None = None,
                 tokenize_sent: Relay | None = None) -> None:
        self.gw, self.upstream, self.body, self.content = gw, upstream, body, content
        self.endpoint, self.path = endpoint, PATHS[endpoint]
        self.reading, self.stream = reading, reading.stream
        self.usage, self.receive, self._client_send = usage, receive, send
        self.started = False  # the response's head went out
        row = usage.row
        self.labels = (row["key_name"], row["kind"], row["model"])
        m = gw.metrics
        self.completion_counter = m.child(m.completion_tokens, *self.labels)
        self.user_labels = (usage.user_label, row["kind"], row["model"])
        # a new user's series exist (at 0) while its first request runs
        self.user_completion = m.child(m.user_completion_tokens, *self.user_labels)
        self.user_prompt = m.child(m.user_prompt_tokens, *self.user_labels)
        self.user_ttft = m.child(m.user_ttft, *self.user_labels)
        m.child(m.user_requests, *self.user_labels)  # counted when the request ends (the app's finish)
        self.committed = False
        self.tokenize: asyncio.Task[int | None] | None = None
        self.metered_completion = 0
        self.sending_since: float | None = None  # perf_counter when a send to the client started, until it ends
        self.client_timed_out = False
        self.delivered = False  # the client has the whole answer (a stream's [DONE] handed on)
        self.work: asyncio.Future[None] | None = None
        self.sent, self.t_sent = sent, t_sent  # the request written upstream already, on a reused connection
        self.tokenize_sent = tokenize_sent  # its /tokenize request likewise (tokenize_now)
        self.client_stream = client_stream  # the client's connection, written to directly (roost.gateway.direct)
        self._t_sent, self._first = 0.0, True  # a stream's: its send time, no block sent to the client yet

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
                await self._respond(500, gateway_error(), close=True)
            else:
                tail = b"data: " + gateway_error() + b"\n\n" if self.stream else b""
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
        gw, upstream, row = self.gw, self.upstream, self.usage.row
        in_flight = gw.metrics.child(gw.metrics.in_flight, row["model"])
        in_flight.inc()
        upstream.in_flight += 1
        if self.sent is None:  # written now if a kept-alive connection is idle, not a loop pass later
            self.sent, self.t_sent, self.tokenize_sent = send_now(
                upstream, self.endpoint, self.content, self.body, row["request_id"], gw.config.tokenize_after_s)
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
            for unread in (self.sent, self.tokenize_sent):  # cancelled before they were read: nobody will
                if unread is not None:
                    upstream.client.release(unread)
            self.sent = self.tokenize_sent = None
            upstream.in_flight -= 1
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

    async def _count_tokens(self, bodies: list[dict[str, Any]], known: int = 0, sent: Relay | None = None,
                            ) -> int | None:
        """Tokens of ``bodies`` by the backend's ``/tokenize`` (plus ``known``); None when it cannot say.
        ``sent``: the first body's request, written already (:func:`tokenize_now`)."""
        client = self.upstream.client
        total = known
        for b in bodies:
            if sent is not None:
                relay, sent = sent, None
            else:
                relay, _ = await client.relay("/tokenize", encode(b))
            try:
                async with asyncio.timeout(self.gw.config.upstream_timeout_s):
                    status = await relay.head()
                data = await self._read_all(relay, MAX_ERROR_BODY * 16)
            finally:
                client.release(relay)
            n = tokenize_count(upstream_errors.parse(data)) if status == 200 else None
            if n is None:
                return None
            total += n
        return total

    def _start_tokenize(self) -> None:
        bodies, known = tokenize_bodies(self.endpoint, self.body)
        sent, self.tokenize_sent = self.tokenize_sent, None
        if not bodies and not known:
            return
        self.tokenize = asyncio.ensure_future(self._count_tokens(bodies, known, sent))

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
        self.gw.metrics.child(self.gw.metrics.prompt_tokens, *self.labels).inc(row["prompt_tokens"])
        self.user_prompt.inc(row["prompt_tokens"])

    def _meter_completion(self, total: int) -> None:
        if total > self.metered_completion:
            self.completion_counter.inc(total - self.metered_completion)
            self.user_completion.inc(total - self.metered_completion)
            self.metered_completion = total

    async def _unreachable(self) -> None:
        """The backend took no connection: 503, and a poll of it decides whether it is down for everyone
        (a connect timed out on a loaded machine is not a dead server)."""
        row = self.usage.row
        self.gw.router.confirm(self.upstream)
        row.update(status="backend_unreachable", http_status=503)
        self.gw.metrics.refused.labels("backend_down").inc()
        await self._respond(503, error_body(f"the server for `{row['model'][:200]}` is not reachable now; "
                                            "try again later", kind="service_unavailable", code="backend_unavailable"))

    async def _forward(self) -> None:
        row = self.usage.row
        client = self.upstream.client
        relay: Relay | None = None
        t_sent = time.perf_counter()
        try:
            for attempt in (1, 2):
                if attempt == 1 and self.sent is not None:
                    relay, reused, self.sent = self.sent, True, None
                    t_sent = self.t_sent
                else:
                    try:
                        relay, reused = await client.relay(self.path, self.content,
                                                           headers={"X-Request-Id": row["request_id"]})
                    except ConnectFailed:
                        await self._unreachable()
                        return
                    t_sent = time.perf_counter() if attempt == 1 else t_sent
                if attempt == 1:
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
        return upstream_errors.stream_error_event(obj, self.gw.scrub)

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
        """A backend's non-200 answer, relayed as an OpenAI-style error (:mod:`upstream_errors`)."""
        data = b""
        with contextlib.suppress(HttpError, OSError, TimeoutError):
            data = await self._read_all(relay, MAX_ERROR_BODY)
        status, body = upstream_errors.relayed_error(relay.status, upstream_errors.parse(data[:MAX_ERROR_BODY]),
                                                    self.gw.scrub)
        self.usage.row.update(status=f"http_{relay.status}", http_status=status)
        await self._respond(status, body)

    def _metered(self, meter: StreamMeter, block: bytes) -> bytes:
        """A stream's block through the meter, the row updated: what the client gets of it."""
        out = meter.feed(block)
        row = self.usage.row
        row["completion_tokens"] = meter.completion_tokens
        if meter.prompt_tokens is not None:  # every prompt's, or the whole request's at the end
            row.update(prompt_tokens=meter.prompt_tokens, prompt_source="usage")
        return out

    def _sent_out(self, meter: StreamMeter, relay: Relay) -> None:
        """A stream's block was handed to the client."""
        self.delivered = meter.done and meter.error is None
        if self._first:
            self._first_byte(self._t_sent, relay.t_first or self._t_sent)
            self._answer_started()
            self._first = False
        total = meter.completion_tokens
        if total - self.metered_completion >= METER_EVERY:
            self._meter_completion(total)

    def _direct(self, meter: StreamMeter, relay: Relay) -> Callable[[bytes, float], bool]:
        """The hook of :class:`~roost.gateway.direct.DirectSink`: a block metered and written to the client
        from the upstream connection's callback; False (nothing done) when the client's connection
        cannot take it without waiting."""
        stream = self.client_stream
        assert stream is not None

        def hook(block: bytes, _t: float) -> bool:
            if not stream.writable:
                return False
            out = self._metered(meter, block)
            if out:
                stream.write(out)
                self._sent_out(meter, relay)
            return True

        return hook

    def _first_byte(self, t_sent: float, t_upstream_first: float) -> None:
        now = time.perf_counter()
        row = self.usage.row
        row["ttft_s"] = now - self.usage.t0
        added = (t_sent - self.usage.t0) + (now - t_upstream_first)
        row["added_s"] = added
        self.gw.metrics.added_latency.observe(added)

    def _answer_started(self) -> None:
        """A 200 answer's first byte goes to the client now: the per-user time to first byte."""
        self.user_ttft.observe(time.perf_counter() - self.usage.t0)

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
            answer = upstream_errors.parse(data)
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
        self._answer_started()
        await self._respond(200, data, content_type=content_type)

    async def _pump(self, relay: Relay, t_sent: float, meter: StreamMeter) -> None:
        row = self.usage.row
        await self.send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-request-id", row["request_id"].encode())]})
        self._t_sent, self._first = t_sent, True
        sink = DirectSink(relay, self._direct(meter, relay)) if self.client_stream is not None else None
        source = sink if sink is not None and sink.install() else relay
        silence = self.gw.config.upstream_timeout_s
        wait = silence
        try:
            while True:
                try:
                    async with asyncio.timeout(wait):
                        block = await source.read()
                except TimeoutError:
                    wait = silence - (time.perf_counter() - sink.last) if sink is not None else 0.0
                    if wait <= 0:
                        raise
                    continue  # blocks went to the client directly meanwhile: silent since the last one only
                wait = silence
                if block is None:
                    break
                out = self._metered(meter, block)
                if out:
                    await self.send({"type": "http.response.body", "body": out, "more_body": True})
                    self._sent_out(meter, relay)
            tail = meter.flush()
            if tail:
                await self.send({"type": "http.response.body", "body": tail, "more_body": True})
                self.delivered = meter.done and meter.error is None
        except (HttpError, OSError, TimeoutError):  # the backend went away mid-stream: say so in the stream
            row.update(status="backend_cut", http_status=502, completion_source=meter.completion_source)
            self.gw.router.confirm(self.upstream)  # down for everyone only if its poll says so too
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
