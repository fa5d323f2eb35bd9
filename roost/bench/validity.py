"""When a request's decode timing cannot be trusted: the *unmeasurable* rule.

A per-request decode rate (``(completion_tokens - 1) / (t_last - t_first)``, ``roost/catalogue.py``)
times tokens as the client saw them arrive. That is the server's decoding only while the server
writes each token as it generates it. A starved server (its API process short of CPU) holds tokens
back and then flushes them together: the client sees the decode squeezed into a few milliseconds
and reports an impossible rate, or none at all. Landing the local profile through Docker showed both:
a 64-token request whose first token came at 68 ms and the other 63 within the next 7 ms (8,970
tok/s, 2.6x its 3,465 tok/s roofline), and a repeat whose 64 tokens all arrived at one instant.

:func:`unmeasurable` judges one completed request with at least two tokens (a failed request is
counted as an error; a one-token request has no decode to time). It is *unmeasurable* when:

(a) **above the ceiling**: its decode rate exceeds the fastest one stream can decode,
    ``ceiling_tok_s`` (when known), by more than ``CEILING_TOLERANCE``. The roofline ceiling is
    per decode step; with speculative decoding a step can emit ``num_speculative_tokens + 1``
    tokens, so pass :func:`stream_ceiling_tok_s`, which scales it.
(b) **a burst**: its token chunks show the server delivered them together, by any of
    (b1) the decode span ``t_last - t_first`` is under ``MIN_DECODE_SPAN_S`` (1 ms; 0 when every
         token came at one instant): no client can time that;
    (b2) more than ``BURST_SHARE`` (half) of the chunks after the first arrived less than
         ``FLUSH_GAP_S`` (0.1 ms) after the chunk before them: one flush, not separate decode steps
         (no engine step of a served model takes under 0.1 ms; the tiny model on this CPU takes 3-8 ms);
    (b3) the chunks carry more than ``MAX_TOKENS_PER_CHUNK`` (8) tokens each on average (usage
         tokens / chunks): vLLM merges the tokens of a stream its API process fell behind on into
         one chunk.

A normal stream is never flagged: its chunks arrive one per engine step, milliseconds apart, with
one token each, or a few with speculative decoding (MTP with one draft token: at most 2, at most
``num_speculative_tokens + 1`` in general, so (b3) holds for drafts of up to 7 tokens), and a
client that occasionally reads two chunks at once (a loaded host) stays well under half of them.
A stream at, say, 9,000 tok/s whose chunks are evenly spaced is told from a fast model only by the
ceiling: without one, rule (a) cannot apply.

Unmeasurable requests keep their row (with the reason) and count in TTFT, end-to-end latency,
prefill and the throughputs; they are left out of TPOT, ITL and decode tok/s, hence out of the
baselines and the regression check (``roost/bench/metrics.py``, ``BenchPoint.unmeasurable``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from roost.bench.mtp import speculative_config
from roost.vllm.stream import RequestRecord

CEILING_TOLERANCE = 0.05
"""A decode rate up to 5% above the ceiling is taken as timing jitter, not as impossible."""

MIN_DECODE_SPAN_S = 1e-3
"""A decode span shorter than 1 ms is below what a client can time (an event-loop pass on a loaded host)."""

FLUSH_GAP_S = 1e-4
"""Chunks closer than 0.1 ms came in one flush (one read), not from separate engine steps."""

BURST_SHARE = 0.5
"""More than this share of the chunks after the first arriving flushed makes the request a burst."""

MAX_TOKENS_PER_CHUNK = 8.0
"""More tokens per chunk than this on average: the server merged tokens it had held back."""


class Kind(StrEnum):
    ABOVE_CEILING = "above_ceiling"
    BURST = "burst"


KIND_TEXT: dict[Kind, str] = {Kind.ABOVE_CEILING: "above the roofline ceiling", Kind.BURST: "delivered in a burst"}
"""How a count of each kind reads: ``2 above the roofline ceiling``."""


class Unmeasurable(BaseModel):
    """Why one request's decode timing is not a measurement."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    reason: str


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def unmeasurable(r: RequestRecord, ceiling_tok_s: float | None = None) -> Unmeasurable | None:
    """Why the decode timing of ``r`` is unmeasurable (see the module docstring), or None when it is
    measurable or there is no decode to judge (a failed request, fewer than two tokens)."""
    ts = r.token_times
    if not r.ok or r.t_first is None or r.t_last is None or not ts:
        return None
    n = r.completion_tokens if r.completion_tokens is not None else len(ts)
    if n < 2:
        return None
    span = r.t_last - r.t_first
    if ceiling_tok_s is not None and ceiling_tok_s > 0 and span > 0:
        rate = (n - 1) / span
        if rate > ceiling_tok_s * (1 + CEILING_TOLERANCE):
            return Unmeasurable(
                kind=Kind.ABOVE_CEILING,
                reason=f"decode {rate:,.0f} tok/s is {rate / ceiling_tok_s:.1f}x the {ceiling_tok_s:,.0f} tok/s "
                "ceiling: the tokens arrived faster than the server can generate them",
            )
    if span < MIN_DECODE_SPAN_S:
        at_once = "at one instant" if span <= 0 else f"within {_ms(span)}"
        return Unmeasurable(kind=Kind.BURST,
                            reason=f"all {n} tokens arrived {at_once}, {_ms(r.t_first - r.t_sent)} after the request")
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    flushed = sum(1 for g in gaps if g < FLUSH_GAP_S)
    if gaps and flushed > BURST_SHARE * len(gaps):
        return Unmeasurable(kind=Kind.BURST,
                            reason=f"{flushed} of the {len(gaps)} token chunks after the first arrived less than "
                            f"{_ms(FLUSH_GAP_S)} after the one before (flushed together)")
    if n / len(ts) > MAX_TOKENS_PER_CHUNK:
        return Unmeasurable(kind=Kind.BURST,
                            reason=f"{n} tokens arrived in {len(ts)} chunks ({n / len(ts):.1f} per chunk: "
                            "merged after the server fell behind)")
    return None


def describe_counts(kinds: Iterable[Kind]) -> str:
    """``2 above the roofline ceiling, 1 delivered in a burst`` ("" for none)."""
    counts: dict[Kind, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return ", ".join(f"{counts[k]} {KIND_TEXT[k]}" for k in Kind if counts.get(k))


def num_speculative_tokens(vllm_args: Sequence[str]) -> int | None:
    """The draft tokens per step of ``--speculative-config`` in a vLLM argv (``roost.bench.mtp.speculative_config``:
    the last one wins): 0 without the flag, None when its JSON cannot be read."""
    value = speculative_config(vllm_args)
    if value is None:
        return 0
    try:
        config = json.loads(value)
    except ValueError:
        return None
    k = config.get("num_speculative_tokens") if isinstance(config, dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 0 else None


def stream_ceiling_tok_s(roofline_tok_s: float | None, vllm_args: Sequence[str] = ()) -> float | None:
    """The fastest one stream can decode on a server run with ``vllm_args``: the roofline ceiling
    (one decode step per token), times ``num_speculative_tokens + 1`` with speculative decoding.
    None when the roofline is unknown or the speculative config cannot be read (then not judged)."""
    if roofline_tok_s is None or roofline_tok_s <= 0:
        return None
    k = num_speculative_tokens(vllm_args)
    return None if k is None else roofline_tok_s * (k + 1)


__all__ = [
    "BURST_SHARE",
    "CEILING_TOLERANCE",
    "FLUSH_GAP_S",
    "MAX_TOKENS_PER_CHUNK",
    "MIN_DECODE_SPAN_S",
    "Kind",
    "Unmeasurable",
    "describe_counts",
    "num_speculative_tokens",
    "stream_ceiling_tok_s",
    "unmeasurable",
]
