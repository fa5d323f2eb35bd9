"""A vLLM server's own ``/metrics`` (Prometheus text exposition format): the series roost reads, the
parser, and the numbers roost diffs. (Prometheus the server, its HTTP API: :mod:`roost.monitor.prometheus`.)

A benchmark point scrapes ``/metrics`` before and after its steps (and polls the gauges during
them); :func:`step_delta` turns two scrapes into ``BenchPoint.metrics_delta``: counter increases
(speculative-decoding drafts and accepted tokens, prefix-cache queries and hits, preemptions,
prompt and generated tokens, finished requests), the derived rates, and the peak of the gauges
seen (KV-cache usage, running and waiting requests). Series are summed over their label sets (one
server serves one model; per-position acceptance is summed into the total).

These are the server's own account of the point, independent of the client: ``generation_tokens``
is what vLLM's engine generated (equal to the completion tokens of the point's requests when none
failed), and ``request_tpot_s_mean`` is vLLM's mean per-request time per output token
(``vllm:request_time_per_output_token_seconds`` sum / count: ``(last - first token) / (tokens - 1)``
from the engine's own token times, the formula roost applies to arrival times), comparable with
the point's ``tpot_s.mean``.

:func:`spec_counters` reads the speculative-decoding counters of one scrape, per draft position
included (``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``), for the MTP A/B.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field


class Sample(BaseModel):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float


# Histograms (``_bucket``/``_sum``/``_count`` series): per-request latencies as vLLM's engine saw them.
TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"
TPOT_HISTOGRAM = "vllm:request_time_per_output_token_seconds"

SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"

# Counter name in the delta -> exposition names, newest vLLM first (older releases used gpu_*).
COUNTERS: dict[str, tuple[str, ...]] = {
    "spec_decode_num_drafts": (SPEC_DRAFTS,),
    "spec_decode_num_draft_tokens": (SPEC_DRAFT_TOKENS,),
    "spec_decode_num_accepted_tokens": (SPEC_ACCEPTED,),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "num_preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "request_success": ("vllm:request_success_total",),
    # histograms: the sum and count of vLLM's per-request TPOT and decode time (engine token times)
    "request_tpot_s_sum": (TPOT_HISTOGRAM + "_sum",),
    "request_tpot_count": (TPOT_HISTOGRAM + "_count",),
    "request_decode_time_s_sum": ("vllm:request_decode_time_seconds_sum",),
    "request_decode_count": ("vllm:request_decode_time_seconds_count",),
    # time requests spent waiting for a running slot (past --max-num-seqs or the KV pool): not sampled,
    # so a queue shorter than the gauge poll interval still shows
    "request_queue_time_s_sum": ("vllm:request_queue_time_seconds_sum",),
    "request_queue_count": ("vllm:request_queue_time_seconds_count",),
}

# Gauge name in the delta (peak during the step) -> exposition names.
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
}


def _parse_labels(text: str, start: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at the ``{``; return the labels and the index after ``}``."""
    labels: dict[str, str] = {}
    i = start + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i < n and text[i] == "}":
            return labels, i + 1
        eq = text.find("=", i)
        if eq < 0:
            raise ValueError("label without '='")
        key = text[i:eq].strip()
        i = eq + 1
        if i >= n or text[i] != '"':
            raise ValueError("label value not quoted")
        i += 1
        buf: list[str] = []
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                nxt = text[i + 1]
                buf.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
            else:
                buf.append(text[i])
                i += 1
        labels[key] = "".join(buf)
        i += 1
    raise ValueError("unterminated label set")


def parse_text(text: str) -> list[Sample]:
    """Every sample in a Prometheus text exposition. Malformed lines are skipped, not fatal."""
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            brace = line.find("{")
            space = line.find(" ")
            if brace >= 0 and (space < 0 or brace < space):
                name = line[:brace]
                labels, end = _parse_labels(line, brace)
                rest = line[end:].split()
            else:
                name, *rest = line.split()
                labels = {}
            if not rest:
                continue
            value = float(rest[0])  # float() accepts NaN, +Inf, -Inf
        except ValueError:
            continue
        samples.append(Sample(name=name, labels=labels, value=value))
    return samples


def totals(samples: Iterable[Sample]) -> dict[str, float]:
    """Sum of each series name over its label sets (NaN samples ignored)."""
    out: dict[str, float] = {}
    for s in samples:
        if math.isnan(s.value):
            continue
        out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _pick(t: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    for n in names:
        if n in t:
            return t[n]
    return None


def gauges(t: Mapping[str, float]) -> dict[str, float]:
    """The gauges roost watches, from one scrape's totals."""
    out: dict[str, float] = {}
    for key, names in GAUGES.items():
        v = _pick(t, names)
        if v is not None:
            out[key] = v
    return out


def step_delta(
    before: Mapping[str, float] | None,
    after: Mapping[str, float] | None,
    gauge_peaks: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """``BenchPoint.metrics_delta`` from two scrapes' :func:`totals` and the gauge peaks seen.

    Counters present in both scrapes give ``after - before`` (a counter that went down means
    the server restarted: the delta is then omitted). Derived: ``spec_decode_acceptance_rate``
    (accepted / draft tokens), ``prefix_cache_hit_rate`` (hits / queries), ``request_tpot_s_mean``
    (vLLM's mean per-request TPOT) and ``request_queue_time_s_mean`` (mean time a request waited for a
    running slot) when their denominators are non-zero.
    Gauges give ``<name>_max``.
    """
    out: dict[str, float] = {}
    if before is not None and after is not None:
        for key, names in COUNTERS.items():
            b, a = _pick(before, names), _pick(after, names)
            if a is None or b is None or a < b:
                continue
            out[key] = a - b
        drafts = out.get("spec_decode_num_draft_tokens")
        if drafts:
            out["spec_decode_acceptance_rate"] = out.get("spec_decode_num_accepted_tokens", 0.0) / drafts
        queries = out.get("prefix_cache_queries")
        if queries:
            out["prefix_cache_hit_rate"] = out.get("prefix_cache_hits", 0.0) / queries
        queued = out.get("request_queue_count")
        if queued:
            out["request_queue_time_s_mean"] = out.get("request_queue_time_s_sum", 0.0) / queued
        finished = out.get("request_tpot_count")
        if finished:
            out["request_tpot_s_mean"] = out.get("request_tpot_s_sum", 0.0) / finished
    peaks: dict[str, float] = dict(gauge_peaks or {})
    for snap in (before, after):
        if snap is not None:
            for k, v in gauges(snap).items():
                peaks[k] = max(v, peaks.get(k, v))
    for k, v in peaks.items():
        out[f"{k}_max"] = v
    return out


# --- speculative decoding: draft acceptance, overall and per position ---------------------------------

SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
"""Accepted tokens per draft position, one series per ``position`` label ("0", "1", ...)."""


class SpecCounters(BaseModel):
    """vLLM's speculative-decoding counters (``vllm/v1/spec_decode/metrics.py``), or their increase
    over a span: drafts proposed, draft tokens, accepted tokens, accepted tokens per draft position.

    Rates as vLLM defines them: the acceptance rate is accepted / draft tokens; the mean acceptance
    length (bonus token included) is ``1 + accepted / drafts``; the acceptance rate at position i is
    accepted at i / drafts (a draft's token i is only accepted if tokens 0..i-1 were).
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: list[float] = Field(default_factory=list)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def per_position_rates(self) -> list[float]:
        if self.drafts <= 0:
            return []
        return [a / self.drafts for a in self.accepted_per_position]

    def minus(self, before: SpecCounters) -> SpecCounters | None:
        """The increase since ``before``; None when a counter went down (the server restarted)."""
        pos_before = before.accepted_per_position + [0.0] * (len(self.accepted_per_position) - len(before.accepted_per_position))
        diffs = [self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                 self.accepted_tokens - before.accepted_tokens,
                 *(a - b for a, b in zip(self.accepted_per_position, pos_before, strict=False))]
        if any(d < 0 for d in diffs) or len(before.accepted_per_position) > len(self.accepted_per_position):
            return None
        return SpecCounters(drafts=diffs[0], draft_tokens=diffs[1], accepted_tokens=diffs[2],
                            accepted_per_position=diffs[3:])


def per_position(samples: Iterable[Sample], name: str = SPEC_ACCEPTED_PER_POS) -> dict[int, float]:
    """``name``'s value per ``position`` label, summed over the other labels (engines); samples
    without an integer position label (or NaN) are ignored."""
    out: dict[int, float] = {}
    for s in samples:
        if s.name != name or math.isnan(s.value):
            continue
        pos = s.labels.get("position", "")
        if not pos.isdigit():
            continue
        out[int(pos)] = out.get(int(pos), 0.0) + s.value
    return out


def spec_counters(samples: Iterable[Sample]) -> SpecCounters | None:
    """The speculative-decoding counters of one scrape; None when the server runs without a draft
    (vLLM exports these series only with ``--speculative-config``)."""
    items = list(samples)
    t = totals(items)
    if SPEC_DRAFTS not in t or SPEC_DRAFT_TOKENS not in t or SPEC_ACCEPTED not in t:
        return None
    pos = per_position(items)
    width = max(pos) + 1 if pos else 0
    return SpecCounters(drafts=t[SPEC_DRAFTS], draft_tokens=t[SPEC_DRAFT_TOKENS], accepted_tokens=t[SPEC_ACCEPTED],
                        accepted_per_position=[pos.get(i, 0.0) for i in range(width)])
