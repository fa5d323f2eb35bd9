"""A run summarised: its headline numbers and the metrics compared across runs.

Definitions (names, labels, units, directions, the knee) are in ``roost/catalogue.py``; this module
only picks the values out of a :class:`~roost.records.RunRecord`:

- :func:`headline` gives the run's summary numbers;
- :func:`headline_rows` gives them as the rows every output shows (the report's summary, the
  Prefect headline table, the Slack message and ``roost run``), with the metric each is compared as;
- :func:`run_metrics` gives every metric the regression check compares: one per benchmark point
  (``decode_tok_s@prompt=N``, ``ttft_s@prompt=N``, ``output_tok_s@concurrency=C``) plus the run-level
  ``peak_output_tok_s``, ``start_to_healthy_s`` and ``error_requests``.
  With an MTP A/B, the speed-up at every paired point (``mtp_speedup@prompt=N``,
  ``mtp_speedup@concurrency=C``) and ``spec_acceptance_rate`` too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from roost import catalogue as C
from roost.bench import mtp
from roost.bench.knee import knee_of
from roost.catalogue import REFERENCE_PROMPT_TOKENS, Metric
from roost.errors import UserError
from roost.plan.args import parse_overrides
from roost.records import BenchPoint, Distribution, ProbeResult, RunRecord


class Measured(BaseModel):
    """One metric's value in one run, with the within-run sample it summarises when there is one
    (the point's per-request or per-repeat distribution): the regression check's within-run noise."""

    metric: Metric
    value: float
    sample: Distribution | None = None


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
    predicted_kv_cache_tokens: int | None = None
    logged_max_concurrency: float | None = None
    start_to_healthy_s: float | None = None
    points: int = 0
    requests: int = 0
    error_requests: int = 0
    unmeasurable_requests: int = 0
    mtp_speedup: float | None = None
    mtp_speedup_prompt_tokens: int | None = None
    spec_acceptance_rate: float | None = None
    vision_probe_ok: bool | None = None
    vision_probe_latency_s: float | None = None
    probes: list[ProbeResult] = Field(default_factory=list, description="The capability probes, in the order run.")


class HeadlineRow(BaseModel):
    """One headline number as every output shows it."""

    metric: Metric
    label: str
    value: float | None
    text: str = ""
    """The value as one line (what wide tables show; the terminal and Slack show rows with a value); with a
    missing value, why."""
    cell: str = ""
    """The value for a narrow table (``text`` without the explanation in ``note``); "" when it is ``text``."""
    note: str = ""
    """What ``text`` adds to ``cell``: shown under a narrow table ("" when nothing)."""
    compared_as: str | None = None
    """The name of the metric the regression check compares this row as (None: not compared)."""

    @property
    def short(self) -> str:
        """The value as a narrow table's cell shows it."""
        return self.cell or self.text


def prompt_points(record: RunRecord) -> list[BenchPoint]:
    """Measured prompt-length points, shortest prompt first."""
    pts = [p for p in record.points if p.kind == "prompt_length" and p.measured]
    return sorted(pts, key=lambda p: (p.prompt_tokens, p.concurrency))


def concurrency_points(record: RunRecord) -> list[BenchPoint]:
    """Measured concurrency points, lowest concurrency first."""
    pts = [p for p in record.points if p.kind == "concurrency" and p.measured]
    return sorted(pts, key=lambda p: (p.concurrency, p.prompt_tokens))


def reference_point(record: RunRecord) -> BenchPoint | None:
    """The prompt-length point nearest ``REFERENCE_PROMPT_TOKENS`` that has a decode rate; when none
    has one (every decode timing unmeasurable), the nearest with a TTFT, so the TTFT is still reported."""
    measured = [p for p in prompt_points(record) if p.ttft_s.median is not None]
    pts = [p for p in measured if p.decode_tok_s.median is not None] or measured
    if not pts:
        return None
    return min(pts, key=lambda p: (abs(p.prompt_tokens - REFERENCE_PROMPT_TOKENS), p.prompt_tokens))


def max_num_seqs(record: RunRecord) -> int | None:
    """The server's ``--max-num-seqs`` (its cap on running requests) from the run's vLLM args; None
    when not set (vLLM's default) or unreadable."""
    try:
        return parse_overrides(record.meta.vllm_args).max_num_seqs
    except UserError:
        return None


def pct_of_ceiling(decode_tok_s: float | None, ceiling_tok_s: float | None) -> float | None:
    """Decode rate as a percentage of the roofline ceiling."""
    if decode_tok_s is None or ceiling_tok_s is None or ceiling_tok_s <= 0:
        return None
    return 100.0 * decode_tok_s / ceiling_tok_s


def headline(record: RunRecord) -> Headline:
    """The summary numbers of one run."""
    ref = reference_point(record)
    knee = knee_of(concurrency_points(record))
    decode = ref.decode_tok_s.median if ref else None
    return Headline(
        **_spec_and_vision(record),
        decode_tok_s=decode,
        ttft_s=ref.ttft_s.median if ref else None,
        reference_prompt_tokens=ref.prompt_tokens if ref else None,
        decode_ceiling_tok_s=record.decode_ceiling_tok_s or None,  # 0: unknown (plan.fit.decode_ceiling_tok_s)
        decode_pct_of_ceiling=pct_of_ceiling(decode, record.decode_ceiling_tok_s),
        peak_output_tok_s=knee.peak_output_tok_s if knee else None,
        peak_concurrency=knee.peak_concurrency if knee else None,
        knee_concurrency=knee.concurrency if knee else None,
        knee_output_tok_s=knee.output_tok_s if knee else None,
        logged_kv_cache_tokens=record.serve.logged_kv_cache_tokens,
        predicted_kv_cache_tokens=record.serve.predicted_kv_cache_tokens,
        logged_max_concurrency=record.serve.logged_max_concurrency,
        start_to_healthy_s=record.serve.start_to_healthy_s,
        points=len([p for p in record.points if not p.skipped]),
        requests=sum(p.requests for p in record.points),
        error_requests=sum(p.errors for p in record.points),
        unmeasurable_requests=sum(p.unmeasurable for p in record.points),
    )


def point_name(p: BenchPoint) -> str:
    """``2,048-token prompt`` or ``24 concurrent``: a point as the summaries name it."""
    return f"{p.prompt_tokens:,}-token prompt" if p.kind == "prompt_length" else f"{p.concurrency} concurrent"


UNMEASURABLE_POINTS_SHOWN = 3
"""The headline names this many points with unmeasurable requests, then says how many more."""


def unmeasurable_text(record: RunRecord) -> str:
    """``2 of 67 (128-token prompt: 2)``: unmeasurable decode timings, and where ("" when none)."""
    total = sum(p.unmeasurable for p in record.points)
    if not total:
        return ""
    where = [f"{point_name(p)}: {p.unmeasurable}" for p in record.points if p.unmeasurable]
    more = len(where) - UNMEASURABLE_POINTS_SHOWN
    shown = ", ".join(where[:UNMEASURABLE_POINTS_SHOWN]) + (f", {more} more point{'s' if more > 1 else ''}" if more > 0 else "")
    return f"{total:,} of {sum(p.requests for p in record.points):,} ({shown})"


def _spec_and_vision(record: RunRecord) -> dict[str, Any]:
    """The Headline fields of the MTP A/B and the vision probe (None when the run had none)."""
    out: dict[str, Any] = {}
    ab = record.mtp_ab
    if ab is not None:
        ref = mtp.reference(ab)
        if ref is not None:
            out["mtp_speedup"], out["mtp_speedup_prompt_tokens"] = ref.speedup, ref.prompt_tokens
        if ab.acceptance is not None and ab.acceptance.rate is not None:
            out["spec_acceptance_rate"] = 100.0 * ab.acceptance.rate
    if record.vision_probe is not None:
        out["vision_probe_ok"] = record.vision_probe.ok
        out["vision_probe_latency_s"] = record.vision_probe.latency_s
    out["probes"] = list(record.probes)
    return out


def _spec_and_vision_rows(h: Headline, row: Callable[..., HeadlineRow]) -> list[HeadlineRow]:
    """Rows for the MTP A/B (speed-up at the reference prompt, draft acceptance) and the vision
    probe, only when the run has them."""
    rows = []
    if h.mtp_speedup is not None and h.mtp_speedup_prompt_tokens is not None:
        rows.append(row(C.MTP_SPEEDUP.at_prompt(h.mtp_speedup_prompt_tokens), h.mtp_speedup, compared=True))
    if h.spec_acceptance_rate is not None:
        rows.append(row(C.SPEC_ACCEPTANCE, h.spec_acceptance_rate, compared=True))
    for p in h.probes:
        metric = C.PROBE_LATENCY.model_copy(update={"label": f"{p.name} probe"})
        status = "passed" if p.ok else f"FAILED ({p.failure_class})"
        took = f" {'in' if p.ok else 'after'} {metric.format(p.latency_s)}" if p.latency_s is not None else ""
        rows.append(row(metric, p.latency_s, status + took, why=f"{status}, no time taken"))
    if h.vision_probe_ok is not None:
        status = "passed" if h.vision_probe_ok else "FAILED"
        took = f" in {C.VISION_PROBE_LATENCY.format(h.vision_probe_latency_s)}" \
            if h.vision_probe_latency_s is not None else ""
        rows.append(row(C.VISION_PROBE_LATENCY, h.vision_probe_latency_s, status + took,
                        why=f"{status}, no time taken"))
    return rows


def spec_metrics(record: RunRecord) -> list[Measured]:
    """The MTP A/B's compared metrics: the speed-up at every paired point and the draft acceptance."""
    ab = record.mtp_ab
    if ab is None:
        return []
    out = []
    for p in mtp.prompt_points(ab):
        if _finite(p.speedup):
            out.append(Measured(metric=C.MTP_SPEEDUP.at_prompt(p.prompt_tokens), value=float(p.speedup or 0.0)))
    for p in mtp.concurrency_points(ab):
        if _finite(p.speedup):
            out.append(Measured(metric=C.MTP_SPEEDUP.at_concurrency(p.concurrency), value=float(p.speedup or 0.0)))
    if ab.acceptance is not None and _finite(ab.acceptance.rate):
        out.append(Measured(metric=C.SPEC_ACCEPTANCE, value=100.0 * float(ab.acceptance.rate or 0.0)))
    return out


def headline_rows(record: RunRecord) -> list[HeadlineRow]:
    """The headline numbers, in the order and with the labels every output uses. The unmeasurable
    decode timings have a row only when there were some."""
    h = headline(record)
    ref = h.reference_prompt_tokens
    decode = C.DECODE.at_prompt(ref) if ref else C.DECODE
    ttft = C.TTFT.at_prompt(ref) if ref else C.TTFT

    missing = missing_reasons(record, h)

    def row(metric: Metric, value: float | None, text: str | None = None, compared: bool = False,
            why: str = "") -> HeadlineRow:
        if value is None:
            why = why or missing.get(metric.name.split("@")[0], "")
            text = f"{metric.format(None)} {why}" if why else metric.format(None)
        return HeadlineRow(metric=metric, label=metric.label, value=value,
                           text=text if text is not None else metric.format(value),
                           compared_as=metric.name if compared else None)

    kv = C.KV_CACHE_TOKENS.format(h.logged_kv_cache_tokens)
    if h.predicted_kv_cache_tokens is not None:
        kv += f" (plan {h.predicted_kv_cache_tokens:,})"
    return [
        row(decode, h.decode_tok_s, compared=True),
        row(ttft, h.ttft_s, compared=True),
        row(C.DECODE_CEILING, h.decode_ceiling_tok_s),
        row(C.DECODE_PCT_OF_CEILING, h.decode_pct_of_ceiling),
        row(C.PEAK_OUTPUT, h.peak_output_tok_s,
            f"{C.PEAK_OUTPUT.format(h.peak_output_tok_s)} @ {h.peak_concurrency} concurrent", compared=True),
        row(C.KNEE, h.knee_concurrency and float(h.knee_concurrency),
            f"{h.knee_concurrency} concurrent ({C.OUTPUT_THROUGHPUT.format(h.knee_output_tok_s)})"),
        _kv_row(row(C.KV_CACHE_TOKENS, h.logged_kv_cache_tokens and float(h.logged_kv_cache_tokens), kv), h),
        row(C.MAX_CONCURRENCY, h.logged_max_concurrency),
        *_spec_and_vision_rows(h, row),
        row(C.START_TO_HEALTHY, h.start_to_healthy_s, compared=True),
        row(C.ERROR_REQUESTS, float(h.error_requests) if h.requests else None,
            f"{h.error_requests:,} of {h.requests:,}", compared=True),
        *([_unmeasurable_row(record, h)] if h.unmeasurable_requests else []),
        *accuracy_rows(record),
    ]


def _kv_row(row: HeadlineRow, h: Headline) -> HeadlineRow:
    """The KV cache vLLM logged in the cell; what the plan predicted in the note."""
    if row.value is None or h.predicted_kv_cache_tokens is None:
        return row
    return row.model_copy(update={"cell": C.KV_CACHE_TOKENS.format(h.logged_kv_cache_tokens),
                                  "note": f"the plan predicted {C.KV_CACHE_TOKENS.format(h.predicted_kv_cache_tokens)}"})


def _unmeasurable_row(record: RunRecord, h: Headline) -> HeadlineRow:
    """``2 of 67`` in the cell; in the note, each point that had some with its count and why."""
    where = [f"{point_name(p)}: {p.unmeasurable}" + (f" ({p.unmeasurable_reasons})" if p.unmeasurable_reasons else "")
             for p in record.points if p.unmeasurable]
    more = len(where) - UNMEASURABLE_POINTS_SHOWN
    note = ", ".join(where[:UNMEASURABLE_POINTS_SHOWN]) + (f", {more} more point{'s' if more > 1 else ''}" if more > 0
                                                          else "")
    return HeadlineRow(metric=C.UNMEASURABLE, label=C.UNMEASURABLE.label, value=float(h.unmeasurable_requests),
                       text=unmeasurable_text(record), cell=f"{h.unmeasurable_requests:,} of {h.requests:,}", note=note)


def _no_points(points: list[BenchPoint], kind: str) -> str:
    """Why no point of ``kind`` (``prompt-length``, ``concurrency``) gave a value."""
    if not points:
        return f"(no {kind} point in the benchmark)"
    if all(p.skipped for p in points):
        return f"(every {kind} point skipped)"
    failed, sent = sum(p.errors for p in points), sum(p.requests for p in points)
    return f"(every request failed: {failed:,} of {sent:,})" if failed == sent else f"(no {kind} point has a value)"


def missing_reasons(record: RunRecord, h: Headline) -> dict[str, str]:
    """Why each headline number the run lacks is missing, by metric name (its part before ``@``): one short
    phrase for the value cell, e.g. ``(every decode timing unmeasurable: 67 of 67)``. A failed run names its
    stage for what its benchmark never measured; what the benchmark did measure says its own reason."""
    benchmarked = bool(record.points)
    failed = f"(the run failed at {record.failed_stage or 'setup'})" if record.status != "completed" else ""
    before = "" if benchmarked else failed  # the run failed before its benchmark
    prompts = [p for p in record.points if p.kind == "prompt_length"]
    conc = [p for p in record.points if p.kind == "concurrency"]
    ran = [p for p in prompts if p.measured]
    decode = ttft = before or _no_points(prompts, "prompt-length")
    if ran:
        bad = sum(p.unmeasurable for p in ran)
        done = sum(p.requests - p.errors for p in ran)
        decode = f"(every decode timing unmeasurable: {bad:,} of {done:,})" if bad else "(no decode timing recorded)"
        ttft = "(no TTFT recorded)"
    no_conc = before or _no_points(conc, "concurrency")
    started = any(a.ok for a in record.serve.attempts)
    not_logged = "(not in vLLM's log)" if started else failed or "(the server was started by an earlier run)"
    ceiling = ("(no weight size or host bandwidth to compute it from)" if record.audit
               else failed or "(no audit in this run's record)")
    out = {
        C.DECODE.name: decode, C.TTFT.name: ttft, C.DECODE_CEILING.name: ceiling,
        C.DECODE_PCT_OF_CEILING.name: before or ("(no decode rate)" if h.decode_tok_s is None else "(no decode ceiling)"),
        C.PEAK_OUTPUT.name: no_conc, C.KNEE.name: no_conc,
        C.KV_CACHE_TOKENS.name: not_logged, C.MAX_CONCURRENCY.name: not_logged,
        C.START_TO_HEALTHY.name: ("(the server never answered its health check)" if record.serve.attempts
                                  else failed or "(the server was started by an earlier run)"),
        C.ERROR_REQUESTS.name: before or "(no request was sent)",
    }
    return {k.split("@")[0]: v for k, v in out.items()}


def accuracy_rows(record: RunRecord) -> list[HeadlineRow]:
    """One row per evaluation: accuracy with its interval, and the paired change when there is one."""
    from roost.eval.suites import TASKS

    rows = []
    for e in record.evals:
        metric = C.accuracy_for(TASKS[e.task].title if e.task in TASKS else e.task, e.task)
        s = e.summary
        cell = C.fmt_accuracy(s.accuracy, s.ci_low, s.ci_high) + f" on {s.n:,}"
        notes = []
        if e.status != "completed":
            notes.append(f"stopped: {e.error[:80]}")
        if e.comparison is not None:
            notes.append(e.comparison.describe())
        text = cell + (f" ({notes[0]})" if e.status != "completed" else "") + \
            (f"; {e.comparison.describe()}" if e.comparison is not None else "")
        rows.append(HeadlineRow(metric=metric, label=metric.label,
                                value=100 * s.accuracy if s.accuracy is not None else None, text=text,
                                cell=cell if notes else "", note="; ".join(notes)))
    return rows


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def run_metrics(record: RunRecord) -> list[Measured]:
    """Every metric a completed run produced, in report order. A failed run produces none."""
    if record.status != "completed":
        return []
    out: list[Measured] = []
    for p in prompt_points(record):
        if _finite(p.decode_tok_s.median):
            out.append(Measured(metric=C.DECODE.at_prompt(p.prompt_tokens), value=float(p.decode_tok_s.median or 0.0),
                                sample=p.decode_tok_s))
        if _finite(p.ttft_s.median):
            out.append(Measured(metric=C.TTFT.at_prompt(p.prompt_tokens), value=float(p.ttft_s.median or 0.0),
                                sample=p.ttft_s))
    conc = concurrency_points(record)
    for p in conc:
        if _finite(p.output_tok_s.median):
            out.append(Measured(metric=C.OUTPUT_THROUGHPUT.at_concurrency(p.concurrency),
                                value=float(p.output_tok_s.median or 0.0), sample=p.output_tok_s))
    knee = knee_of(conc)
    if knee is not None:
        peak = next((p for p in conc if p.concurrency == knee.peak_concurrency), None)
        out.append(Measured(metric=C.PEAK_OUTPUT, value=knee.peak_output_tok_s,
                            sample=peak.output_tok_s if peak is not None else None))
    if _finite(record.serve.start_to_healthy_s):
        out.append(Measured(metric=C.START_TO_HEALTHY, value=float(record.serve.start_to_healthy_s or 0.0)))
    if record.points:
        out.append(Measured(metric=C.ERROR_REQUESTS, value=float(sum(p.errors for p in record.points))))
    out += spec_metrics(record)
    seen: set[str] = set()
    unique = []
    for m in out:  # two points with the same prompt length or concurrency: the first one counts
        if m.metric.name not in seen:
            seen.add(m.metric.name)
            unique.append(m)
    return unique


__all__ = ["Headline", "HeadlineRow", "Measured", "headline", "headline_rows", "max_num_seqs", "point_name",
           "run_metrics", "unmeasurable_text"]
