"""What a client is told when an upstream (a model server behind the gateway) fails or refuses (pure:
no I/O).

An upstream's error answer is relayed as an OpenAI-style error with the upstream's status and a short
message, never as it came: a Python traceback, the upstream's own address, a file path or a secret in
it would reach every client otherwise. A refusal (4xx) keeps vLLM's one-line reason ("This model's
maximum context length is ...": the client needs it), cleaned; a failure (5xx) says only that the
model's server failed; the upstream refusing the gateway's own key (401/403) is the gateway's problem,
a 502, never "your key is invalid". An error event inside a stream is rewritten the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from roost.gateway.metering import error_body

MAX_MESSAGE = 500
"""Characters of an upstream's refusal message a client gets."""

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_ADDRESS = re.compile(r"\[[0-9a-f:.]+\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\blocalhost:\d+\b", re.IGNORECASE)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.@+-]+){2,}[/\\]?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def clean_message(text: str, scrub: Callable[[str], str]) -> str:
    """An upstream's message as a client may see it: its first line before any traceback, secrets,
    URLs, addresses and file paths masked, control characters dropped, at most :data:`MAX_MESSAGE`."""
    text = scrub(text)
    text = text.split("Traceback (most recent call last)", 1)[0]
    text = next((line.strip() for line in text.splitlines() if line.strip()), "")
    text = _URL.sub("<url>", text)
    text = _ADDRESS.sub("<address>", text)
    text = _PATH.sub("<path>", text)
    text = _CONTROL.sub("", text)
    return text[:MAX_MESSAGE].strip()


def _fields(obj: Any) -> dict[str, Any]:
    """The error object of an answer: vLLM's ``{"error": {...}}``, an older flat ``{"object": "error",
    "message": ...}``, FastAPI's ``{"detail": ...}``; empty when it is none of them."""
    if not isinstance(obj, dict):
        return {}
    err = obj.get("error")
    if isinstance(err, dict):
        return err
    if isinstance(err, str):
        return {"message": err}
    if isinstance(obj.get("message"), str):
        return obj
    if isinstance(obj.get("detail"), str):
        return {"message": obj["detail"]}
    return {}


def relayed_error(status: int, obj: Any, scrub: Callable[[str], str]) -> tuple[int, bytes]:
    """``(status, body)`` for the client of an upstream's error answer ``obj`` (parsed JSON or None)."""
    if status in (401, 403):
        return 502, error_body("the model's server refused the gateway's credentials (its upstream key); "
                               "tell the gateway's operator", kind="api_error", code="backend_auth")
    if status >= 500 or status < 400:
        return (status if 500 <= status <= 599 else 502), error_body(
            f"the model's server failed (HTTP {status})", kind="api_error", code="backend_error")
    fields = _fields(obj)
    message = clean_message(fields["message"], scrub) if isinstance(fields.get("message"), str) else ""
    kind = fields.get("type")
    param = fields.get("param")
    code = fields.get("code")
    return status, error_body(
        message or f"the model's server refused the request (HTTP {status})",
        kind=kind if isinstance(kind, str) and _WORD.fullmatch(kind) else "invalid_request_error",
        param=param if isinstance(param, str) and _WORD.fullmatch(param) else None,
        code=str(code) if (type(code) is int or (isinstance(code, str) and _WORD.fullmatch(code))) else str(status))


def stream_error_event(obj: dict[str, Any], scrub: Callable[[str], str]) -> bytes:
    """The event a client gets for an error event in an upstream's stream (vLLM: ``data: {"error":
    {..., "code": <status>}}``): the same cleaning as :func:`relayed_error`, by the status it names."""
    fields = _fields(obj)
    code = fields.get("code")
    status = code if type(code) is int and 400 <= code <= 599 else 500
    return b"data: " + relayed_error(status, obj, scrub)[1] + b"\n\n"


def parse(data: bytes) -> Any:
    """An upstream's error body as JSON, or None."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
