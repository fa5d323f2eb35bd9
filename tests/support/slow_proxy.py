"""A loopback TCP proxy in front of an HTTP server that delays every streamed chunk: the server slowed
down on purpose, to plant a real regression.

Bytes from the client go to the server unchanged. Bytes from the server are cut after every
server-sent-event boundary (a blank line, ``\\n\\n``) and each piece is sent ``delay_s`` after the one
before, so a streamed chat completion arrives one event per ``delay_s`` at the most: decode looks that
much slower to the client, exactly as if the server generated more slowly. The bytes themselves (HTTP
framing included) are forwarded unchanged and in order.

    with SlowProxy("127.0.0.1", 8000, delay_s=0.02) as proxy:
        run_benchmark(proxy.base_url, ...)
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

EVENT_END = b"\n\n"


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete events at the start of ``buffer`` (each with its ``\\n\\n``) and the rest."""
    pieces = []
    while (i := buffer.find(EVENT_END)) >= 0:
        pieces.append(buffer[: i + len(EVENT_END)])
        buffer = buffer[i + len(EVENT_END):]
    return pieces, buffer


class SlowProxy:
    def __init__(self, upstream_host: str, upstream_port: int, delay_s: float) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = delay_s
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, slow: bool) -> None:
        pending = b""
        last = 0.0
        try:
            while data := src.recv(65536):
                if not slow:
                    dst.sendall(data)
                    continue
                pieces, pending = split_events(pending + data)
                for piece in pieces:
                    wait = last + self.delay_s - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    dst.sendall(piece)
                    last = time.monotonic()
                if pending and not pieces and not pending.startswith(b"data:"):
                    dst.sendall(pending)  # not an event stream (headers, a JSON body): no delay
                    pending = b""
            if pending:
                dst.sendall(pending)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SlowProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
