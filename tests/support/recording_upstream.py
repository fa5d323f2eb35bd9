"""A recording upstream: a fake OpenAI-compatible backend for the gateway's attack suite, for the faults
a real vLLM cannot be made to produce (a traceback in a 500, an error event echoing the key, garbage
on a kept-alive connection, a stream cut by the server, a stream where none was asked, an answer
without usage). It is a fake and named so; what depends on vLLM itself is tested against vLLM.

Raw sockets, HTTP/1.1 with keep-alive, one thread per connection. Every request is recorded
(method, path, headers, body). What a chat completion answers is chosen by its last message's
``content`` (a mode name, :data:`MODES`); any other content gets an ordinary answer with usage.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from dataclasses import dataclass
from typing import Any

MODEL = "rec"
MODES = ("sse-anyway", "json-anyway", "traceback-500", "stream-error-echo", "garbage", "cut", "no-usage", "ok")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(text: str, finish: str | None = None) -> bytes:
    return _event({"id": "r", "object": "chat.completion.chunk", "model": MODEL,
                   "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


class RecordingUpstream:
    """The fake backend (see the module docstring); ``secret`` is what its errors echo."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def posts(self, path: str, mode: str | None = None) -> list[Recorded]:
        """The recorded POSTs to ``path`` (whose last message is ``mode``, when given)."""
        with self._lock:
            found = [r for r in self.requests if r.method == "POST" and r.path == path]
        return [r for r in found if mode is None or _mode(r.body) == mode]

    # --- the server ---------------------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(30)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                length = int(headers.get("content-length", "0"))
                while len(buf) < length:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                body, buf = buf[:length], buf[length:]
                with self._lock:
                    self.requests.append(Recorded(method, path, headers, body))
                if not self._answer(sock, method, path, body):
                    return
        except OSError:
            return
        finally:
            sock.close()

    def _send(self, sock: socket.socket, status: int, body: bytes, content_type: str = "application/json") -> bool:
        sock.sendall(f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
                     .encode() + body)
        return True

    def _chunked(self, sock: socket.socket, parts: list[bytes], *, end: bool = True) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for p in parts:
            sock.sendall(f"{len(p):x}\r\n".encode() + p + b"\r\n")
        if end:
            sock.sendall(b"0\r\n\r\n")

    def _answer(self, sock: socket.socket, method: str, path: str, body: bytes) -> bool:
        """Answer one request; False: the connection is to be closed."""
        if method == "GET" and path == "/v1/models":
            return self._send(sock, 200, json.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "root": "/srv/models/rec-weights", "parent": None, "max_model_len": 4096,
                 "permission": [{"id": "modelperm-1", "organization": "*"}]}]})
                              .encode())
        if path == "/tokenize":
            req = json.loads(body)
            text = req.get("prompt") or json.dumps(req.get("messages"))
            return self._send(sock, 200, json.dumps({"count": len(str(text).split())}).encode())
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._send(sock, 404, b'{"detail": "Not Found"}')
        mode = _mode(body)
        req = json.loads(body)
        key = self.secret
        if mode == "sse-anyway":  # a stream, whatever the request said
            self._chunked(sock, [_chunk("one"), _chunk(" two"), _chunk(" three", "stop"), b"data: [DONE]\n\n"])
            return True
        if mode == "traceback-500":
            text = (f"Traceback (most recent call last):\n  File \"/opt/vllm/lib/python3.12/site-packages/vllm/"
                    f"engine.py\", line 42, in generate\nRuntimeError: backend {self.base_url} with key {key} "
                    "failed\n").encode()
            return self._send(sock, 500, text, "text/plain")
        if mode == "stream-error-echo":
            import base64

            forms = f"{key} {base64.b64encode(key.encode()).decode()} {base64.b64encode(f'x:{key}'.encode()).decode()}"
            self._chunked(sock, [_chunk("hi"), _event({"error": {"message": f"Authorization Bearer {forms} at "
                                                                             f"{self.base_url}", "type": "x",
                                                                 "code": 400}}), b"data: [DONE]\n\n"])
            return True
        if mode == "garbage":
            sock.sendall(b"HTXP/9.9 2OO NOPE\r\n\x00\x01garbage\r\n\r\n")
            return False
        if mode == "cut":
            self._chunked(sock, [_chunk("a"), _chunk(" b")], end=False)
            return False
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        answer: dict[str, Any] = {"id": "r", "object": "chat.completion", "model": MODEL, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello there friend"}, "finish_reason": "stop"}]}
        if mode != "no-usage":
            answer["usage"] = usage
        if req.get("stream") is True and mode != "json-anyway":
            parts = [_chunk("hello"), _chunk(" there", "stop")]
            if mode != "no-usage":
                parts.append(_event({"id": "r", "choices": [], "usage": usage}))
            self._chunked(sock, [*parts, b"data: [DONE]\n\n"])
            return True
        return self._send(sock, 200, json.dumps(answer).encode())


def _mode(body: bytes) -> str | None:
    try:
        messages = json.loads(body).get("messages")
        content = messages[-1].get("content") if isinstance(messages, list) and messages else None
    except (ValueError, AttributeError):
        return None
    return content if content in MODES else None
