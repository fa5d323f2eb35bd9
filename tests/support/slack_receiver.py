"""A real HTTP server on loopback that answers the Slack endpoints roost uses, and records every request.

It is what slack-sdk talks to in the tests (``WebClient(base_url=receiver.api_url)``): real sockets, real
HTTP, the SDK's real encoding. It implements

    POST /api/chat.postMessage              JSON body -> {"ok": true, "channel": ..., "ts": ...}
    POST /api/files.getUploadURLExternal    form body -> {"ok": true, "upload_url": <this server>/upload/F.., "file_id"}
    POST /upload/<file_id>                  the file bytes -> "OK - <n>"
    POST /api/files.completeUploadExternal  form body -> {"ok": true, "files": [...]}
    POST /services/<T>/<B>/<secret>         incoming webhook, JSON body -> "ok"

and can be told to answer the next requests to an endpoint with a fault (429 with Retry-After, 500, ...).
A bot token must match ``token`` or the API answers ``invalid_auth`` like Slack does.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def endpoint(self) -> str:
        if self.path.startswith("/api/"):
            return self.path.removeprefix("/api/").split("?")[0]
        if self.path.startswith("/upload/"):
            return "upload"
        if self.path.startswith("/services/"):
            return "webhook"
        return self.path

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass
class Fault:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""


class SlackReceiver:
    def __init__(self, token: str = "xoxb-test-0000-SECRETTOKEN", webhook_secret: str = "XXXXSECRETHOOKXXXX") -> None:
        self.token = token
        self.webhook_path = f"/services/T0TEST/B0TEST/{webhook_secret}"
        self.requests: list[Recorded] = []
        self.uploads: dict[str, bytes] = {}
        self._faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        self._files = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                rec = Recorded("POST", self.path, {k: v for k, v in self.headers.items()}, body, time.monotonic())
                with receiver._lock:
                    receiver.requests.append(rec)
                    queue = receiver._faults.get(rec.endpoint) or []
                    fault = queue.pop(0) if queue else None
                if fault is not None:
                    self._reply(fault.status, fault.body or json.dumps({"ok": False, "error": "fault"}), fault.headers)
                    return
                status, payload, ctype = receiver.answer(rec)
                self._reply(status, payload, {"Content-Type": ctype})

            def _reply(self, status: int, payload: str, headers: dict[str, str]) -> None:
                data = payload.encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Type" not in headers:
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base}/api/"

    @property
    def webhook_url(self) -> str:
        return self.base + self.webhook_path

    def fail_next(self, endpoint: str, *faults: Fault) -> None:
        """Answer the next requests to ``endpoint`` (e.g. ``chat.postMessage``, ``upload``, ``webhook``) with these."""
        with self._lock:
            self._faults.setdefault(endpoint, []).extend(faults)

    def calls(self, endpoint: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.endpoint == endpoint]

    def answer(self, rec: Recorded) -> tuple[int, str, str]:
        j = "application/json; charset=utf-8"
        if rec.endpoint == "webhook":
            if rec.path != self.webhook_path:
                return 404, "no_service", "text/plain"
            return 200, "ok", "text/plain"
        if rec.endpoint == "upload":
            self.uploads[rec.path.removeprefix("/upload/")] = rec.body
            return 200, f"OK - {len(rec.body)}", "text/plain"
        if rec.headers.get("Authorization") != f"Bearer {self.token}":
            return 200, json.dumps({"ok": False, "error": "invalid_auth"}), j
        if rec.endpoint == "chat.postMessage":
            payload = rec.json()
            channel = payload["channel"] if str(payload.get("channel", "")).startswith("C") else "C0RESOLVED"
            return 200, json.dumps({"ok": True, "channel": channel, "ts": "1767225600.000100",
                                    "message": {"text": payload.get("text"), "blocks": payload.get("blocks")}}), j
        if rec.endpoint == "files.getUploadURLExternal":
            with self._lock:
                self._files += 1
                file_id = f"F0TEST{self._files:04d}"
            return 200, json.dumps({"ok": True, "upload_url": f"{self.base}/upload/{file_id}", "file_id": file_id}), j
        if rec.endpoint == "files.completeUploadExternal":
            files = json.loads(rec.form()["files"])
            return 200, json.dumps({"ok": True, "files": [{"id": f["id"], "title": f.get("title")} for f in files]}), j
        return 200, json.dumps({"ok": False, "error": "unknown_method"}), j

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
