"""A forwarded request's meaning, read as vLLM reads it (pure: no I/O).

What the gateway meters depends on four things a client's body says: whether the answer streams,
how many choices each prompt gets (``n``), how many prompts a completion has, and what usage the
client asked to see (``stream_options``). vLLM reads them with pydantic in lax mode
(``vllm/entrypoints/openai/chat_completion/protocol.py``, ``completion/protocol.py``,
``generate/base/protocol.py``): ``"stream": "true"``, ``"yes"``, ``1`` or ``"on"`` mean a stream,
``"n": "2"`` means two choices, ``stream_options`` needs a truthy ``stream`` in the raw body. A
gateway reading only a literal ``true`` would take a stream for a whole answer and bill it as 0
tokens. :func:`read_request` applies the same field types and the same before-validator, so what the
client receives and what the gateway bills cannot diverge; a body vLLM would refuse on these fields
is refused here with vLLM's message (an OpenAI-style 400), and the body forwarded carries the values
as read (:func:`forwarded_body`), so the backend cannot read them otherwise.

Only the fields the gateway reads are declared; the rest pass through untouched (vLLM validates them
and its 400 is relayed).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from roost.gateway.metering import Endpoint


class InvalidRequest(Exception):
    """The body is refused as vLLM would refuse it (400); ``param`` names the field."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


class _StreamOptions(BaseModel):
    """vLLM's ``StreamOptions`` (both default False)."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _Request(BaseModel):
    """The fields every forwarded endpoint shares, typed as vLLM types them."""

    model_config = ConfigDict(extra="ignore")
    stream: bool | None = False
    stream_options: _StreamOptions | None = None

    @model_validator(mode="before")
    @classmethod
    def _stream_options_need_stream(cls, data: Any) -> Any:
        # vLLM's validate_stream_options: on the raw body, before any coercion ("stream": "false" passes)
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return data


class _Chat(_Request):
    n: int | None = 1


_TokenIds = list[Annotated[int, Field(ge=0)]]


class _Completion(_Request):
    n: int = 1
    prompt: _TokenIds | list[_TokenIds] | str | list[str] | None = None
    prompt_embeds: bytes | list[bytes] | None = None


_MODELS: dict[Endpoint, type[_Request]] = {"chat": _Chat, "completions": _Completion}


class Reading(BaseModel):
    """What the gateway needs to know of a request, as vLLM will read it."""

    stream: bool = Field(description="The answer is an event stream.")
    n: int = Field(description="Choices per prompt, as read (vLLM refuses n < 1 itself).")
    prompts: int = Field(description="Prompts answered (several only on /v1/completions; 0 for a list vLLM refuses).")
    include_usage: bool = Field(description="The client asked for a usage chunk at the end of its stream.")
    continuous_usage: bool = Field(description="The client asked for usage on every chunk.")


def _seq_len(x: Any) -> int:
    """How many prompts one field holds, as vLLM's ``prompt_to_seq`` sees it: a text, embeddings or a
    flat list of token ids is one; a list of them is each."""
    if isinstance(x, (str, bytes)) or (isinstance(x, list) and x and all(isinstance(i, int) for i in x)):
        return 1
    return len(x)


def _prompt_count(prompt: Any, embeds: Any) -> int:
    """Prompts a completion answers: its embeddings' and its prompts' (vLLM answers both)."""
    return (0 if embeds is None else _seq_len(embeds)) + (0 if prompt is None else _seq_len(prompt))


def _plain_reading(endpoint: Endpoint, body: dict[str, Any]) -> Reading | None:
    """:func:`read_request`'s answer for a body whose fields it reads hold plain JSON values of their
    own types (``stream`` a boolean, ``n`` an integer, ``stream_options`` an object of booleans, a
    completion's ``prompt`` one text): the same answer without pydantic (the hot path); None for any
    other body, which pydantic reads."""
    stream = body.get("stream", False)
    if stream is not True and stream is not False and stream is not None:
        return None
    n = body.get("n", 1)
    if endpoint == "chat":
        if n is None:
            n = 1
        prompts = 1
    elif endpoint == "completions":
        if type(body.get("prompt")) is not str or body.get("prompt_embeds") is not None:
            return None
        prompts = 1
    else:
        return None
    if type(n) is not int:
        return None
    opts = body.get("stream_options")
    include = continuous = False
    if opts is not None:
        if type(opts) is not dict or (opts and not stream):  # not stream: refused, with pydantic's message
            return None
        include, continuous = opts.get("include_usage", False), opts.get("continuous_usage_stats", False)
        if any(v is not True and v is not False and v is not None for v in (include, continuous)):
            return None
    key = (bool(stream), n, prompts, bool(include), bool(include and continuous))
    reading = _READINGS.get(key)
    if reading is None:
        reading = Reading.model_construct(stream=key[0], n=n, prompts=prompts, include_usage=key[3],
                                          continuous_usage=key[4])
        if len(_READINGS) < 256:  # the few readings requests have (n is the client's)
            _READINGS[key] = reading
    return reading


_READINGS: dict[tuple[bool, int, int, bool, bool], Reading] = {}
"""Readings of plain bodies, built once each (a reading is never changed)."""


def read_request(endpoint: Endpoint, body: dict[str, Any]) -> Reading:
    """``body`` read as vLLM reads it for ``endpoint``; :class:`InvalidRequest` for what vLLM refuses."""
    plain = _plain_reading(endpoint, body)
    if plain is not None:
        return plain
    cls = _MODELS.get(endpoint)
    if cls is None:  # embeddings: no stream, one answer
        return Reading(stream=False, n=1, prompts=1, include_usage=False, continuous_usage=False)
    try:
        parsed = cls.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        loc = err.get("loc", ())
        message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if not loc:  # the before-validator: its own message, vLLM's
            raise InvalidRequest(message, "stream_options") from None
        field = str(loc[0])
        raise InvalidRequest(f"`{field}`: {message}"[:300], field) from None
    n = parsed.n if isinstance(parsed, (_Chat, _Completion)) and parsed.n is not None else 1
    opts = parsed.stream_options
    prompts = _prompt_count(parsed.prompt, parsed.prompt_embeds) if isinstance(parsed, _Completion) else 1
    return Reading(stream=bool(parsed.stream), n=n, prompts=prompts,
                   include_usage=bool(opts and opts.include_usage),
                   continuous_usage=bool(opts and opts.include_usage and opts.continuous_usage_stats))


def forwarded_body(body: dict[str, Any], reading: Reading) -> dict[str, Any] | None:
    """The body to send upstream when it must differ from the one received: a stream asks for usage on
    every chunk (the gateway meters it; chunks carry it to the client only as it asked) and says
    ``stream`` and ``n`` as read, so the backend cannot read them otherwise. None: forward as received."""
    if not reading.stream:
        return None
    out = dict(body)
    out["stream"] = True
    if "n" in out and type(out["n"]) is not int:
        out["n"] = reading.n
    out["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return out


class TooDeep(Exception):
    """A body nested deeper than any JSON encoder at hand writes."""


def encode(body: dict[str, Any]) -> bytes:
    """``body`` as JSON: orjson (which writes 254 levels of nesting), else the standard library's encoder
    (about 1,000, as deep as vLLM's own parser reads); :class:`TooDeep` beyond."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):
        raise TooDeep("the request nests deeper than the gateway can forward") from None
