"""HTTP/1.1 connections for streamed responses, every block of bytes stamped when it arrives.

A client that stamps a token when its coroutine gets to parse the chunk measures its own
scheduling too: when 256 streams deliver their last token in the same instant, the 256th is
stamped only after the other 255 were parsed. Here each block of bytes is stamped in the
protocol's ``data_received``, which asyncio runs for every readable socket right after ``epoll``
returns, and decoded right there: the HTTP/1.1 framing (status line, headers, ``chunked`` or
``Content-Length`` bodies) is undone in place and the body bytes go, with the block's arrival
time, to the :class:`Sink` of the request in flight. No coroutine wakes per block: the request's
owner waits on one future that the sink resolves. This is what keeps roost's client CPU per
streamed token below ``vllm bench serve``'s (``benchmarks/bench_client_overhead.py``); httpx and
httpcore cost a coroutine switch, an h11 event and two iterator layers per chunk.

Only the streamed chat request goes through here; the plain requests (``/health``,
``/v1/models``, ``/metrics``...) use httpx. :class:`ConnectionPool` keeps the keep-alive
connections to one server: one per concurrent stream, opened before a step is timed
(:meth:`ConnectionPool.preopen`) so that TTFT holds no TCP or TLS set-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from typing import Protocol

MAX_HEAD_BYTES = 65536
"""A response head (status line and headers) longer than this is not an HTTP server talking."""

KEEPALIVE_S = 2.0
"""Idle connections older than this are not reused: servers close idle ones (uvicorn after 5 s),
and a request written into a connection the server is closing is lost."""


class HttpError(Exception):
    """The server's bytes are not a well-formed HTTP/1.1 response."""


class ConnectFailed(Exception):
    """No connection to the server: refused, unreachable, timed out, or a failed TLS handshake."""


class Sink(Protocol):
    """What one request in flight receives from its connection."""

    def on_head(self, status: int, reason: str, headers: dict[bytes, bytes]) -> None:
        """The final (non-1xx) status line and headers (names lower-cased)."""

    def on_body(self, data: bytes, t: float) -> None:
        """Decoded body bytes, and the ``perf_counter`` time the block carrying them arrived."""

    def on_end(self, error: BaseException | None) -> None:
        """The response is complete (``None``), or it never will be: the connection was lost or
        the bytes were not HTTP (the reason). Called once."""


_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; at most one request in flight (no pipelining)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.sink: Sink | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = time.monotonic()
        self.on_idle: Callable[[Connection], None] | None = None  # a draining response's way back to the pool
        self.gone = False
        self.received = 0  # bytes of the current request's response received (any, parsed or not)
        self._state = _DONE
        self._buf = b""
        self._remaining = 0
        self._lost: asyncio.Future[None] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        self.received += len(data)
        sink = self.sink
        if sink is None:  # bytes nobody asked for: the connection cannot be trusted again
            self.reusable = False
            self.close()
            return
        if self._state == _CHUNK_SIZE and not self._buf:
            # The usual block of a stream: exactly one chunk, "<hex size>\r\n<data>\r\n".
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0  # a chunk extension, or not HTTP: the general parser decides
                if size > 0 and len(data) == eol + size + 4 and data.endswith(b"\r\n"):
                    sink.on_body(data[eol + 2 : -2], t)
                    return
        try:
            self._feed(data, t)
        except (HttpError, ValueError) as exc:
            self.reusable = False
            self._end(HttpError(f"malformed HTTP response: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        self._closed(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self._closed(exc)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    # -- requests ---------------------------------------------------------------------------

    def start(self, request: bytes, sink: Sink) -> None:
        """Write one request; its response goes to ``sink``. Raises ``ConnectionResetError`` if the
        connection was closed meanwhile (nothing was sent)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            self.closed = True
            raise ConnectionResetError("connection closed before the request was sent")
        assert self.sink is None
        self.sink = sink
        self._state = _HEAD
        self._buf = b""
        self.received = 0
        self.transport.write(request)

    @property
    def idle(self) -> bool:
        """No request in flight and the last response fully read."""
        return self.sink is None and self._state == _DONE

    def detach(self) -> None:
        """The request's owner is done with it (its response may still be draining)."""
        self.sink = _DRAIN if self._state != _DONE and not self.closed else None
        if self.sink is None:
            self.idle_since = time.monotonic()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    async def aclose(self) -> None:
        """Close and wait (briefly) until the transport let go of the socket."""
        if self.transport is None or self.gone:
            return
        self._lost = asyncio.get_running_loop().create_future()
        self.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._lost), 1.0)

    # -- parsing ----------------------------------------------------------------------------

    def _closed(self, exc: BaseException | None) -> None:
        self.closed = True
        self.reusable = False
        if self._state == _UNTIL_CLOSE:  # a body delimited by the end of the connection
            self._state = _DONE
            self._end(None)
        elif self._state != _DONE:
            self._end(exc or ConnectionResetError("connection closed by the server"))

    def _end(self, error: BaseException | None) -> None:
        sink, self.sink = self.sink, None
        if error is not None:
            self._state = _DONE
        if sink is _DRAIN:
            if error is None and self.reusable:
                self.idle_since = time.monotonic()
                callback, self.on_idle = self.on_idle, None
                if callback is not None:
                    callback(self)
            return
        if sink is not None:
            sink.on_end(error)

    def _feed(self, data: bytes, t: float) -> None:
        state = self._state
        buf = self._buf + data if self._buf else data
        self._buf = b""
        n = len(buf)
        pos = 0
        out: list[bytes] = []
        while pos < n:
            if state == _CHUNK_SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 1024:
                        raise HttpError("chunk size line too long")
                    break
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                if size < 0:
                    raise HttpError("negative chunk size")
                pos = eol + 2
                if size == 0:
                    state = _TRAILERS
                else:
                    self._remaining = size
                    state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                end = pos + self._remaining
                if end <= n:
                    out.append(buf[pos:end])
                    pos = end
                    self._remaining = 0
                    state = _CHUNK_CRLF
                else:
                    out.append(buf[pos:])
                    self._remaining -= n - pos
                    pos = n
            elif state == _CHUNK_CRLF:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise HttpError("chunk not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE
            elif state == _TRAILERS:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                line_empty = eol == pos
                pos = eol + 2
                if line_empty:
                    state = _DONE
            elif state == _LENGTH:
                end = min(n, pos + self._remaining)
                out.append(buf[pos:end])
                self._remaining -= end - pos
                pos = end
                if self._remaining == 0:
                    state = _DONE
            elif state == _UNTIL_CLOSE:
                out.append(buf[pos:] if pos else buf)
                pos = n
            elif state == _HEAD:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        raise HttpError("response head too long")
                    break
                state = self._head(buf[pos:end])
                pos = end + 4
            else:  # _DONE: bytes after the response
                self.reusable = False
                break
        if pos < n and state != _DONE:
            self._buf = buf[pos:]
        self._state = state
        sink = self.sink
        if out and sink is not None:
            sink.on_body(out[0] if len(out) == 1 else b"".join(out), t)
        if state == _DONE and self.sink is not None:
            self._end(None)

    def _head(self, head: bytes) -> int:
        """Parse a response head; the body state that follows it."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise HttpError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise HttpError(f"bad header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
            return _HEAD
        if parts[0] == b"HTTP/1.0" or b"close" in headers.get(b"connection", b"").lower():
            self.reusable = False
        assert self.sink is not None
        self.sink.on_head(status, parts[2].decode("latin-1") if len(parts) > 2 else "", headers)
        if status in (204, 304):
            return _DONE
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            return _CHUNK_SIZE
        if b"content-length" in headers:
            self._remaining = int(headers[b"content-length"])
            return _LENGTH if self._remaining > 0 else _DONE
        self.reusable = False
        return _UNTIL_CLOSE


class _Drain:
    """The sink of a response whose request's owner has gone: its bytes are read and dropped."""

    def on_head(self, status: int, reason: str, headers: dict[bytes, bytes]) -> None:
        pass

    def on_body(self, data: bytes, t: float) -> None:
        pass

    def on_end(self, error: BaseException | None) -> None:
        pass


_DRAIN = _Drain()


class ConnectionPool:
    """The keep-alive connections to one server, for streamed requests.

    One connection serves one request at a time; :meth:`acquire` hands out an idle one (opened
    less than :data:`KEEPALIVE_S` ago or used since) or opens a new one, :meth:`release` takes it
    back. There is no limit: concurrency is whatever the caller runs.
    """

    def __init__(
        self, host: str, port: int, *, ssl_context: ssl.SSLContext | None, connect_timeout_s: float,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()

    async def connect(self) -> Connection:
        """A new connection; :class:`ConnectFailed` says why there is none."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    Connection, self.host, self.port, ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                )
        except TimeoutError:
            raise ConnectFailed(f"connect timed out after {self.connect_timeout_s:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(str(exc) or type(exc).__name__) from None
        self._all.add(conn)
        return conn

    def _fresh(self, conn: Connection, now: float) -> bool:
        return conn.reusable and not conn.closed and conn.idle and now - conn.idle_since < self.keepalive_s

    def take_idle(self) -> Connection | None:
        """An idle connection that may be reused now (stale ones closed), or None; never waits."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if self._fresh(conn, now):
                return conn
            self._discard(conn)
        return None

    async def acquire(self) -> tuple[Connection, bool]:
        """A connection with no request in flight, and whether it was used before."""
        if (conn := self.take_idle()) is not None:
            return conn, True
        return await self.connect(), False

    def release(self, conn: Connection) -> None:
        """Take ``conn`` back once its request's owner is done with it."""
        conn.detach()
        if not conn.reusable or conn.closed:
            self._discard(conn)
        elif conn.idle:
            self._idle.append(conn)
        else:  # the response is still draining: reuse the connection once it has been read
            conn.on_idle = self._idle.append

    def _discard(self, conn: Connection) -> None:
        conn.close()
        self._all.discard(conn)

    async def preopen(self, n: int) -> None:
        """Have ``n`` fresh idle connections (stale ones closed). Connection failures are left
        to the requests to record."""
        now = time.monotonic()
        fresh = []
        for conn in self._idle:
            if self._fresh(conn, now):
                fresh.append(conn)
            else:
                self._discard(conn)
        self._idle = fresh
        missing = n - len(fresh)
        if missing <= 0:
            return
        opened = await asyncio.gather(*(self.connect() for _ in range(missing)), return_exceptions=True)
        self._idle.extend(c for c in opened if isinstance(c, Connection))

    def settle(self) -> None:
        """Close the connections still draining a response whose stream has ended."""
        for conn in list(self._all):
            if conn.sink is _DRAIN:
                self._discard(conn)

    async def aclose(self) -> None:
        conns, self._all, self._idle = list(self._all), set(), []
        await asyncio.gather(*(c.aclose() for c in conns))
