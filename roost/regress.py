"""Regression detection against the run's own history. Pure: records in, a verdict out.

Baseline: for each metric, the median over the last ``window`` completed runs with the same
``RunMeta.comparable_key()`` (model commit, image digest, vLLM args, host) that measured it.
A metric *regresses* when it moves the wrong way by more than the threshold

    max(rel_floor x |baseline|, mad_k x MAD(baseline values), metric.abs_floor)

where MAD is the median absolute deviation of those values (unscaled). A move the right way by more
than the same threshold is an *improvement*; anything smaller is *unchanged*. With no earlier
comparable run, the run *establishes the baseline* and the report says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from roost.catalogue import Direction, Metric
from roost.headline import run_metrics
from roost.records import RunMeta, RunRecord

Verdict = Literal["regressed", "improved", "unchanged", "new"]
Status = Literal["baseline", "ok", "regressed", "failed_run"]


class RegressConfig(BaseModel):
    """How a run is compared with its history."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(default=5, ge=1, description="How many of the latest comparable runs form the baseline.")
    rel_floor: float = Field(default=0.05, ge=0, description="Smallest relative move that counts (0.05 = 5%).")
    mad_k: float = Field(default=3.0, ge=0, description="Moves within k x the baseline's MAD are noise.")
    key_fields: list[str] | None = Field(
        default=None,
        description="RunMeta fields that make two runs comparable; None means RunMeta.comparable_key() "
        "(repo, commit, image digest, vLLM args, host). E.g. ['repo_id', 'host'] compares across image updates.",
    )

    @field_validator("key_fields")
    @classmethod
    def _known_fields(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            unknown = [f for f in value if f not in RunMeta.model_fields]
            if unknown or not value:
                known = ", ".join(RunMeta.model_fields)
                raise ValueError(f"key_fields {unknown or value!r}: choose RunMeta fields ({known})")
        return value


def key_of(meta: RunMeta, config: RegressConfig | None = None) -> tuple[str, ...]:
    """The comparability key of a run under ``config`` (``RunMeta.comparable_key()`` by default)."""
    if config is None or config.key_fields is None:
        return meta.comparable_key()
    out = []
    for name in config.key_fields:
        value = getattr(meta, name)
        out.append(" ".join(value) if isinstance(value, list) else str(value))
    return tuple(out)


class MetricComparison(BaseModel):
    """One metric of the current run against its baseline."""

    metric: Metric
    current: float
    baseline: float | None = None
    baseline_mad: float | None = None
    baseline_runs: int = 0
    threshold: float | None = None
    change: float | None = Field(default=None, description="current - baseline, in the metric's unit.")
    change_pct: float | None = Field(default=None, description="100 x change / |baseline|; None if baseline is 0.")
    verdict: Verdict


class RegressionReport(BaseModel):
    """The comparison of one run with the baseline of its configuration."""

    run_id: str
    comparable_key: list[str]
    status: Status
    message: str
    config: RegressConfig
    baseline_run_ids: list[str] = Field(default_factory=list)
    comparisons: list[MetricComparison] = Field(default_factory=list)

    @property
    def first_run(self) -> bool:
        return self.status == "baseline"

    @property
    def regressions(self) -> list[MetricComparison]:
        return [c for c in self.comparisons if c.verdict == "regressed"]

    @property
    def improvements(self) -> list[MetricComparison]:
        return [c for c in self.comparisons if c.verdict == "improved"]

    @property
    def has_regressions(self) -> bool:
        return bool(self.regressions)

    def get(self, metric_name: str) -> MetricComparison | None:
        return next((c for c in self.comparisons if c.metric.name == metric_name), None)


def comparable_history(
    current: RunRecord, history: Iterable[RunRecord], window: int, config: RegressConfig | None = None
) -> list[RunRecord]:
    """The latest ``window`` completed runs comparable with ``current`` (oldest first), itself excluded."""
    key = key_of(current.meta, config)
    same = [
        r
        for r in history
        if r.meta.run_id != current.meta.run_id
        and r.status == "completed"
        and key_of(r.meta, config) == key
        and r.meta.started_at <= current.meta.started_at
    ]
    same.sort(key=lambda r: (r.meta.started_at, r.meta.run_id))
    return same[-window:]


def mad(values: list[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    med = statistics.median(values)
    return float(statistics.median([abs(v - med) for v in values]))


def judge(metric: Metric, current: float, baseline_values: list[float], config: RegressConfig) -> MetricComparison:
    """Compare one value with the values of the baseline runs."""
    if not baseline_values:
        return MetricComparison(metric=metric, current=current, verdict="new")
    base = float(statistics.median(baseline_values))
    spread = mad(baseline_values)
    threshold = max(config.rel_floor * abs(base), config.mad_k * spread, metric.abs_floor)
    change = current - base
    better = change if metric.direction == Direction.HIGHER else -change
    verdict: Verdict = "unchanged"
    if better < -threshold:
        verdict = "regressed"
    elif better > threshold:
        verdict = "improved"
    return MetricComparison(
        metric=metric,
        current=current,
        baseline=base,
        baseline_mad=spread,
        baseline_runs=len(baseline_values),
        threshold=threshold,
        change=change,
        change_pct=100.0 * change / abs(base) if base != 0 else None,
        verdict=verdict,
    )


def compare(current: RunRecord, history: Iterable[RunRecord], config: RegressConfig | None = None) -> RegressionReport:
    """Compare ``current`` with the baseline formed by its comparable ``history``."""
    cfg = config or RegressConfig()
    key = list(key_of(current.meta, cfg))
    if current.status != "completed":
        stage = current.failed_stage or "an unknown stage"
        return RegressionReport(
            run_id=current.meta.run_id,
            comparable_key=key,
            status="failed_run",
            message=f"the run failed at {stage}; no metrics were compared and the baseline is unchanged",
            config=cfg,
        )
    base_runs = comparable_history(current, history, cfg.window, cfg)
    by_run = [{m.metric.name: m.value for m in run_metrics(r)} for r in base_runs]
    comparisons = []
    for measured in run_metrics(current):
        values = [vals[measured.metric.name] for vals in by_run if measured.metric.name in vals]
        comparisons.append(judge(measured.metric, measured.value, values, cfg))
    if not base_runs:
        return RegressionReport(
            run_id=current.meta.run_id,
            comparable_key=key,
            status="baseline",
            message="first run of this configuration: it establishes the baseline",
            config=cfg,
            comparisons=comparisons,
        )
    regressed = [c for c in comparisons if c.verdict == "regressed"]
    improved = [c for c in comparisons if c.verdict == "improved"]
    n = len(base_runs)
    against = f"against the median of {n} earlier comparable run{'s' if n != 1 else ''}"
    message = f"{len(regressed)} metric(s) regressed {against}" if regressed else f"no regression {against}"
    if improved:
        message += f"; {len(improved)} improved"
    return RegressionReport(
        run_id=current.meta.run_id,
        comparable_key=key,
        status="regressed" if regressed else "ok",
        message=message,
        config=cfg,
        baseline_run_ids=[r.meta.run_id for r in base_runs],
        comparisons=comparisons,
    )
