"""A FAKE OpenAI-compatible chat server for the vision probe's tests (test-only; not vLLM).

Used where a real vLLM CPU server with a vision-language model is not the subject (the probe's
error handling): it answers ``POST /v1/chat/completions`` like vLLM does, and checks what a
vision-language server would: an API key, a user message with an ``image_url`` part whose URL is a
``data:image/png;base64,`` URL that decodes (with Pillow, an independent PNG decoder) to an image.
A request without a valid image gets vLLM's 400 error shape; ``mode`` makes it fail on purpose:

- ``"ok"``: a 200 chat completion;
- ``"reject_images"``: 400 as vLLM answers a text-only model (``... is not a multimodal model``);
- ``"server_error"``: 500;
- ``"slow"``: answers after ``delay_s``.

Every request body is kept in ``requests``.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from PIL import Image

Mode = Literal["ok", "reject_images", "server_error", "slow"]


def check_image_request(body: Any) -> str:
    """"" when ``body`` carries a decodable PNG data URL in an image_url part, else why not."""
    try:
        parts = body["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
    except (KeyError, TypeError, IndexError, AttributeError):
        return "no user message with content parts"
    if len(urls) != 1:
        return f"{len(urls)} image_url parts"
    prefix = "data:image/png;base64,"
    if not urls[0].startswith(prefix):
        return "not a PNG data URL"
    try:
        raw = base64.b64decode(urls[0][len(prefix):], validate=True)
        with Image.open(io.BytesIO(raw)) as img:
            img.load()  # decompresses every row: a bad CRC or a short IDAT fails here
            if img.format != "PNG" or img.size[0] < 28 or img.size[1] < 28:
                return f"unusable image {img.format} {img.size}"
    except (binascii.Error, OSError, SyntaxError) as exc:
        return f"image does not decode: {exc}"
    return ""


class FakeVisionServer:
    """The fake on 127.0.0.1 (a free port), in a thread; ``close()`` stops it."""

    def __init__(self, *, api_key: str = "", mode: Mode = "ok", delay_s: float = 0.0) -> None:
        self.api_key, self.mode, self.delay_s = api_key, mode, delay_s
        self.requests: list[Any] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                kind = "BadRequestError" if status == 400 else "InternalServerError"
                self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
                fake.requests.append(body)
                if fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    self._send(401, {"error": "Unauthorized"})
                    return
                if self.path != "/v1/chat/completions":
                    self._error(404, "Not Found")
                    return
                if fake.mode == "server_error":
                    self._error(500, "EngineCore encountered an issue. See stack trace (above) for the root cause.")
                    return
                if fake.mode == "reject_images":
                    self._error(400, f"{body.get('model')} is not a multimodal model")
                    return
                why = check_image_request(body)
                if why:
                    self._error(400, why)
                    return
                if fake.mode == "slow":
                    time.sleep(fake.delay_s)
                self._send(200, {
                    "id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "gradient"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32},
                })

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
