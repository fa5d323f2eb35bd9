"""Arrival timestamps taken where the bytes arrive: an httpcore network backend on asyncio protocols.

A client that stamps a token when its coroutine gets to parse the chunk measures its own
scheduling too: when 256 streams deliver their last token in the same instant, the 256th is
stamped only after the other 255 were parsed. Here every block of bytes is stamped in the
protocol's ``data_received``, which asyncio runs for every readable socket right after ``epoll``
returns and before any coroutine resumes; ``TimedStream.arrival`` is the stamp of the block the
last ``read`` returned, so a parsed SSE event carries the time its last byte arrived, however long
the event loop then took to get to it. The response exposes its stream as
``response.extensions["network_stream"]`` (httpcore, HTTP/1.1).

It is a complete httpcore backend (TCP, Unix sockets, TLS via ``loop.start_tls``, time-outs,
flow control) and cheap: ``is_readable`` (asked by the pool about every idle connection, every
time a request starts or ends) needs no system call.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.blocks: deque[tuple[float, bytes]] = deque()
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drain_waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.blocks.append((time.perf_counter(), data))
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        self.paused = False
        self._wake_drain()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake_drain()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _wake_drain(self) -> None:
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)


async def _wait(fut: asyncio.Future[None], timeout: float | None, exc: type[Exception]) -> None:
    try:
        if timeout is None:
            await fut
        else:
            await asyncio.wait_for(fut, timeout)
    except TimeoutError:
        raise exc(f"timed out after {timeout} s") from None


class TimedStream(httpcore.AsyncNetworkStream):
    """A connection whose ``arrival`` is the ``perf_counter`` time the bytes last read arrived."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.arrival = 0.0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        while not p.blocks:
            if p.eof:
                if p.error is not None:
                    raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
                return b""
            p.waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.waiter, timeout, httpcore.ReadTimeout)
            finally:
                p.waiter = None
        t, data = p.blocks.popleft()
        if len(data) > max_bytes:
            p.blocks.appendleft((t, data[max_bytes:]))
            data = data[:max_bytes]
        self.arrival = t
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if self._transport.is_closing() or (p.eof and p.error is not None):
            raise httpcore.WriteError("connection closed")
        self._transport.write(buffer)
        while p.paused:
            p.drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.drain_waiter, timeout, httpcore.WriteTimeout)
            finally:
                p.drain_waiter = None

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(self._transport, self._protocol, ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout(f"TLS handshake timed out after {timeout} s") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from None
        if tls is None:
            raise httpcore.ConnectError("TLS handshake failed")
        return TimedStream(tls, self._protocol)  # type: ignore[arg-type]

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle connection with bytes or EOF waiting: the server closed it
            return bool(self._protocol.blocks) or self._protocol.eof
        key = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}
        return self._transport.get_extra_info(key[info]) if info in key else None


class TimedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, on asyncio protocols that stamp every block of bytes received."""

    async def _connect(self, factory: Any, timeout: float | None, socket_options: Iterable[Any] | None) -> TimedStream:
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await factory()
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connect timed out after {timeout} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            for opt in socket_options or ():
                sock.setsockopt(*opt)
        return TimedStream(transport, protocol)

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None

        async def factory() -> tuple[asyncio.BaseTransport, _Protocol]:
            return await loop.create_connection(_Protocol, host, port, local_addr=local)

        stream = await self._connect(factory, timeout, socket_options)
        sock = stream.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return stream

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()

        async def factory() -> tuple[asyncio.BaseTransport, _Protocol]:
            return await loop.create_unix_connection(_Protocol, path)

        return await self._connect(factory, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def timed_transport(*, connections: int, ssl_context: ssl.SSLContext | None) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose connections are :class:`TimedStream` s.

    httpx 0.28 builds its httpcore pool without a way to choose the network backend; the pool is
    replaced here (``_pool``), which ``tests/roost/bench/test_bench_timed_net.py`` checks still works.
    """
    transport = httpx.AsyncHTTPTransport(verify=False, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=5.0,
        network_backend=TimedBackend(),
    )
    return transport


