"""Fake servers on loopback for the hostile-input corpus (tests/hostile): a server answering what no
real vLLM, Hub or Slack would, which is the point. Each one is named as the fake it is.

- :class:`HostileOpenAI` — an "OpenAI-compatible server" whose answers depend on the first path
  segment of the base URL (``http://127.0.0.1:PORT/<mode>``): ``/v1/models`` returning
  ``{"data": null}``, a list, a truncated body, 8 MB of JSON, wrong types; chat completions that fail
  with a body echoing every request header (the Authorization header with it), that always fail,
  that stream garbage, that return a 200 without a stream.
- :class:`SilentServer` — accepts connections and never writes a byte (a hung server or Hub).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

MODEL = "m"
OK_MODELS = {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096}]}

# /v1/models answers per mode (bytes as sent); a mode absent here answers OK_MODELS
MODELS: dict[str, bytes] = {
    "models-null": b'{"data": null}',
    "models-list": b"[]",
    "models-string": b'"models"',
    "models-truncated": b'{"data": [{"id": "m"',
    "models-not-json": b"<html>hello</html>",
    "models-id-int": b'{"data": [{"id": 5}]}',
    "models-item-null": b'{"data": [null]}',
    "models-len-str": b'{"data": [{"id": "m", "max_model_len": "big"}]}',
    "models-len-neg": b'{"data": [{"id": "m", "max_model_len": -5}]}',
    "models-len-huge": b'{"data": [{"id": "m", "max_model_len": 1' + b"0" * 400 + b"}]}",
    "models-deep": b'{"data": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    "models-huge": b'{"data": [' + b",".join([b'{"id": "x%d"}' % i for i in range(400_000)]) + b"]}",
}


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers a whole body in one call (:meth:`send_body`)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_body(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:  # clients hang up early: fine
        pass


class HostileOpenAI:
    """A fake OpenAI-compatible server: what each mode answers is in this module's docstring."""

    def __init__(self) -> None:
        self._server = _Quiet(("127.0.0.1", 0), _handler(self))
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}"

    def __enter__(self) -> HostileOpenAI:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()


def _chat(mode: str, headers: dict[str, str], send: Callable[[int, str, bytes], None], stream: Callable[[list[bytes]], None]) -> None:
    if mode == "echo-headers":
        send(400, "application/json", json.dumps({"error": {"message": f"bad request; you sent {headers}"}}).encode())
    elif mode == "echo-headers-500":
        send(500, "text/plain", ("internal error while handling " + repr(headers)).encode())
    elif mode == "always-500":
        send(500, "application/json", b'{"error": {"message": "engine dead"}}')
    elif mode == "always-429":
        send(429, "application/json", b'{"error": {"message": "slow down"}}')
    elif mode == "no-stream":
        send(200, "application/json", b'{"choices": [{"message": {"content": "hi"}}]}')
    elif mode == "garbage-stream":
        stream([b"data: {not json\n\n", b"data: [1,2,3]\n\n", b"\xff\xfe\n\n", b"data: [DONE]\n\n"])
    elif mode == "empty-stream":
        stream([b"data: [DONE]\n\n"])
    elif mode == "error-in-stream":
        stream([b'data: {"error": {"message": "oops ' + headers.get("Authorization", "").encode() + b'"}}\n\n'])
    else:
        send(404, "application/json", b'{"error": {"message": "no such mode"}}')


def _handler(owner: HostileOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_body(status, body, ctype)

        def _stream(self, chunks: list[bytes]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for c in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
            self.wfile.write(b"0\r\n\r\n")

        def _mode(self) -> tuple[str, str]:
            mode, _, rest = self.path.lstrip("/").partition("/")
            return mode, "/" + rest

        def do_GET(self) -> None:
            mode, rest = self._mode()
            if rest.startswith("/v1/models"):
                body = MODELS.get(mode)
                self._send(200, "application/json", body if body is not None else json.dumps(OK_MODELS).encode())
            elif rest.startswith("/health") or rest.startswith("/metrics"):
                self._send(200, "text/plain", b"")
            else:
                self._send(404, "application/json", b"{}")

        def do_POST(self) -> None:
            mode, rest = self._mode()
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            if rest.startswith("/v1/chat/completions") or rest.startswith("/v1/completions"):
                _chat(mode, dict(self.headers.items()), self._send, self._stream)
            else:
                self._send(404, "application/json", b"{}")

    return Handler


class SilentServer:
    """A fake server that accepts TCP connections and never sends a byte (nor closes them)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self._held:
            c.close()
        self._sock.close()
