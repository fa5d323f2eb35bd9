# ruff: noqa: RUF001, RUF002  (typographic characters in user-facing text are deliberate)
"""The numbers a run is summarised by, and the metrics compared across runs. One definition each.

Headline numbers (the report's first table, the Slack message, the results table):

- ``decode_tok_s`` / ``ttft_s``: the single-stream decode rate and time to first token at the
  *reference prompt*: the prompt-length point nearest ``REFERENCE_PROMPT_TOKENS`` (2048, the seeds'
  headline prompt), ties going to the shorter prompt.
- ``decode_pct_of_ceiling``: ``decode_tok_s`` as a percentage of the run's roofline ceiling.
- ``peak_output_tok_s``: the highest aggregate output rate over the concurrency sweep.
- ``knee_concurrency``: the lowest concurrency whose aggregate output rate reaches ``KNEE_FRACTION``
  (90 %) of the peak; beyond it more concurrency buys little.

Compared metrics (``run_metrics``): one per benchmark point (``decode_tok_s@prompt=N``,
``ttft_s@prompt=N``, ``output_tok_s@concurrency=N``) plus run-level ones (``peak_output_tok_s``,
``start_to_healthy_s``, ``error_requests``), each with the direction that counts as better.
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import BaseModel

from roost.records import BenchPoint, RunRecord

REFERENCE_PROMPT_TOKENS = 2048
KNEE_FRACTION = 0.9


class Direction(StrEnum):
    HIGHER = "higher_is_better"
    LOWER = "lower_is_better"


class MetricDef(BaseModel):
    """What a metric is called, its unit and which way is better."""

    name: str
    label: str
    unit: str
    direction: Direction
    abs_floor: float = 0.0
    """Smallest absolute move that can count as a change (e.g. 0.5 for a count of failed requests)."""


class Measured(BaseModel):
    """One metric's value in one run."""

    metric: MetricDef
    value: float


class Headline(BaseModel):
    """The run's summary numbers; every field is ``None`` when the run did not produce it."""

    decode_tok_s: float | None = None
    ttft_s: float | None = None
    reference_prompt_tokens: int | None = None
    decode_ceiling_tok_s: float | None = None
    decode_pct_of_ceiling: float | None = None
    peak_output_tok_s: float | None = None
    peak_concurrency: int | None = None
    knee_concurrency: int | None = None
    knee_output_tok_s: float | None = None
    logged_kv_cache_tokens: int | None = None
    logged_max_concurrency: float | None = None
    start_to_healthy_s: float | None = None
    points: int = 0
    requests: int = 0
    error_requests: int = 0


def _usable(p: BenchPoint) -> bool:
    return not p.skipped and p.requests > p.errors


def prompt_points(record: RunRecord) -> list[BenchPoint]:
    """Measured prompt-length points, shortest prompt first."""
    pts = [p for p in record.points if p.kind == "prompt_length" and _usable(p)]
    return sorted(pts, key=lambda p: (p.prompt_tokens, p.concurrency))


def concurrency_points(record: RunRecord) -> list[BenchPoint]:
    """Measured concurrency points, lowest concurrency first."""
    pts = [p for p in record.points if p.kind == "concurrency" and _usable(p)]
    return sorted(pts, key=lambda p: (p.concurrency, p.prompt_tokens))


def reference_point(record: RunRecord) -> BenchPoint | None:
    """The prompt-length point nearest ``REFERENCE_PROMPT_TOKENS`` that has a decode rate."""
    pts = [p for p in prompt_points(record) if p.decode_tok_s_median is not None]
    if not pts:
        return None
    return min(pts, key=lambda p: (abs(p.prompt_tokens - REFERENCE_PROMPT_TOKENS), p.prompt_tokens))


def peak_point(points: list[BenchPoint]) -> BenchPoint | None:
    """The point with the highest aggregate output rate (the lower concurrency on a tie)."""
    pts = [p for p in points if p.output_tok_s is not None]
    if not pts:
        return None
    return max(pts, key=lambda p: (p.output_tok_s or 0.0, -p.concurrency))


def knee_point(points: list[BenchPoint], fraction: float = KNEE_FRACTION) -> BenchPoint | None:
    """The lowest-concurrency point reaching ``fraction`` of the peak aggregate output rate."""
    peak = peak_point(points)
    if peak is None or peak.output_tok_s is None:
        return None
    target = fraction * peak.output_tok_s
    pts = sorted((p for p in points if p.output_tok_s is not None), key=lambda p: p.concurrency)
    return next(p for p in pts if (p.output_tok_s or 0.0) >= target)


def pct_of_ceiling(decode_tok_s: float | None, ceiling_tok_s: float | None) -> float | None:
    """Decode rate as a percentage of the roofline ceiling."""
    if decode_tok_s is None or ceiling_tok_s is None or ceiling_tok_s <= 0:
        return None
    return 100.0 * decode_tok_s / ceiling_tok_s


def headline(record: RunRecord) -> Headline:
    """The summary numbers of one run."""
    ref = reference_point(record)
    conc = concurrency_points(record)
    peak = peak_point(conc)
    knee = knee_point(conc)
    decode = ref.decode_tok_s_median if ref else None
    return Headline(
        decode_tok_s=decode,
        ttft_s=ref.ttft_s_median if ref else None,
        reference_prompt_tokens=ref.prompt_tokens if ref else None,
        decode_ceiling_tok_s=record.decode_ceiling_tok_s,
        decode_pct_of_ceiling=pct_of_ceiling(decode, record.decode_ceiling_tok_s),
        peak_output_tok_s=peak.output_tok_s if peak else None,
        peak_concurrency=peak.concurrency if peak else None,
        knee_concurrency=knee.concurrency if knee else None,
        knee_output_tok_s=knee.output_tok_s if knee else None,
        logged_kv_cache_tokens=record.serve.logged_kv_cache_tokens,
        logged_max_concurrency=record.serve.logged_max_concurrency,
        start_to_healthy_s=record.serve.start_to_healthy_s,
        points=len([p for p in record.points if not p.skipped]),
        requests=sum(p.requests for p in record.points),
        error_requests=sum(p.errors for p in record.points),
    )


PEAK_OUTPUT = MetricDef(
    name="peak_output_tok_s", label="peak aggregate output tok/s", unit="tok/s", direction=Direction.HIGHER
)
START_TO_HEALTHY = MetricDef(
    name="start_to_healthy_s", label="cold start to /health", unit="s", direction=Direction.LOWER
)
ERROR_REQUESTS = MetricDef(
    name="error_requests", label="failed benchmark requests", unit="requests", direction=Direction.LOWER,
    abs_floor=0.5,
)


def _decode_at(prompt_tokens: int) -> MetricDef:
    return MetricDef(
        name=f"decode_tok_s@prompt={prompt_tokens}",
        label=f"decode tok/s @ {prompt_tokens:,}-token prompt",
        unit="tok/s",
        direction=Direction.HIGHER,
    )


def _ttft_at(prompt_tokens: int) -> MetricDef:
    return MetricDef(
        name=f"ttft_s@prompt={prompt_tokens}",
        label=f"TTFT @ {prompt_tokens:,}-token prompt",
        unit="s",
        direction=Direction.LOWER,
    )


def _output_at(concurrency: int) -> MetricDef:
    return MetricDef(
        name=f"output_tok_s@concurrency={concurrency}",
        label=f"aggregate output tok/s @ {concurrency} concurrent",
        unit="tok/s",
        direction=Direction.HIGHER,
    )


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def run_metrics(record: RunRecord) -> list[Measured]:
    """Every metric a completed run produced, in report order. A failed run produces none."""
    if record.status != "completed":
        return []
    out: list[Measured] = []
    for p in prompt_points(record):
        if _finite(p.decode_tok_s_median):
            out.append(Measured(metric=_decode_at(p.prompt_tokens), value=float(p.decode_tok_s_median or 0.0)))
        if _finite(p.ttft_s_median):
            out.append(Measured(metric=_ttft_at(p.prompt_tokens), value=float(p.ttft_s_median or 0.0)))
    conc = concurrency_points(record)
    for p in conc:
        if _finite(p.output_tok_s):
            out.append(Measured(metric=_output_at(p.concurrency), value=float(p.output_tok_s or 0.0)))
    peak = peak_point(conc)
    if peak is not None and _finite(peak.output_tok_s):
        out.append(Measured(metric=PEAK_OUTPUT, value=float(peak.output_tok_s or 0.0)))
    if _finite(record.serve.start_to_healthy_s):
        out.append(Measured(metric=START_TO_HEALTHY, value=float(record.serve.start_to_healthy_s or 0.0)))
    if record.points:
        out.append(Measured(metric=ERROR_REQUESTS, value=float(sum(p.errors for p in record.points))))
    seen: set[str] = set()
    unique = []
    for m in out:  # two points with the same prompt length or concurrency: the first one counts
        if m.metric.name not in seen:
            seen.add(m.metric.name)
            unique.append(m)
    return unique


def fmt_value(value: float | None, unit: str = "") -> str:
    """A number as the reports and messages print it: ``12.6 tok/s``, ``0.54 s``, ``390,070 tokens``."""
    if value is None or not math.isfinite(value):
        return "—"
    if unit in ("tokens", "requests", "") and float(value).is_integer():
        text = f"{int(value):,}"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    if unit == "%":
        return f"{text}%"
    return f"{text} {unit}".strip()


def fmt_change(change_pct: float | None) -> str:
    """A relative change with its sign: ``+4.1%``, ``−12.7%``."""
    if change_pct is None or not math.isfinite(change_pct):
        return "n/a"
    sign = "+" if change_pct >= 0 else "−"
    return f"{sign}{abs(change_pct):.1f}%"
