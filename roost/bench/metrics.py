"""The formulas of roost's benchmark numbers, as pure functions over one record per request.

What each number means (TTFT, TPOT, ITL, end-to-end latency, decode tok/s, prefill tok/s,
aggregate output tok/s, request rate; how other tools name them) is defined once, in ``roost/catalogue.py``; this
module computes them, with one test each in ``tests/roost/bench/test_bench_metrics.py``. The
client (``roost/vllm/client.py``) only records timestamps and counts into a
:class:`~roost.vllm.stream.RequestRecord` (a *token chunk* is defined in ``roost/vllm/stream.py``);
the sweeps (``roost/bench/sweep.py``) only group records into steps and points.

Timestamps are ``time.perf_counter()`` seconds taken by the client when the bytes arrived.
``completion_tokens`` comes from the server's streamed usage (``stream_options.include_usage``);
when the stream carries no usage, it is the number of token chunks and the record is marked
``usage_missing`` (a lower bound if chunks merged tokens). A step is a set of requests sent
together, timed from the first send to the last completion.

Percentiles are linear interpolation between closest ranks (``numpy.percentile``'s default, which
``vllm bench serve`` uses); p50 is the median. Only completed requests (no error) enter the
distributions, as in ``vllm bench serve``; failed ones are counted in ``errors``. A completed request
whose decode timing is *unmeasurable* (faster than the roofline ceiling, or delivered in a burst:
``roost/bench/validity.py``) stays in TTFT, end-to-end latency, prefill and the throughputs but is
left out of TPOT, ITL and decode tok/s, and is counted in ``unmeasurable``.

vLLM stamps TTFT at the first chunk that has ``choices`` (the role chunk); in vLLM's server the
role chunk and the first token are written back to back, so the two agree to microseconds — the
side-by-side test in ``tests/roost/bench/test_bench_vs_vllm.py`` checks it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from roost.bench.validity import Kind, unmeasurable
from roost.records import Distribution
from roost.vllm.stream import RequestRecord

# --- per request ------------------------------------------------------------------------------


def ttft(r: RequestRecord) -> float | None:
    """Time to first token: request sent -> first token chunk (s)."""
    if r.t_first is None:
        return None
    return r.t_first - r.t_sent


def e2el(r: RequestRecord) -> float | None:
    """End-to-end latency: request sent -> last token chunk (s)."""
    if r.t_last is None:
        return None
    return r.t_last - r.t_sent


def output_tokens(r: RequestRecord) -> int | None:
    """Generated tokens: usage ``completion_tokens``, or the token-chunk count when usage is missing."""
    if r.completion_tokens is not None:
        return r.completion_tokens
    return len(r.token_times) or None


def tpot(r: RequestRecord) -> float | None:
    """Time per output token after the first: ``(t_last - t_first) / (completion_tokens - 1)`` (s)."""
    n = output_tokens(r)
    if n is None or n < 2 or r.t_first is None or r.t_last is None or r.t_last <= r.t_first:
        return None
    return (r.t_last - r.t_first) / (n - 1)


def decode_tok_s(r: RequestRecord) -> float | None:
    """Per-request decode rate: ``(completion_tokens - 1) / (t_last - t_first)`` (tok/s)."""
    t = tpot(r)
    return None if t is None else 1.0 / t


def itl(r: RequestRecord) -> list[float]:
    """Inter-token latencies: the gaps between consecutive token chunks (s)."""
    ts = r.token_times
    return [b - a for a, b in itertools.pairwise(ts)]


def prefill_tok_s(r: RequestRecord) -> float | None:
    """Prefill rate: usage ``prompt_tokens`` / TTFT (tok/s)."""
    t = ttft(r)
    if t is None or t <= 0 or not r.prompt_tokens:
        return None
    return r.prompt_tokens / t


# --- per step ---------------------------------------------------------------------------------


def completed(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The requests that count in distributions and throughputs."""
    return [r for r in records if r.ok]


def output_throughput(records: Sequence[RequestRecord], wall_s: float) -> float | None:
    """Aggregate output tok/s: completion tokens of completed requests / wall time of the step. None
    for a step that measured nothing (no completed request, or no token from any of them), so that
    such a repeat adds nothing to the point's per-repeat distribution instead of a 0."""
    if wall_s <= 0:
        return None
    tokens = sum(output_tokens(r) or 0 for r in completed(records))
    return tokens / wall_s if tokens > 0 else None


def request_throughput(records: Sequence[RequestRecord], wall_s: float) -> float | None:
    """Request rate: completed requests / wall time of the step (req/s)."""
    if wall_s <= 0:
        return None
    done = completed(records)
    return len(done) / wall_s if done else None


# --- statistics -------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0-100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile p={p} is outside 0..100")
    xs = sorted(values)
    rank = p / 100 * (len(xs) - 1)
    lo = math.floor(rank)
    hi = math.ceil(rank)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def median(values: Sequence[float]) -> float | None:
    """p50."""
    return percentile(values, 50)


def summarize(values: Iterable[float | None]) -> Distribution:
    """count, mean, median (p50), min, max, p10, p90, p99 of the non-None values."""
    xs = [v for v in values if v is not None]
    if not xs:
        return Distribution()
    return Distribution(
        count=len(xs),
        mean=sum(xs) / len(xs),
        median=percentile(xs, 50),
        min=min(xs),
        max=max(xs),
        p10=percentile(xs, 10),
        p90=percentile(xs, 90),
        p99=percentile(xs, 99),
    )


# --- points -----------------------------------------------------------------------------------


class Step(BaseModel):
    """Requests sent together and the wall time from the first send to the last completion."""

    records: list[RequestRecord]
    wall_s: float


class PointStats(BaseModel):
    """What a point (a prompt length or a concurrency level) reports, over its repeated steps.

    Per-request metrics pool the completed requests of every repeat (the decode timings only those
    with a measurable decode of two tokens or more); per-step metrics (the throughputs) are one value
    per repeat that measured something, summarised as median/min/max over those repeats: a repeat
    with no completed request or no token contributes nothing (not a 0).
    """

    requests: int
    errors: int
    usage_missing: int
    unmeasurable: int
    unmeasurable_kinds: list[Kind]
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    decode_tok_s: Distribution
    prefill_tok_s: Distribution
    prompt_tokens: Distribution
    output_tokens: Distribution
    output_throughput: Distribution
    request_throughput: Distribution
    wall_s: Distribution


def point_stats(steps: Sequence[Step], ceiling_tok_s: float | None = None) -> PointStats:
    """Aggregate the repeats of one point (see :class:`PointStats`); ``ceiling_tok_s`` is the fastest
    one stream can decode (``roost.bench.validity.stream_ceiling_tok_s``), None when unknown."""
    records = [r for s in steps for r in s.records]
    done = completed(records)
    kinds: list[Kind] = []
    timed: list[RequestRecord] = []  # completed, measurable and with a decode to time: the decode timings
    for r in done:
        why = unmeasurable(r, ceiling_tok_s)
        if why is not None:
            kinds.append(why.kind)
        elif tpot(r) is not None:  # fewer than two tokens: no decode, no inter-token gap to add
            timed.append(r)
    return PointStats(
        requests=len(records),
        errors=sum(1 for r in records if r.error),
        usage_missing=sum(1 for r in records if r.usage_missing),
        unmeasurable=len(kinds),
        unmeasurable_kinds=kinds,
        ttft=summarize(ttft(r) for r in done),
        tpot=summarize(tpot(r) for r in timed),
        itl=summarize(g for r in timed for g in itl(r)),
        e2el=summarize(e2el(r) for r in done),
        decode_tok_s=summarize(decode_tok_s(r) for r in timed),
        prefill_tok_s=summarize(prefill_tok_s(r) for r in done),
        prompt_tokens=summarize(float(r.prompt_tokens) for r in done if r.prompt_tokens is not None),
        output_tokens=summarize(float(n) for r in done if (n := output_tokens(r)) is not None),
        output_throughput=summarize(output_throughput(s.records, s.wall_s) for s in steps),
        request_throughput=summarize(request_throughput(s.records, s.wall_s) for s in steps),
        wall_s=summarize(s.wall_s for s in steps),
    )
