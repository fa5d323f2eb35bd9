"""Connection limits of the gateway's HTTP server: what a peer without a key can hold.

uvicorn's httptools protocol, as it comes, lets any peer that reaches the port hold memory and file
descriptors: a request head has no size limit (httptools buffers a 64 MiB header line), a new
connection has no deadline until its first request (one that sends nothing, or half a request line,
stays open), and nothing bounds the connections one address holds. :class:`LimitedHttpToolsProtocol`
(a subclass of uvicorn's protocol, one per connection) enforces :class:`ConnectionLimits`:

- a request head (request line and headers) over ``max_header_bytes`` -> 431, counted as the bytes
  arrive, so httptools never holds more than the limit (plus, for a head that begins inside the
  chunk that ends the previous request, at most that one read);
- a head not complete within ``header_timeout_s`` -> 408 when some of it arrived, a plain close when
  nothing did. The deadline of a new connection runs from its accept; of a kept-alive one from the
  first byte of its next request (idle between requests: ``keep_alive_s``, uvicorn's own timer); the
  rest of a body still arriving after its request was answered (a 401 does not read it) has the same
  deadline, then the connection is closed;
- a connection over ``max_connections_per_client`` for its address, or over ``max_connections``
  -> 503 ``too_many_connections`` with ``retry-after: 1``, written before any request is read.

Refusals are answered with OpenAI-style JSON errors and ``connection: close``. Each kind of refusal
is logged at most once per :data:`WARN_INTERVAL_S` (with the number of others since), never with a
byte the peer sent (uvicorn's own line per malformed request and per ``Upgrade`` request too: the
gateway upgrades nothing, so a connection never leaves this protocol and its count). The counts per address live in one :class:`ConnectionBook` per server, kept in
``connection_made``/``connection_lost`` (every close passes there: refusals, resets, shutdown).

:func:`fd_budget` is the file-descriptor arithmetic: each client connection may need a backend
connection too, so ``max_connections`` needs about 2 descriptors each plus a reserve;
:func:`raise_fd_limit` raises the soft ``RLIMIT_NOFILE`` towards the hard limit (at most
:data:`NOFILE_CEILING`) and lowers the connections served when they cannot fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections.abc import Callable
from typing import Any, ClassVar

import httptools
from pydantic import BaseModel, Field
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from roost.gateway.metering import error_body

log = logging.getLogger("roost.gateway")

FDS_PER_CONNECTION = 2
"""A client connection and the backend connection its request may hold."""
FD_RESERVE = 64
"""Descriptors kept for everything else: the listening socket, the database, logs, polls, imports."""
NOFILE_CEILING = 65536
"""The soft limit is raised at most this far (the unit's ``LimitNOFILE``)."""
WARN_INTERVAL_S = 60.0


class ConnectionLimits(BaseModel):
    """What one peer may hold of the gateway before it has sent a complete request."""

    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                  description="Largest request head (request line and headers of one request); "
                                  "431 above.")
    header_timeout_s: float = Field(default=10.0, gt=0, description="A new connection must deliver a complete "
                                    "request head within this time of its accept, a kept-alive one within this "
                                    "time of the first byte of its next request (408, or a plain close when "
                                    "nothing arrived).")
    keep_alive_s: float = Field(default=30.0, gt=0, description="An idle kept-alive connection is closed after "
                                "this long.")
    max_connections: int = Field(default=4096, ge=1, description="Open client connections, overall; 503 "
                                 "above (lowered at start when the file-descriptor limit cannot hold them).")
    max_connections_per_client: int = Field(default=512, ge=1, description="Open connections per client IP "
                                            "address; 503 above.")


def fd_budget(max_connections: int, soft: int, hard: int) -> tuple[int, int]:
    """``(soft limit to set, connections that fit)`` for ``max_connections`` under ``RLIMIT_NOFILE`` of
    ``soft``/``hard`` (``resource.RLIM_INFINITY``: unlimited): the soft limit raised towards the hard
    one, at most to :data:`NOFILE_CEILING` (never lowered); the connections at most ``max_connections``
    and at most what the soft limit holds at :data:`FDS_PER_CONNECTION` each above :data:`FD_RESERVE`
    (at least 1)."""
    if soft == resource.RLIM_INFINITY:
        return soft, max_connections
    target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else min(hard, NOFILE_CEILING)
    new_soft = max(soft, target)
    fits = max(1, (new_soft - FD_RESERVE) // FDS_PER_CONNECTION)
    return new_soft, min(max_connections, fits)


def fds_needed(max_connections: int) -> int:
    return max_connections * FDS_PER_CONNECTION + FD_RESERVE


def raise_fd_limit(max_connections: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` (:func:`fd_budget`); the connections that fit. Logs one warning
    when that is fewer than ``max_connections``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new_soft, fits = fd_budget(max_connections, soft, hard)
    if new_soft != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
        except (ValueError, OSError):
            new_soft, fits = fd_budget(max_connections, soft, soft)
    if fits < max_connections:
        log.warning("serving at most %d connections, not --max-connections %d: %d open files allowed "
                    "(hard limit %s), about %d needed; raise LimitNOFILE in the systemd unit (or ulimit -n)",
                    fits, max_connections, new_soft, "unlimited" if hard == resource.RLIM_INFINITY else hard,
                    fds_needed(max_connections))
    return fits


class Warnings:
    """At most one log line per kind per ``interval_s``; the others are counted into the next line."""

    def __init__(self, logger: logging.Logger, interval_s: float = WARN_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.interval_s, self.clock = logger, interval_s, clock
        self._last: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}

    def warn(self, kind: str, message: str) -> bool:
        """Log ``message`` (which must hold no byte a peer sent) unless ``kind`` was logged within the
        interval; True when logged."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._unsaid[kind] = self._unsaid.get(kind, 0) + 1
            return False
        unsaid = self._unsaid.pop(kind, 0)
        self._last[kind] = now
        self.logger.warning("%s%s", message, f" ({unsaid} more since the last such line)" if unsaid else "")
        return True


Early = Callable[[bytes, list[tuple[bytes, bytes]], bytes], Any]
"""``early(url, headers, body)``: told of each ``POST`` whose head and whole body came in one read, before
uvicorn builds its request cycle and task (the gateway admits and sends a forwarded request there:
:meth:`roost.gateway.app.Gateway.early`); what it returns (None: nothing) is left in the request's scope
under :data:`EARLY`."""
EARLY = "roost.early"
STREAM = "roost.stream"
"""The scope key of a request's :class:`ClientStream`."""


class ClientStream:
    """A request's chunked response body written straight to the client's connection, while that
    takes writes without waiting (what uvicorn's ASGI ``send`` does for a body message with
    ``more_body``, without its coroutine): see :mod:`roost.gateway.direct`."""

    __slots__ = ("cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self.cycle = cycle

    @property
    def writable(self) -> bool:
        """A chunk can be written now: the response's head went out chunked, the response is not
        complete, the client is connected and its buffer is not full."""
        c = self.cycle
        return bool(c.response_started and not c.response_complete and c.chunked_encoding and not c.disconnected
                    and not c.flow.write_paused and not c.transport.is_closing())

    def write(self, body: bytes) -> None:
        """``body`` as one chunk (when :attr:`writable`)."""
        self.cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))


class ConnectionBook:
    """The connections a server holds, overall and per client address, and its refusals; ``early`` is
    the server's :data:`Early` hook."""

    def __init__(self, limits: ConnectionLimits, *, max_connections: int | None = None,
                 on_refused: Callable[[str], None] | None = None, warnings: Warnings | None = None,
                 early: Early | None = None) -> None:
        self.limits = limits
        self.early = early
        self.max_connections = limits.max_connections if max_connections is None else max_connections
        self.on_refused = on_refused
        self.warnings = warnings or Warnings(log)
        self.total = 0
        self.per_client: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (counted as refused) when over a cap."""
        held = self.per_client.get(address, 0)
        if held >= self.limits.max_connections_per_client:
            self.refused("too_many_connections", "per_client_cap",
                         f"503 to new connections from {address or 'an unknown address'}: it holds "
                         f"{held} (--max-connections-per-client {self.limits.max_connections_per_client})")
            return False
        if self.total >= self.max_connections:
            self.refused("too_many_connections", "overall_cap",
                         f"503 to new connections: {self.total} open (--max-connections {self.max_connections})")
            return False
        self.per_client[address] = held + 1
        self.total += 1
        return True

    def release(self, address: str) -> None:
        held = self.per_client.get(address, 0) - 1
        if held > 0:
            self.per_client[address] = held
        else:
            self.per_client.pop(address, None)
        self.total = max(0, self.total - 1)

    def refused(self, reason: str | None, kind: str, message: str) -> None:
        """One refusal: counted under ``reason`` (the refused-requests metric; None: not a request) and
        logged as ``kind`` within the rate limit."""
        if reason is not None and self.on_refused is not None:
            self.on_refused(reason)
        self.warnings.warn(kind, message)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under the limits of its class's :attr:`book` (:func:`protocol_class`
    makes the class of a server)."""

    book: ClassVar[ConnectionBook]

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._address: str | None = None  # counted in the book under this address
        self._head_open = True  # between requests or in a request's head
        self._head_bytes = 0
        self._head_started = False  # a byte of the head arrived
        self._heads = 0  # requests whose message completed
        self._head_timer: asyncio.TimerHandle | None = None
        self._ignore = False  # refused or cut: nothing more is parsed
        self._deferred: list[bytes] | None = None  # a POST's body so far, its uvicorn cycle not built yet

    # --- connection ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if not self.book.admit(address):
            self._answer(503, "too_many_connections", "too many connections from this address or to the gateway; "
                         "retry shortly", kind="service_unavailable", extra=[(b"retry-after", b"1")])
            return
        self._address = address
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._address is not None:
            self.book.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._received(data)
        if self._deferred is not None:  # a POST whose body did not all come in this read: uvicorn's way
            if self._ignore:
                self._deferred = None
            else:
                self._undefer()

    def _received(self, data: bytes) -> None:
        if self._ignore:
            return
        self._unset_keepalive_if_required()
        limit = self.book.limits.max_header_bytes
        while data:
            if not self._head_open:  # a body
                if self._head_timer is None and self._answered():  # of a request already answered
                    self._arm_head_timer()
                self._feed(data)
                return
            if not self._head_started:
                self._head_started = True
                if self._head_timer is None:
                    self._arm_head_timer()  # a kept-alive connection: from the first byte
            part, data = data[:limit - self._head_bytes], data[limit - self._head_bytes:]
            self._head_bytes += len(part)
            heads = self._heads
            if part and not self._feed(part):
                return
            if data and self._head_open and self._heads == heads:  # the same head, over the limit
                self._refuse_head(431, "headers_too_large", "request line and headers over the gateway's limit "
                                  f"of {limit} bytes")
                return

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; False when the connection is done with (a malformed request: 400)."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.book.refused("bad_request", "malformed", "400 to a malformed HTTP request")
            self._ignore = True
            self._cancel_head_timer()
            self.send_400_response("Invalid HTTP request received.")
            return False
        except httptools.HttpParserUpgrade:
            pass  # no upgrades here (_should_upgrade_to_ws): the request was answered as plain HTTP
        return not self._ignore

    def shutdown(self) -> None:
        self._cancel_head_timer()
        super().shutdown()

    # --- parser callbacks ----------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        if self._head_timer is None:
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._cancel_head_timer()
        if self.book.early is not None and self._answered() and not self.pipeline \
                and self.parser.get_method() == b"POST":
            self._deferred = []  # uvicorn's cycle and task once the body is in (on_message_complete), or
            return  # at the end of this read (data_received)
        self._start_cycle()

    def _start_cycle(self) -> None:
        """uvicorn's part of a head's completion (the request cycle and its task), the cycle's
        :class:`ClientStream` in its scope."""
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.scope[STREAM] = ClientStream(self.cycle)  # type: ignore[literal-required]

    def on_body(self, body: bytes) -> None:
        if self._deferred is not None:
            self._deferred.append(body)
            return
        super().on_body(body)

    def _undefer(self, found: Any = None) -> None:
        """uvicorn's part of the head's completion (the request cycle and its task), and the body so far."""
        parts, self._deferred = self._deferred or [], None
        self._start_cycle()
        if found is not None and self.cycle is not None:
            self.cycle.scope[EARLY] = found  # type: ignore[literal-required]
        if parts:
            super().on_body(parts[0] if len(parts) == 1 else b"".join(parts))

    def on_message_complete(self) -> None:
        if self._deferred is not None:  # the whole request in one read: the early hook first
            body = b"".join(self._deferred)
            early = self.book.early
            found = None
            with contextlib.suppress(Exception):  # a failed hook leaves the request to uvicorn's way
                found = early(self.url, self.headers, body) if early is not None else None
            self._deferred = [body]
            self._undefer(found)
        drained = self._answered()  # the body of a request answered before it was all sent
        super().on_message_complete()
        self._heads += 1
        self._head_open, self._head_bytes, self._head_started = True, 0, False
        if drained:
            self._cancel_head_timer()
            if not self.transport.is_closing() and self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                    self.timeout_keep_alive_handler)

    def _should_upgrade_to_ws(self) -> bool:
        return False  # the gateway serves no WebSocket (and a switched protocol would leave the book)

    def _unsupported_upgrade_warning(self) -> None:
        pass  # a line per request a peer chooses to send

    # --- limits --------------------------------------------------------------------------------------

    def _answered(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.book.limits.header_timeout_s, self._head_deadline)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_deadline(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        timeout = self.book.limits.header_timeout_s
        if self._head_open and self._head_started:
            self._refuse_head(408, "request_timeout", f"request line and headers not received within {timeout:g} s")
            return
        if self._head_open:
            self.book.refused(None, "silent", f"closed a connection that sent nothing for {timeout:g} s")
        self._ignore = True
        self.transport.close()  # nothing asked (or the body of a request already answered, still trickling)

    def _refuse_head(self, status: int, code: str, message: str) -> None:
        """Answer the head being received with ``status`` and close; behind a response still being sent (a
        pipelined head), stop reading and close once that response is sent."""
        self.book.refused(code, code, f"{status} to a request: {message}")
        if not self._answered():
            self._ignore = True
            self.cycle.keep_alive = False
            self.flow.pause_reading()
            return
        self._answer(status, code, message)

    def _answer(self, status: int, code: str, message: str, *, kind: str = "invalid_request_error",
                extra: list[tuple[bytes, bytes]] | None = None) -> None:
        """Write an OpenAI-style JSON error with ``connection: close`` and close."""
        self._ignore = True
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        body = error_body(message, kind=kind, code=code)
        head = [STATUS_LINE[status]]
        for name, value in [*self.server_state.default_headers, (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(extra or []),
                            (b"connection", b"close")]:
            head += [name, b": ", value, b"\r\n"]
        self.transport.write(b"".join([*head, b"\r\n", body]))
        self.transport.close()


def protocol_class(book: ConnectionBook) -> type[LimitedHttpToolsProtocol]:
    """The protocol class of one server (``uvicorn.Config(http=...)``), counting in ``book``."""

    class ServerProtocol(LimitedHttpToolsProtocol):
        pass

    ServerProtocol.book = book
    return ServerProtocol

