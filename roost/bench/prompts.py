"""Prompts of an exact token count, unique per request.

The target is the TOTAL ``prompt_tokens`` the server will report in usage for the chat request:
the chat template's tokens (role markers, the generation prompt, the empty think pair when
``enable_thinking`` is false) are included. Counting is done by the server itself:
``POST /tokenize`` with the same ``messages`` and ``chat_template_kwargs`` as the request (vLLM);
a server without ``/tokenize`` is asked instead with a one-token completion whose usage reports
the prompt's size (:class:`UsageProbeCounter`, slower: it prefills).

A prompt is ``"Request <nonce>."`` followed by words drawn from a fixed list by a seeded
generator (varied text, so a speculative drafter is not flattered by repetition), then a few
single-token padding units to land exactly on the target. The nonce leads the first KV block, so
no two requests share a cached prefix: prefix caching cannot help any measured request.
Tokenizers split on whitespace before merging (byte-level BPE, SentencePiece), so the count is
additive in words and the search converges in a handful of ``/tokenize`` calls.
"""

from __future__ import annotations

import math
import random
from typing import Any, Protocol

import httpx
from pydantic import BaseModel

from roost.vllm.client import VllmClient, answer_json

_WORDS_TEXT = (
    "the of and to in is was for on that with as by at from his her it an were are which this be "
    "or has had not first one their its new after but who they have two been other when there all "
    "during into school time may years more most only over city some world would where later up "
    "such used many can state about national out known university united then made being between "
    "under three while season part year american high since he would team river she also them "
    "number people through several these than both early film house second series war each around "
    "south well north music located because what following however life music work family name "
    "area group game members best same government found county around large became include small "
    "based public before system west east long album history century local again land church end "
    "village record station art light open water children play court police power market control "
    "field language program period design model figure science theory process value energy method "
    "river garden mountain island forest ocean coast valley bridge castle harbor tower market road "
    "library museum theater college hospital airport factory office village capital region empire "
    "simple quiet bright narrow heavy gentle rapid steady careful sudden ancient modern distant"
)
WORDS = tuple(_WORDS_TEXT.split())

PAD_CANDIDATES = (" the", " a", " and", " of", " to", " is", " in", " x")


class PromptError(Exception):
    """The target cannot be built (shorter than the template) or counted (server refused)."""


class TokenCounter(Protocol):
    async def count(self, messages: list[dict[str, str]]) -> int: ...


class ServerTokenizer:
    """Counts with the server's ``POST /tokenize`` (vLLM): exact, including the chat template."""

    def __init__(self, client: VllmClient, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.client = client
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.max_model_len: int | None = None
        self.calls = 0

    async def count(self, messages: list[dict[str, str]]) -> int:
        self.calls += 1
        resp = await self.client.tokenize(messages, chat_template_kwargs=self.chat_template_kwargs)
        if resp.status_code != 200:
            raise PromptError(f"/tokenize answered HTTP {resp.status_code}: {self.client.error_message(resp)}")
        try:
            data = answer_json(resp)
            if isinstance(data.get("max_model_len"), int):
                self.max_model_len = data["max_model_len"]
            return int(data["count"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PromptError(f"/tokenize answered without a token count ({type(exc).__name__}: {exc})") from None

    async def available(self) -> bool:
        """Does the server have ``/tokenize``? (One tiny call.)"""
        try:
            await self.count([{"role": "user", "content": "hi"}])
        except (PromptError, httpx.HTTPError, KeyError, ValueError):
            return False
        return True


class UsageProbeCounter:
    """Counts by sending a one-token, non-streamed completion and reading ``usage.prompt_tokens``."""

    def __init__(self, client: VllmClient, extra_body: dict[str, Any] | None = None) -> None:
        self.client = client
        self.extra_body = extra_body or {}
        self.calls = 0

    async def count(self, messages: list[dict[str, str]]) -> int:
        body: dict[str, Any] = {"model": self.client.model, "messages": messages, "max_tokens": 1, **self.extra_body}
        body["stream"] = False
        self.calls += 1
        resp = await self.client.post_json("/v1/chat/completions", body, timeout_s=600.0)
        if resp.status_code != 200:
            raise PromptError(f"HTTP {resp.status_code}: {self.client.error_message(resp)}")
        try:
            return int(answer_json(resp)["usage"]["prompt_tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PromptError(
                "the server has no /tokenize and its completions carry no usage.prompt_tokens, so prompts of an "
                f"exact length cannot be built ({type(exc).__name__}: {exc})"
            ) from None




class BuiltPrompt(BaseModel):
    messages: list[dict[str, str]]
    prompt_tokens: int
    exact: bool


class PromptBuilder:
    """Builds ``messages`` whose chat-templated length is exactly ``target`` tokens."""

    def __init__(self, counter: TokenCounter, *, seed: int = 0, max_iterations: int = 16) -> None:
        self.counter = counter
        self.max_iterations = max_iterations
        self._rng = random.Random(seed)
        self._words: list[str] = []
        self._pad: str | None = None
        self._pad_checked = False
        self._tokens_per_word: float | None = None
        self._start: dict[int, tuple[int, int]] = {}

    def _text(self, nonce: str, k: int, pad: int) -> str:
        while len(self._words) < k:
            self._words.extend(self._rng.choice(WORDS) for _ in range(max(1024, k - len(self._words))))
        return f"Request {nonce}." + "".join(" " + w for w in self._words[:k]) + (self._pad or "") * pad

    @staticmethod
    def messages(text: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": text}]

    async def _count(self, nonce: str, k: int, pad: int) -> int:
        return await self.counter.count(self.messages(self._text(nonce, k, pad)))

    async def _calibrate(self, nonce: str, base: int) -> None:
        if self._tokens_per_word is None:
            n = 256
            self._tokens_per_word = max((await self._count(nonce, n, 0) - base) / n, 0.1)
        if not self._pad_checked:
            self._pad_checked = True
            ref = await self._count(nonce, 64, 0)
            for unit in PAD_CANDIDATES:
                self._pad = unit
                if await self._count(nonce, 64, 5) - ref == 5 and await self._count(nonce, 64, 8) - ref == 8:
                    return
            self._pad = None

    async def build(self, target: int, nonce: str) -> BuiltPrompt:
        """A prompt of exactly ``target`` tokens if the tokenizer allows it (``exact``), else the nearest below."""
        start = self._start.get(target)
        if start is None:
            base = await self._count(nonce, 0, 0)
            if base > target:
                raise PromptError(
                    f"a {target}-token prompt is shorter than the chat template and request id alone ({base} tokens)"
                )
            if base == target:
                return BuiltPrompt(messages=self.messages(self._text(nonce, 0, 0)), prompt_tokens=base, exact=True)
            await self._calibrate(nonce, base)
            tpw = self._tokens_per_word or 1.0
            k, pad = max(0, math.floor((target - base) / tpw) - 2), 0
        else:  # built before: another nonce lands there or within a few padding units
            tpw = self._tokens_per_word or 1.0
            k, pad = start
        best: tuple[int, int, int] | None = None  # (count, k, pad) closest below the target
        for _ in range(self.max_iterations):
            c = await self._count(nonce, k, pad)
            if c == target:
                self._start[target] = (k, pad)
                return BuiltPrompt(messages=self.messages(self._text(nonce, k, pad)), prompt_tokens=c, exact=True)
            if c < target and (best is None or c > best[0]):
                best = (c, k, pad)
            diff = target - c
            if self._pad is not None and 0 <= pad + diff <= 64:
                pad += diff
            elif diff > 0:
                k += max(1, math.floor(diff / tpw) - 1)
                pad = 0
            else:
                k = max(0, k - max(1, math.ceil(-diff / tpw)))
                pad = 0
        if best is None:
            best = (await self._count(nonce, 0, 0), 0, 0)
        c, k, pad = best
        return BuiltPrompt(messages=self.messages(self._text(nonce, k, pad)), prompt_tokens=c, exact=False)
