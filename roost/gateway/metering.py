"""What a request costs, from its body, its stream and its answer (pure: no I/O).

- Prompt tokens are counted at request start by the backend's ``/tokenize`` on the same input the
  endpoint will see (:func:`tokenize_bodies`: the chat messages with the request's template
  arguments, or the completion prompt); a usage block in the answer, when there is one, is the
  backend's own count and is what gets stored (the two agree on vLLM; a disagreement is counted).
- Completion tokens of a streamed answer: the gateway asks vLLM for usage on every chunk
  (``stream_options: {include_usage, continuous_usage_stats}``), so the count is exact up to the
  last chunk forwarded, even when the client leaves mid-stream; chunks the client did not ask usage
  for are passed on without it (:class:`StreamMeter` rewrites them). A backend that sends no usage
  has its chunks counted: one token per chunk carrying text (``stream-count``).
- vLLM's usage on a chunk is that chunk's *choice's*: its completion tokens so far, and the prompt
  tokens of the prompt it answers (``n`` choices per prompt, several prompts on ``/v1/completions``,
  choice ``index = prompt * n + k``). Only the last, choice-less usage chunk counts the whole request.
  Until it comes (a client that leaves, a backend that cuts), a stream costs the sum over its choices,
  and its prompt is known from the stream only once every prompt has been answered at least once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import orjson

Endpoint = Literal["chat", "completions", "embeddings"]
Source = Literal["usage", "tokenize", "stream-count", "none"]

# What /tokenize takes besides the messages: the same template inputs the chat endpoint uses.
_CHAT_TEMPLATE_FIELDS = ("add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs",
                         "tools", "mm_processor_kwargs", "add_special_tokens")


def tokenize_bodies(endpoint: Endpoint, body: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The ``/tokenize`` bodies that count this request's prompt, and tokens known without asking
    (a prompt given as token ids). Embeddings are counted from their answer's usage."""
    model = body.get("model")
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return [], 0
        req: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        for name in _CHAT_TEMPLATE_FIELDS:
            if name in body:
                req[name] = body[name]
        return [req], 0
    if endpoint == "completions":
        bodies, known = [], 0
        for p in _prompts(body.get("prompt")):
            if isinstance(p, str):
                bodies.append({"model": model, "prompt": p})
            elif isinstance(p, list) and all(type(t) is int for t in p):
                known += len(p)
        return bodies, known
    return [], 0


def _prompts(prompt: Any) -> list[Any]:
    """A completions request's prompts: its ``prompt`` is one text, one list of token ids, or a list of either."""
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)):
        return [prompt]
    return prompt if isinstance(prompt, list) else []


def tokenize_count(answer: Any) -> int | None:
    """The token count of a ``/tokenize`` answer (vLLM: ``count``), or None."""
    if isinstance(answer, dict):
        count = answer.get("count")
        if type(count) is int and count >= 0:
            return count
        tokens = answer.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
    return None


def usage_of(obj: Any) -> tuple[int | None, int | None]:
    """``(prompt_tokens, completion_tokens)`` of an answer's ``usage`` block, None where absent."""
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return None, None
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (p if type(p) is int else None), (c if type(c) is int else None)


def answer_texts(answer: Any) -> list[str]:
    """The generated text of a whole (non-streamed) answer, per choice: a chat message's content, its
    reasoning and its tool calls' names and arguments, or a completion's text. What a backend that gives
    no usage is billed by (counted with ``/tokenize``)."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    texts: list[str] = []
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if isinstance(message, dict):
            parts = [message.get("reasoning") or message.get("reasoning_content"), message.get("content")]
            calls = message.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    parts += [fn.get("name"), fn.get("arguments")]
        else:
            parts = [choice.get("text")]
        text = "".join(p for p in parts if isinstance(p, str))
        if text:
            texts.append(text)
    return texts


class SecretForms:
    """Every form of every secret; :meth:`search` finds any of them in bytes (a substring search per
    form, each a fast scan in C: one regular expression alternating the forms costs about 17 ns a
    byte, which a stream pays on every block)."""

    def __init__(self, forms: list[bytes]) -> None:
        self.forms = forms

    def search(self, data: bytes) -> bytes | None:
        """The first form ``data`` holds, or None."""
        for form in self.forms:
            if form in data:
                return form
        return None


def secret_pattern(forms: Iterable[bytes]) -> SecretForms | None:
    """Every form of every secret, one search finding any of them; None for none."""
    unique = sorted({f for f in forms if f}, key=len, reverse=True)
    return SecretForms(unique) if unique else None


class StreamMeter:
    """Reads a streamed answer's server-sent events as they pass: counts tokens, notes the end, an
    error event, and gives back each event as the client asked for it (usage removed where the client
    did not ask for it). ``prompts`` and ``per_prompt`` (:class:`~roost.gateway.request.Reading`) say how many choices the
    answer has and which prompt each one answers. ``error_event`` renders what the client gets for an
    error event (the backend's is never passed on as it came); an event that ``secrets``
    (:func:`secret_pattern`) finds in is passed through ``scrub`` first."""

    def __init__(self, *, client_include_usage: bool = True, client_continuous: bool = True, prompts: int = 1,
                 per_prompt: int = 1, error_event: Callable[[dict[str, Any]], bytes] | None = None,
                 secrets: SecretForms | None = None, scrub: Callable[[bytes], bytes] | None = None) -> None:
        self.error_event = error_event
        self.scrub = scrub
        self._secrets = secrets if scrub is not None else None  # searched once a block, not per event and form
        self._suspect = False  # the buffered events hold a secret form
        self.client_include_usage = client_include_usage
        self.client_continuous = client_continuous
        self.prompts, self.per_prompt = max(prompts, 1), max(per_prompt, 1)
        self.counted = 0  # chunks with text, for a backend that sends no usage
        self.done = False  # [DONE] seen
        self.error: str | None = None
        self.events = 0
        self._buf = b""
        self._whole: tuple[int | None, int | None] | None = None  # the usage of the whole request, once sent
        self._choice_completion: dict[int, int] = {}  # choice index -> its completion tokens so far
        self._prompt_of: dict[int, int] = {}  # prompt number -> its prompt tokens
        self._finished: set[int] = set()  # choice indices with a finish_reason

    @property
    def finished(self) -> bool:
        """Every choice has its finish reason."""
        return len(self._finished) >= self.prompts * self.per_prompt

    @property
    def usage_completion(self) -> int | None:
        """The backend's completion count: the whole request's, else the sum over the choices so far."""
        if self._whole is not None and self._whole[1] is not None:
            return self._whole[1]
        return sum(self._choice_completion.values()) if self._choice_completion else None

    @property
    def prompt_tokens(self) -> int | None:
        """The backend's prompt count: the whole request's, else the sum over its prompts once each is known."""
        if self._whole is not None and self._whole[0] is not None:
            return self._whole[0]
        return sum(self._prompt_of.values()) if len(self._prompt_of) >= self.prompts else None

    @property
    def completion_tokens(self) -> int:
        used = self.usage_completion
        return used if used is not None else self.counted

    @property
    def completion_source(self) -> Source:
        if self.usage_completion is not None:
            return "usage"
        return "stream-count" if self.events else "none"

    def feed(self, data: bytes) -> bytes:
        """Bytes from the backend -> bytes for the client (complete events only; a partial event waits)."""
        if not self._buf and data.endswith(b"\n\n") and data.find(b"\n\n") == len(data) - 2:  # one whole event
            if self._secrets is not None:
                self._suspect = self._secrets.search(data) is not None
            return self._event(data)
        self._buf += data
        if self._secrets is not None:
            self._suspect = self._secrets.search(self._buf) is not None
        out: list[bytes] = []
        while True:
            cut = self._buf.find(b"\n\n")
            if cut < 0:
                break
            event, self._buf = self._buf[: cut + 2], self._buf[cut + 2 :]
            passed = self._event(event)
            if passed:
                out.append(passed)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left when the stream ends (a last event without its blank line)."""
        rest, self._buf = self._buf, b""
        return self._event(rest) if rest.strip() else b""

    def _event(self, event: bytes) -> bytes:
        if self._suspect and self.scrub is not None:
            event = self.scrub(event)
        line = event.strip()
        if not line.startswith(b"data:"):
            return event
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return event
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return event
        if not isinstance(obj, dict):
            return event
        self.events += 1
        if ("error" in obj or obj.get("object") == "error") and "choices" not in obj:
            err = obj.get("error")
            self.error = str(err.get("message") if isinstance(err, dict) else err)[:300]
            return self.error_event(obj) if self.error_event is not None else event
        choices = obj.get("choices")
        indices: list[int] = []
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index")
            index = index if type(index) is int and index >= 0 else 0
            indices.append(index)
            if choice.get("finish_reason") is not None:
                self._finished.add(index)
            delta = choice.get("delta")
            text = choice.get("text") if delta is None else (
                (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                 or delta.get("tool_calls")) if isinstance(delta, dict) else None)
            if text:
                self.counted += 1
        if "usage" not in obj:
            return event
        p, c = usage_of(obj)
        if len(indices) == 1:  # vLLM's continuous usage: this choice's tokens, and its prompt's
            if c is not None:
                self._choice_completion[indices[0]] = c
            if p is not None:
                self._prompt_of[indices[0] // self.per_prompt] = p
        else:  # no choice (vLLM's last chunk) or several: the usage of the whole request
            self._whole = (p, c)
        usage_only = isinstance(choices, list) and not choices
        if usage_only:
            return event if self.client_include_usage else b""
        if self.client_include_usage and self.client_continuous:
            return event
        del obj["usage"]
        return b"data: " + orjson.dumps(obj) + b"\n\n"


def error_body(message: str, *, kind: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> bytes:
    """An OpenAI-style error body."""
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})
