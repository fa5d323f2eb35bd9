"""What the metering gateway costs a client, from one run's two sweeps (pure).

A landing that keeps its server behind the gateway benchmarks it twice with the same settings: sent
to vLLM directly (``record.points``) and through the gateway with a key of roost's own
(``record.gateway.points``). Each point measured both ways pairs by (kind, prompt length,
concurrency); its hop is the difference of the TTFT medians and p99s and the ratio of the aggregate
output rates (definitions: ``roost.catalogue.GATEWAY_ADDED_TTFT``, ``GATEWAY_ADDED_TTFT_P99``,
``GATEWAY_THROUGHPUT_RATIO``). The two sweeps run one after the other on a live server, so a
difference below the run's own noise is not the gateway's: a hop is read beside the direct spread.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from roost.records import BenchPoint, Usage


class HopPoint(BaseModel):
    """One point measured directly and through the gateway."""

    kind: str
    prompt_tokens: int
    concurrency: int
    direct_ttft_p50_s: float | None = None
    gateway_ttft_p50_s: float | None = None
    added_ttft_ms: float | None = Field(default=None, description="Median TTFT through the gateway - direct, in ms.")
    direct_ttft_p99_s: float | None = None
    gateway_ttft_p99_s: float | None = None
    added_ttft_p99_ms: float | None = None
    direct_tok_s: float | None = Field(default=None, description="Median aggregate output tok/s, direct.")
    gateway_tok_s: float | None = None
    throughput_ratio: float | None = Field(default=None, description="gateway_tok_s / direct_tok_s.")
    errors: int = Field(default=0, description="Requests that failed through the gateway.")

    @property
    def label(self) -> str:
        return f"{self.prompt_tokens:,}-token prompt" if self.kind == "prompt_length" else f"{self.concurrency} concurrent"


class HopSummary(BaseModel):
    """The hop over a run's points: median and worst added TTFT, lowest throughput ratio."""

    points: int
    added_ttft_ms_median: float | None = None
    added_ttft_ms_max: float | None = None
    added_ttft_p99_ms_max: float | None = None
    throughput_ratio_min: float | None = None


def _key(p: BenchPoint) -> tuple[str, int, int]:
    return (p.kind, p.prompt_tokens_target or p.prompt_tokens, p.concurrency)


def _diff_ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (a - b) * 1000.0


def hop_points(direct: list[BenchPoint], via: list[BenchPoint]) -> list[HopPoint]:
    """The points measured both ways (neither skipped), in the direct sweep's order."""
    through = {_key(p): p for p in via if not p.skipped}
    out: list[HopPoint] = []
    for d in direct:
        g = through.get(_key(d))
        if d.skipped or g is None:
            continue
        d_tok, g_tok = d.output_tok_s.median, g.output_tok_s.median
        out.append(HopPoint(
            kind=d.kind, prompt_tokens=_key(d)[1], concurrency=d.concurrency,
            direct_ttft_p50_s=d.ttft_s.median, gateway_ttft_p50_s=g.ttft_s.median,
            added_ttft_ms=_diff_ms(g.ttft_s.median, d.ttft_s.median),
            direct_ttft_p99_s=d.ttft_s.p99, gateway_ttft_p99_s=g.ttft_s.p99,
            added_ttft_p99_ms=_diff_ms(g.ttft_s.p99, d.ttft_s.p99),
            direct_tok_s=d_tok, gateway_tok_s=g_tok,
            throughput_ratio=(g_tok / d_tok) if d_tok and g_tok is not None else None,
            errors=g.errors))
    return out


def summarize(hops: list[HopPoint]) -> HopSummary:
    added = [h.added_ttft_ms for h in hops if h.added_ttft_ms is not None]
    p99 = [h.added_ttft_p99_ms for h in hops if h.added_ttft_p99_ms is not None]
    ratios = [h.throughput_ratio for h in hops if h.throughput_ratio is not None]
    return HopSummary(points=len(hops), added_ttft_ms_median=statistics.median(added) if added else None,
                      added_ttft_ms_max=max(added, default=None), added_ttft_p99_ms_max=max(p99, default=None),
                      throughput_ratio_min=min(ratios, default=None))


def counted_usage(requests: Sequence[Mapping[str, Any]]) -> Usage:
    """What the benchmark itself sent and received through the gateway: every request it made (warm-up
    included) that the gateway answered, with the token counts its usage chunks reported."""
    n = prompt = completion = 0
    for r in requests:
        status = r.get("status_code")
        if status is None:  # never answered (connection refused, cut before the headers): not metered
            continue
        n += 1
        prompt += int(r.get("prompt_tokens") or 0)
        completion += int(r.get("completion_tokens") or 0)
    return Usage(requests=n, prompt_tokens=prompt, completion_tokens=completion)
