"""One comparison of a sweep's variants: a row each (throughput at each concurrency, TTFT, decode, peak),
and the best variant named with its margin over the noise band. Pure: records in, a comparison out.

The objective is one of the headline metrics (``roost.headline.headline_rows``): the peak aggregate
output tok/s by default (the recipes chose --max-num-seqs 20 by it), the decode rate or the TTFT at
the reference prompt. The best variant is compared with the runner-up the way the regression check
compares a run with its baseline (``roost.regress.judge``): the move counts when it exceeds
``max(rel_floor x |runner-up|, mad_k x s, metric.abs_floor)``, where ``s`` pools the two runs' own
spreads over their repeats (``roost.regress.pooled_sd``). Within that band the two are not told apart,
and the comparison says so instead of naming a winner.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from roost import catalogue as C
from roost.catalogue import Direction, Metric
from roost.headline import Measured, concurrency_points, headline, headline_rows, run_metrics
from roost.records import RunRecord
from roost.regress import RegressConfig, pooled_sd
from roost.sweep.state import VariantState

Objective = Literal["peak-output", "decode", "ttft"]
OBJECTIVES: dict[str, Metric] = {"peak-output": C.PEAK_OUTPUT, "decode": C.DECODE, "ttft": C.TTFT}
"""Objective -> the headline metric it is (decode and TTFT at the run's reference prompt)."""


class VariantRow(BaseModel):
    variant: str
    status: str
    host: str = ""
    run_id: str = ""
    flow_run_name: str = ""
    reason: str = ""
    objective: float | None = None
    peak_output_tok_s: float | None = None
    peak_concurrency: int | None = None
    knee_concurrency: int | None = None
    decode_tok_s: float | None = None
    ttft_s: float | None = None
    reference_prompt_tokens: int | None = None
    output_tok_s: dict[int, float] = Field(default_factory=dict, description="concurrency -> aggregate output tok/s")
    measured_earlier: bool = False


class Best(BaseModel):
    variant: str
    value: float
    runner_up: str | None = None
    runner_up_value: float | None = None
    margin: float | None = Field(default=None, description="How much better than the runner-up, in the metric's unit.")
    margin_pct: float | None = None
    noise_band: float | None = Field(default=None, description="The move that counts, in the metric's unit.")
    noise_sd: float | None = None
    clear: bool = Field(default=False, description="The margin exceeds the noise band.")


class SweepComparison(BaseModel):
    objective: Objective
    metric: Metric
    rows: list[VariantRow]
    best: Best | None = None
    concurrencies: list[int] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list, description="Variants never measured, with why.")

    @property
    def summary(self) -> str:
        """One sentence: the best variant and its margin, or why there is none."""
        b, m = self.best, self.metric
        if b is None:
            return f"no variant measured {m.label}"
        if b.runner_up is None:
            return f"only {b.variant} measured {m.label} ({m.format(b.value)})"
        pct = f" ({b.margin_pct:+.1f}%)" if b.margin_pct is not None else ""
        band = m.format(b.noise_band)
        if b.clear:
            return (f"best: {b.variant} at {m.format(b.value)}, {m.format(b.margin)} better than {b.runner_up}{pct}, "
                    f"beyond the noise band of {band}")
        return (f"no clear best: {b.variant} ({m.format(b.value)}) and {b.runner_up} ({m.format(b.runner_up_value)}) "
                f"differ by {m.format(b.margin)}{pct}, within the noise band of {band}")


def _measured(record: RunRecord, prefix: str) -> Measured | None:
    """The headline metric whose name starts with ``prefix`` (decode and TTFT: at the reference prompt)."""
    rows = [r for r in headline_rows(record) if r.compared_as and r.compared_as.split("@")[0] == prefix]
    if not rows:
        return None
    by_name = {m.metric.name: m for m in run_metrics(record)}
    return by_name.get(rows[0].compared_as or "")


def compare(states: list[VariantState], records: dict[str, RunRecord], objective: Objective = "peak-output",
            config: RegressConfig | None = None) -> SweepComparison:
    """The comparison of every variant (``records``: run id -> record of the done and measured ones)."""
    cfg = config or RegressConfig()
    metric = OBJECTIVES[objective]
    prefix = metric.name
    rows: list[VariantRow] = []
    measured: list[tuple[VariantRow, Measured]] = []
    concurrencies: set[int] = set()
    for s in states:
        row = VariantRow(variant=s.name, status=s.status, host=s.host, run_id=s.run_id, flow_run_name=s.flow_run_name,
                         reason=s.reason, measured_earlier=s.status == "measured")
        rec = records.get(s.run_id) if s.run_id else None
        if rec is not None and rec.status == "completed":
            h = headline(rec)
            row.host = row.host or rec.meta.host
            row.peak_output_tok_s, row.peak_concurrency = h.peak_output_tok_s, h.peak_concurrency
            row.knee_concurrency, row.decode_tok_s, row.ttft_s = h.knee_concurrency, h.decode_tok_s, h.ttft_s
            row.reference_prompt_tokens = h.reference_prompt_tokens
            row.output_tok_s = {p.concurrency: float(p.output_tok_s.median) for p in concurrency_points(rec)
                                if p.output_tok_s.median is not None}
            concurrencies |= set(row.output_tok_s)
            m = _measured(rec, prefix)
            if m is not None:
                row.objective = m.value
                measured.append((row, m))
        rows.append(row)
    out = SweepComparison(objective=objective, metric=metric, rows=rows, concurrencies=sorted(concurrencies),
                          missing=[f"{s.name}: {s.reason or s.status}" for s in states if s.status == "missing"])
    if not measured:
        return out
    higher = metric.direction == Direction.HIGHER
    ranked = sorted(measured, key=lambda rm: rm[1].value, reverse=higher)
    (best_row, best), rest = ranked[0], ranked[1:]
    out.best = Best(variant=best_row.variant, value=best.value)
    if rest:
        runner_row, runner = rest[0]
        margin = abs(best.value - runner.value)
        noise = pooled_sd([], [best.sample, runner.sample])
        band = max(cfg.rel_floor * abs(runner.value), cfg.mad_k * noise, metric.abs_floor)
        out.best = out.best.model_copy(update={
            "runner_up": runner_row.variant, "runner_up_value": runner.value, "margin": margin,
            "margin_pct": 100.0 * margin / abs(runner.value) if runner.value else None,
            "noise_band": band, "noise_sd": noise, "clear": margin > band})
    return out
