"""FAKE: a scripted OpenAI-compatible chat server for the accuracy tests and benchmark.

Named as a fake on purpose: the real vLLM CPU server serves a random-weight model, which cannot be
made to answer a known subset of questions correctly; the exact-score, per-category, McNemar and
fault tests need that. Everything else about it is real HTTP on loopback (``ThreadingHTTPServer``):
roost's client and lm-eval's talk to it exactly as to vLLM.

``script(body) -> Reply`` decides each answer from the request body (the question is in
``body["messages"][-1]["content"]``). ``GET /v1/models`` lists ``model`` with ``max_model_len``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = ""
    reasoning: str | None = None
    finish_reason: str = "stop"
    completion_tokens: int = 10
    prompt_tokens: int = 50
    status: int = 200
    raw: Any = None  # sent as the JSON body instead of a chat completion (a broken server)


class ScriptedServer:
    """FAKE chat server (see the module docstring); ``requests`` keeps every chat body received."""

    def __init__(self, script: Callable[[dict[str, Any]], Reply], *, model: str = "scripted",
                 max_model_len: int = 32768, api_key: str | None = None) -> None:
        self.script, self.model, self.max_model_len, self.api_key = script, model, max_model_len, api_key
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self._send(401, {"error": "Unauthorized"})
                    return False
                return True

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": server.model, "object": "model", "max_model_len": server.max_model_len}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self._authorized():
                    return
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, {"error": "not found"})
                    return
                with server._lock:
                    server.requests.append(body)
                reply = server.script(body)
                if reply.raw is not None or reply.status != 200:
                    self._send(reply.status, reply.raw if reply.raw is not None else {"error": {"message": "scripted"}})
                    return
                message: dict[str, Any] = {"role": "assistant", "content": reply.content}
                if reply.reasoning is not None:
                    message["reasoning"] = reply.reasoning
                self._send(200, {
                    "id": "chatcmpl-scripted", "object": "chat.completion", "model": server.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
                    "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                              "total_tokens": reply.prompt_tokens + reply.completion_tokens},
                })

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                """A client that hung up mid-answer (roost stopping a run) is not the server's error to print."""

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 256
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def question_of(body: dict[str, Any]) -> str:
    """The user message of a chat body."""
    return str(body["messages"][-1]["content"])
