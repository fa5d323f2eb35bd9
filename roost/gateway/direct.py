"""A stream's blocks handed to the client as they arrive, without waking the forwarding task.

A streamed answer's block goes, by default, from the upstream connection's ``data_received`` into
its :class:`~roost.vllm.relay.Relay`'s queue, then a loop pass later to the forwarding task, which
meters it and sends it through ASGI. :class:`DirectSink` sits between the connection and the relay
and, while the task waits for a block with nothing queued and the client's connection takes writes
without waiting (:class:`~roost.gateway.connections.ClientStream`), hands the block to the task's
``hook`` right there: metered and written to the client in the same callback. Anything else (the
client's buffer full, the client gone, a block queued before) takes the queue, so the blocks reach
the client in order and a client that does not read is still cut by the forwarding task's watchdog.
"""

from __future__ import annotations

from collections.abc import Callable

from roost.vllm.relay import Relay


class DirectSink:
    """The :class:`~roost.vllm.timed_net.Sink` of one streamed request: ``relay``'s, with blocks handed to
    ``hook`` while :attr:`parked` (the task waits in ``relay.read()``) and nothing is queued. ``hook``
    returns False when it cannot take the block now (then it is queued); ``arrived`` is told each
    block's arrival (the upstream silence deadline)."""

    def __init__(self, relay: Relay, hook: Callable[[bytes, float], bool]) -> None:
        self.relay, self.hook = relay, hook
        self.parked = False  # the forwarding task waits in relay.read()
        self.queued = False  # a block went to the relay's queue since the task last read
        self.last = 0.0  # perf_counter of the last block's arrival
        self.error: BaseException | None = None  # what the hook raised (the task raises it)

    def install(self) -> bool:
        """Take the relay's place on its connection (while its request is in flight); False when it
        cannot (the response is over)."""
        conn = self.relay.conn
        if conn.sink is not self.relay:
            return False
        conn.sink = self
        return True

    def on_head(self, status: int, reason: str, headers: dict[bytes, bytes]) -> None:
        self.relay.on_head(status, reason, headers)

    def on_body(self, data: bytes, t: float) -> None:
        self.last = t
        if self.parked and not self.queued and self.error is None:
            if self.relay.t_first is None:
                self.relay.t_first = t
            try:
                if self.hook(data, t):
                    return
            except Exception as exc:  # a bug: the task raises it (an error event, the row says so)
                self.error = exc
                self.relay.on_body(b"", t)  # wakes the task
                return
        self.queued = True
        self.relay.on_body(data, t)

    def on_end(self, error: BaseException | None) -> None:
        self.relay.on_end(error)

    async def read(self) -> bytes | None:
        """``relay.read()``, parked meanwhile (blocks may go to the hook)."""
        self.parked = True
        try:
            block = await self.relay.read()
        finally:
            self.parked = False
        self.queued = False
        if self.error is not None:
            raise self.error
        return block
