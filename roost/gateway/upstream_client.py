"""The gateway's client of one upstream: :class:`~roost.vllm.client.VllmClient`, plus a request written
at once when a kept-alive connection is idle (:meth:`UpstreamClient.relay_now`).

``VllmClient.relay`` is a coroutine: the forwarding code awaits it, so its write waits for the task
that runs it. :meth:`~UpstreamClient.relay_now` writes the same request synchronously (from the
HTTP protocol's callback that completed the client's request, before any task runs) when the pool
holds an idle connection that may be reused, and says ``None`` otherwise: the caller then opens one
with ``relay``. The request bytes are the same (``relay_request``).
"""

from __future__ import annotations

from roost.vllm.client import VllmClient
from roost.vllm.relay import Relay

KEEPALIVE_S = 20.0
"""Idle upstream connections younger than this are reused (``VllmClient``'s pool: 2 s). A server that
closes an idle connection says so (vLLM's uvicorn after 5 s): the connection is then closed here and
never reused; a close that crosses the request's write is the one case ``Forward`` sends again (not a
byte came back). A burst of requests after a few seconds' pause then finds its connections open,
instead of opening one each before its request can go."""


class UpstreamClient(VllmClient):
    """A :class:`VllmClient` that keeps idle streaming connections :data:`KEEPALIVE_S` and can write a
    request synchronously."""

    def __init__(self, base_url: str, *, api_key: str | None, connect_timeout_s: float, http_connections: int) -> None:
        super().__init__(base_url, api_key=api_key, connect_timeout_s=connect_timeout_s,
                         http_connections=http_connections, keepalive_s=KEEPALIVE_S)

    def relay_now(self, path: str, body: bytes, request_id: str) -> Relay | None:
        """The request written on an idle kept-alive connection (a reused one), or None when there is
        none: :meth:`relay` then."""
        data = self.relay_request(path, body, {"X-Request-Id": request_id} if request_id else None)
        while (conn := self._streams.take_idle()) is not None:
            if (relay := self.start_on(conn, data)) is not None:
                return relay
        return None
