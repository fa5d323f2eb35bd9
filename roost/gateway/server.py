"""Running the gateway: bind the port (a UserError when it is taken), start uvicorn on uvloop and
httptools under the connection limits (``connections``), say where it listens, stop cleanly on
SIGTERM/SIGINT (queued usage rows are committed)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys

import uvicorn

from roost.errors import UserError
from roost.gateway.app import Gateway
from roost.gateway.config import GatewayConfig
from roost.gateway.connections import ConnectionBook, ConnectionLimits, protocol_class, raise_fd_limit
from roost.gateway.db import GatewayDB
from roost.gateway.routing import Router


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == 98:
            raise UserError(f"--port {port}: already in use on {host}; stop what listens there or pass another --port") from None
        raise UserError(f"--host {host}: cannot listen there ({exc.strerror})") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def serve(gw: Gateway, host: str, port: int, *, access_log: bool = True,
          limits: ConnectionLimits | None = None) -> None:
    """Serve ``gw`` on ``host:port`` under ``limits`` (default :class:`ConnectionLimits`) until SIGTERM or
    SIGINT."""
    limits = limits or ConnectionLimits()
    sock = bind(host, port)
    logger = logging.getLogger("roost.gateway")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO if access_log else logging.WARNING)
    logger.propagate = False
    book = ConnectionBook(limits, max_connections=raise_fd_limit(limits.max_connections),
                          on_refused=lambda reason: gw.metrics.refused.labels(reason).inc(), early=gw.early)
    # uvicorn types timeout_keep_alive as int; it is handed to loop.call_later, which takes any seconds
    config = uvicorn.Config(gw.app, lifespan="on", http=protocol_class(book), ws="none", loop="none",
                            interface="asgi3", access_log=False, log_level="warning",
                            timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
                            timeout_graceful_shutdown=10, server_header=False)
    server = uvicorn.Server(config)

    async def main() -> None:
        await gw.db.connect()  # a database that cannot be opened is one line, before uvicorn starts
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            bound = sock.getsockname()
            upstreams = len(gw.router.upstreams)
            print(f"roost gateway: listening on http://{host}:{bound[1]} ({upstreams} backend(s), "
                  f"{len(gw.router.models())} model(s), usage in {gw.db.display_url})", file=sys.stderr, flush=True)
        await task

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:  # pragma: no cover - uvloop is a dependency
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    if not server.started:
        raise UserError("the gateway did not start (see the lines above)")


def build(upstream_urls: list[str], db_url: str, upstream_key: str | None, config: GatewayConfig, *,
          poll_interval_s: float = 5.0, use_registry: bool = True) -> Gateway:
    router = Router(upstream_urls, upstream_key, poll_interval_s=poll_interval_s, use_registry=use_registry,
                    connect_timeout_s=config.connect_timeout_s)
    return Gateway(GatewayDB(db_url), router, config)
