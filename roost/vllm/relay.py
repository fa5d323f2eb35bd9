"""A forwarded request's response, handed on as it arrives (the metering gateway's upstream).

:class:`Relay` is the :class:`~roost.vllm.timed_net.Sink` of one request on one of
:class:`~roost.vllm.client.VllmClient`'s keep-alive connections (the same HTTP/1.1 framing the
benchmark's streams use, undone in ``data_received``): the status and headers once, then the body
blocks, queued until the forwarding coroutine takes them (several queued blocks come out as one).
Reading from the backend pauses while more than :data:`HIGH_WATER` bytes wait for a slow client,
so a client that does not read cannot make the gateway buffer a whole answer.
"""

from __future__ import annotations

import asyncio
from collections import deque

from roost.vllm.timed_net import Connection, HttpError

HIGH_WATER = 1 << 20
"""Body bytes queued for the client before reading from the backend pauses."""


class Relay:
    """One response in flight (see the module docstring)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        loop = asyncio.get_running_loop()
        self._head: asyncio.Future[int] = loop.create_future()
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.t_first: float | None = None  # perf_counter of the first body block's arrival
        self._blocks: deque[bytes] = deque()
        self._queued = 0
        self._wake: asyncio.Future[None] | None = None
        self.ended = False
        self.error: BaseException | None = None
        self._paused = False

    # --- Sink (called from the connection's data_received) --------------------------------------

    def on_head(self, status: int, reason: str, headers: dict[bytes, bytes]) -> None:
        self.status, self.headers = status, headers
        if not self._head.done():
            self._head.set_result(status)

    def on_body(self, data: bytes, t: float) -> None:
        if self.t_first is None:
            self.t_first = t
        self._blocks.append(data)
        self._queued += len(data)
        if self._queued > HIGH_WATER and not self._paused and self.conn.transport is not None:
            self.conn.transport.pause_reading()
            self._paused = True
        self._notify()

    def on_end(self, error: BaseException | None) -> None:
        self.ended, self.error = True, error
        if not self._head.done():
            self._head.set_exception(error or HttpError("the response ended before its status line"))
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # --- the forwarding side ------------------------------------------------------------------

    async def head(self) -> int:
        """The response's status, once its head has arrived (raises what ended it otherwise)."""
        return await self._head

    async def read(self) -> bytes | None:
        """The body bytes that arrived since the last call (waiting for some), or None at the end of
        a complete response. Raises what cut it otherwise."""
        while not self._blocks:
            if self.ended:
                if self.error is not None:
                    raise self.error
                return None
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
            self._wake = None
        data = self._blocks[0] if len(self._blocks) == 1 else b"".join(self._blocks)
        self._blocks.clear()
        self._queued = 0
        if self._paused and self.conn.transport is not None and not self.conn.closed:
            self.conn.transport.resume_reading()
            self._paused = False
        return data

    @property
    def complete(self) -> bool:
        return self.ended and self.error is None
