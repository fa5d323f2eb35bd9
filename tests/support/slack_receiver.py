"""A real HTTP server on loopback that answers the Slack endpoints roost uses, and records every request.

It is what slack-sdk talks to in the tests (``WebClient(base_url=receiver.api_url)``): real sockets, real
HTTP, the SDK's real encoding. It implements

    POST /api/chat.postMessage              JSON body -> {"ok": true, "channel": ..., "ts": ...}
    POST /api/files.getUploadURLExternal    form body -> {"ok": true, "upload_url": <this server>/upload/F.., "file_id"}
    POST /upload/<file_id>                  the file bytes -> "OK - <n>"
    POST /api/files.completeUploadExternal  form body -> {"ok": true, "files": [...]}
    POST /services/<T>/<B>/<secret>         incoming webhook, JSON body -> "ok"

and can be told to answer the next requests to an endpoint with a fault (429 with Retry-After, 500, ...), or
to hang: read the request and never answer it (``Fault(hang=True)``: the connection stays open, silent, until
the receiver is closed), as a Slack that accepted a connection and stopped answering does.
A bot token must match ``token`` or the API answers ``invalid_auth`` like Slack does.

Messages (``chat.postMessage`` and the webhook) are held to Slack's Block Kit limits the way Slack
holds them (:func:`block_kit_errors`): at most 50 blocks; a section's text at most 3,000 characters,
at most 10 fields of at most 2,000; a header's plain_text at most 150; at most 10 context elements;
the message ``text`` at most 40,000; text objects ``mrkdwn`` or ``plain_text``; an image needs
``image_url`` or ``slack_file``. A message that breaks one is answered ``{"ok": false, "error":
"invalid_blocks", "errors": [<reason>...]}`` (the webhook: HTTP 400 ``invalid_blocks``, as Slack does),
and the reasons are kept in ``rejected``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

MAX_BLOCKS = 50
MAX_MESSAGE_TEXT = 40_000
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_BLOCK_ID = 255
TEXT_TYPES = ("mrkdwn", "plain_text")
OTHER_BLOCKS = ("divider", "actions", "rich_text", "input", "file", "video", "markdown")


def _text_errors(obj: Any, where: str, limit: int, types: tuple[str, ...] = TEXT_TYPES) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{where}: must be a text object"]
    if obj.get("type") not in types:
        return [f"{where}: type must be one of {', '.join(types)}, not {obj.get('type')!r}"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"{where}: text must be a non-empty string"]
    if len(text) > limit:
        return [f"{where}.text: must be less than {limit + 1} characters ({len(text)})"]
    return []


def block_kit_errors(payload: Any) -> list[str]:
    """Why Slack would answer ``invalid_blocks`` (or ``msg_too_long``) to this message ([] when it would not)."""
    if not isinstance(payload, dict):
        return ["the message must be a JSON object"]
    errors: list[str] = []
    text = payload.get("text")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_MESSAGE_TEXT):
        errors.append(f"text: must be a string of at most {MAX_MESSAGE_TEXT} characters")
    blocks = payload.get("blocks")
    if blocks is None:
        return errors
    if isinstance(blocks, str):  # chat.postMessage accepts blocks as a JSON string
        try:
            blocks = json.loads(blocks)
        except ValueError:
            return [*errors, "blocks: not valid JSON"]
    if not isinstance(blocks, list):
        return [*errors, "blocks: must be an array"]
    if len(blocks) > MAX_BLOCKS:
        errors.append(f"blocks: must have at most {MAX_BLOCKS} items ({len(blocks)})")
    for i, b in enumerate(blocks):
        where = f"blocks[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            errors.append(f"{where}: must be an object with a type")
            continue
        kind = b["type"]
        if "block_id" in b and (not isinstance(b["block_id"], str) or len(b["block_id"]) > MAX_BLOCK_ID):
            errors.append(f"{where}.block_id: must be a string of at most {MAX_BLOCK_ID} characters")
        if kind == "header":
            errors += _text_errors(b.get("text"), f"{where}.text", MAX_HEADER_TEXT, ("plain_text",))
        elif kind == "section":
            if "text" not in b and "fields" not in b:
                errors.append(f"{where}: a section needs text or fields")
            if "text" in b:
                errors += _text_errors(b["text"], f"{where}.text", MAX_SECTION_TEXT)
            if "fields" in b:
                fields = b["fields"]
                if not isinstance(fields, list) or not fields or len(fields) > MAX_FIELDS:
                    errors.append(f"{where}.fields: must have 1 to {MAX_FIELDS} items")
                else:
                    for j, f in enumerate(fields):
                        errors += _text_errors(f, f"{where}.fields[{j}]", MAX_FIELD_TEXT)
        elif kind == "context":
            elements = b.get("elements")
            if not isinstance(elements, list) or not elements or len(elements) > MAX_CONTEXT_ELEMENTS:
                errors.append(f"{where}.elements: must have 1 to {MAX_CONTEXT_ELEMENTS} items")
            else:
                for j, e in enumerate(elements):
                    if isinstance(e, dict) and e.get("type") == "image":
                        if not (e.get("image_url") or e.get("slack_file")) or not e.get("alt_text"):
                            errors.append(f"{where}.elements[{j}]: an image needs image_url or slack_file, and alt_text")
                    else:
                        errors += _text_errors(e, f"{where}.elements[{j}]", MAX_SECTION_TEXT)
        elif kind == "image":
            if not (b.get("image_url") or b.get("slack_file")):
                errors.append(f"{where}: an image block needs image_url or slack_file")
            if not isinstance(b.get("alt_text"), str) or not b["alt_text"]:
                errors.append(f"{where}.alt_text: required")
        elif kind not in OTHER_BLOCKS:
            errors.append(f"{where}.type: unknown block type {kind!r}")
    return errors


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


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
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    hang: bool = False
    """Read the request and answer nothing (``status`` unused) until the receiver closes."""


class SlackReceiver:
    def __init__(self, token: str = "xoxb-test-0000-SECRETTOKEN", webhook_secret: str = "XXXXSECRETHOOKXXXX") -> None:
        self.token = token
        self.webhook_path = f"/services/T0TEST/B0TEST/{webhook_secret}"
        self.requests: list[Recorded] = []
        self.uploads: dict[str, bytes] = {}
        self._faults: dict[str, list[Fault]] = {}
        self.rejected: list[tuple[Recorded, list[str]]] = []
        """Messages answered ``invalid_blocks``, with the reasons."""
        self._lock = threading.Lock()
        self._files = 0
        self._closing = threading.Event()  # releases the requests a hang fault holds
        self.hung = 0
        """Requests a hang fault held (each answered nothing)."""
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
                if fault is not None and fault.hang:
                    with receiver._lock:
                        receiver.hung += 1
                    receiver._closing.wait(120)  # silent: the client's timeout is what ends it
                    self.close_connection = True
                    return
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
            errors = block_kit_errors(_json_or_none(rec.body))
            if errors:
                self._reject(rec, errors)
                return 400, "invalid_blocks", "text/plain"
            return 200, "ok", "text/plain"
        if rec.endpoint == "upload":
            self.uploads[rec.path.removeprefix("/upload/")] = rec.body
            return 200, f"OK - {len(rec.body)}", "text/plain"
        if rec.headers.get("Authorization") != f"Bearer {self.token}":
            return 200, json.dumps({"ok": False, "error": "invalid_auth"}), j
        if rec.endpoint == "chat.postMessage":
            payload = rec.json()
            errors = block_kit_errors(payload)
            if errors:
                self._reject(rec, errors)
                return 200, json.dumps({"ok": False, "error": "invalid_blocks", "errors": errors,
                                        "response_metadata": {"messages": [f"[ERROR] {e}" for e in errors]}}), j
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

    def _reject(self, rec: Recorded, errors: list[str]) -> None:
        with self._lock:
            self.rejected.append((rec, errors))

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
