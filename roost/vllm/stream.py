"""One streamed chat completion: what the client saw of it (:class:`RequestRecord`) and how it is read.

The vLLM client (``roost/vllm/client.py``) sends the request; its response goes, block by block as
the bytes arrive (``roost/vllm/timed_net.py``), to a :class:`ChatStream`, which splits the
Server-Sent Events (:class:`SSEParser`), reads each ``chat.completion.chunk``, and keeps when each
token chunk arrived, the usage the server reported and how the stream failed if it did. At the
end the client turns it into a :class:`RequestRecord`. The benchmark and anything else that
streams (accuracy runs, the gateway) read the record; what is computed from it (TTFT, TPOT, ...)
is defined in ``roost/catalogue.py`` and computed in ``roost/bench/metrics.py``.

A *token chunk* is a streamed ``chat.completion.chunk`` whose first choice's ``delta`` carries
generated output (:func:`is_token_delta`): non-empty ``content``/``reasoning``/``reasoning_content``
text or ``tool_calls``, or a ``content`` key with an empty string and no ``role`` (vLLM sends
those for tokens that end inside a multi-byte UTF-8 character). The first chunk of a vLLM
stream, ``{"role": "assistant", "content": ""}``, is not a token chunk, nor is a bare ``{}`` delta
that only carries ``finish_reason``, nor the final usage chunk (``choices: []``).

The reading is lean on purpose (one JSON decode and a few dictionary lookups per event, no object
per token): its CPU per streamed token is a benchmark target (``benchmarks/bench_client_overhead.py``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

Phase = Literal["warmup", "prompt_length", "concurrency", "probe"]
ErrorKind = Literal["http", "stream_error", "cut", "timeout", "connect", "protocol", "client"]


class RequestRecord(BaseModel):
    """What the client saw of one streamed chat completion. All times are ``perf_counter`` seconds."""

    request_id: str
    phase: Phase = "prompt_length"
    point: int = Field(default=-1, description="Index of the point in the run's plan; -1 for warm-up.")
    repeat: int = 0
    concurrency: int = 1
    prompt_tokens_target: int | None = None
    max_tokens: int = 0
    t_sent: float
    t_first: float | None = Field(default=None, description="First token chunk (not the role chunk).")
    t_last: float | None = Field(default=None, description="Last token chunk.")
    t_end: float | None = Field(default=None, description="Response closed (after usage and [DONE]).")
    token_times: list[float] = Field(default_factory=list, description="Arrival of every token chunk.")
    completion_tokens: int | None = Field(default=None, description="From usage; chunk count if usage_missing.")
    prompt_tokens: int | None = Field(default=None, description="From usage.")
    usage_missing: bool = False
    finish_reason: str | None = None
    status_code: int | None = None
    error: str = ""
    error_kind: ErrorKind | None = None

    @property
    def ok(self) -> bool:
        """Completed: no error, a first token, and a token count."""
        return not self.error and self.t_first is not None and self.completion_tokens is not None


# --- Server-Sent Events -----------------------------------------------------------------------------


def _event_data(event: bytes) -> bytes | None:
    """The ``data`` of one event's text (its lines, without the blank line that ended it)."""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if field == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(data) if data else None


class SSEParser:
    """Incremental Server-Sent Events parser over bytes.

    ``feed`` returns the ``data`` payload of every complete event (events end with a blank
    line; several ``data:`` lines join with newlines; ``:`` comments and other fields are
    ignored; ``\\r\\n`` and ``\\n`` line ends both work). ``close`` returns a last event that
    the server did not terminate with a blank line, if it is complete JSON or ``[DONE]``.
    The usual event, one ``data: ...`` line, takes one split and one slice. ``partial`` is the
    start of an event not yet complete.
    """

    __slots__ = ("partial",)

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        if not chunk:
            return []
        buf = self.partial + chunk if self.partial else chunk
        if b"\r" in buf:  # CRLF line ends; a CR at the very end waits for its LF in the partial event
            buf = buf.replace(b"\r\n", b"\n")
        pieces = buf.split(b"\n\n")
        self.partial = pieces.pop()
        events: list[bytes] = []
        for ev in pieces:
            if ev.startswith(b"data: ") and b"\n" not in ev:
                events.append(ev[6:])
            elif (data := _event_data(ev)) is not None:
                events.append(data)
        return events

    def close(self) -> list[bytes]:
        data = _event_data(self.partial)
        self.partial = b""
        if not data:
            return []
        if data.strip() == b"[DONE]":
            return [data.strip()]
        try:
            json.loads(data)
        except (ValueError, RecursionError):
            return []
        return [data]


_TEXT_KEYS = ("content", "reasoning", "reasoning_content")


def is_token_delta(delta: Mapping[str, Any]) -> bool:
    """Does this ``delta`` carry generated output? (A token chunk: see the module docstring.)"""
    if any(delta.get(k) for k in _TEXT_KEYS) or delta.get("tool_calls"):
        return True
    # vLLM: a token ending inside a multi-byte character streams as {"content": ""}; the role
    # chunk {"role": "assistant", "content": ""} and a bare {} finish chunk are not tokens.
    return "role" not in delta and any(k in delta for k in _TEXT_KEYS)


def error_text(obj: Any) -> str:
    """The message of an OpenAI/vLLM/FastAPI error body, whatever its shape."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    return str(err[key])
            return json.dumps(err)[:300]
        if isinstance(err, str):
            return err
        if "detail" in obj:
            return str(obj["detail"])[:300]
    return str(obj)[:300]


# --- reading one stream -------------------------------------------------------------------------------

_raw_decode = json.JSONDecoder().raw_decode
ERROR_BODY_BYTES = 65536
"""How much of a non-200 response's body is kept for its error message."""


class ChatStream:
    """The receiving end of one streamed chat completion (a ``timed_net.Sink``).

    Fills its fields as events arrive and resolves ``finished`` when the stream is over: at
    ``[DONE]``, an error event, the end of the response, a lost connection, or when the owner
    calls :meth:`expire`. ``on_first_token`` (optional) is called once, with the arrival time.
    """

    __slots__ = (
        "completion_tokens", "done", "end_error", "ended", "error_body", "expired", "finish_reason", "finished",
        "head", "last_arrival", "malformed", "on_first_token", "prompt_tokens", "reason", "sse", "status",
        "stream_error", "t_first", "token_times", "usage",
    )

    def __init__(self, finished: asyncio.Future[None], on_first_token: Callable[[float], None] | None = None) -> None:
        self.finished = finished
        self.on_first_token = on_first_token
        self.sse = SSEParser()
        self.head = False
        self.status: int | None = None
        self.reason = ""
        self.error_body: bytearray | None = None
        self.token_times: list[float] = []
        self.t_first: float | None = None
        self.last_arrival = 0.0
        self.finish_reason: str | None = None
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.usage = False
        self.done = False
        self.stream_error = ""
        self.malformed = 0
        self.ended = False
        self.end_error: BaseException | None = None
        self.expired = ""

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    @property
    def over(self) -> bool:
        return self.finished.done()

    def expire(self, reason: str) -> None:
        """The owner gives up on the stream (a time-out): ``reason`` says why."""
        if not self.over:
            self.expired = reason
            self._finish()

    # -- timed_net.Sink -------------------------------------------------------------------------

    def on_head(self, status: int, reason: str, headers: dict[bytes, bytes]) -> None:
        self.head = True
        self.status = status
        self.reason = reason
        if status != 200:
            self.error_body = bytearray()

    def on_body(self, data: bytes, t: float) -> None:
        self.last_arrival = t
        if self.error_body is not None:
            if len(self.error_body) < ERROR_BODY_BYTES:
                self.error_body += data
            return
        if self.finished.done():
            return  # the rest of a stream already over (after [DONE], an error event or a time-out)
        if (data.startswith(b"data: ") and data.endswith(b"\n\n") and data.find(b"\n") == len(data) - 2
                and not self.sse.partial):  # the usual block: exactly one one-line event
            if self._event(data[6:-2], t):
                self._finish()
            return
        for event in self.sse.feed(data):
            if self._event(event, t):
                self._finish()
                return

    def on_end(self, error: BaseException | None) -> None:
        self.ended = True
        self.end_error = error
        if not self.finished.done() and self.error_body is None and self.head:
            now = time.perf_counter()
            for event in self.sse.close():
                if self._event(event, now):
                    break
        self._finish()

    # -- events ---------------------------------------------------------------------------------

    def _event(self, data: bytes, t: float) -> bool:
        """Apply one SSE data payload; True when the stream is over (``[DONE]`` or an error event)."""
        try:
            text = data.decode()
            obj, end = _raw_decode(text)
            if end != len(text):
                obj = json.loads(text)  # trailing whitespace is fine, trailing garbage is not
        except (ValueError, RecursionError):  # not JSON, or nested deeper than any event is
            if data.strip() == b"[DONE]":
                self.done = True
                return True
            self.malformed += 1
            return False
        if type(obj) is not dict:
            self.malformed += 1
            return False
        if obj.get("error") or obj.get("object") == "error":
            self.stream_error = error_text(obj)
            return True
        choices = obj.get("choices")
        if choices and type(choices) is list and type(choice := choices[0]) is dict:
            delta = choice.get("delta")
            if type(delta) is dict and (delta.get("content") or is_token_delta(delta)):
                self.token_times.append(t)
                if self.t_first is None:
                    self.t_first = t
                    if self.on_first_token is not None:
                        self.on_first_token(t)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = str(reason)
        usage = obj.get("usage")
        if type(usage) is dict:
            n = usage.get("completion_tokens")
            if type(n) is int:
                self.completion_tokens = n
                self.usage = True
            n = usage.get("prompt_tokens")
            if type(n) is int:
                self.prompt_tokens = n
        return False
