"""Small network helpers: free loopback ports, port-in-use checks, an answer read within a size and a time."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable

from roost.errors import UserError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
        return False


def require_free_port(port: int, host: str = "127.0.0.1", what: str = "vLLM") -> int:
    """``port`` if it is free, else a UserError that says who wanted it and what to do."""
    if port_in_use(port, host):
        raise UserError(f"port {port} on {host} is already in use; stop what listens there or pass another --port for {what}")
    return port


class ReadCut(Exception):
    """An answer read past its byte limit (``too_big``) or its deadline (not ``too_big``)."""

    def __init__(self, too_big: bool) -> None:
        super().__init__("too big" if too_big else "too slow")
        self.too_big = too_big


def read_capped(chunks: Iterable[bytes], limit: int, deadline: float) -> bytes:
    """The answer's bytes as they arrive, at most ``limit`` of them and by ``deadline`` (``time.monotonic``)
    in all, not per read: a peer sending slowly forever is cut too. :class:`ReadCut` otherwise."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise ReadCut(too_big=True)
        if time.monotonic() > deadline:
            raise ReadCut(too_big=False)
    return bytes(body)
