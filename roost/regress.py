"""Regression detection against the run's own history. Pure: records in, a verdict out.

Baseline: for each metric, the median ``m`` over the last ``window`` completed runs with the same
``RunMeta.comparable_key()`` (model commit, image digest, vLLM args, host) that measured it. No
verdict is given from fewer than ``min_runs`` (3) such runs: the run is *insufficient* (nothing is
flagged, and the message names the runs there were); with none at all it *establishes the baseline*.

Noise ``s`` of a metric is a pooled standard deviation, each estimate weighted by its degrees of freedom:

    s^2 = (dof_b x s_b^2 + sum_i dof_i x s_i^2) / (dof_b + sum_i dof_i)

- between runs: ``s_b = 1.4826 x MAD`` of the baseline runs' values (the MAD scaled to a standard
  deviation), ``dof_b = runs - 1``;
- within each run (every baseline run and the current one): the value is the median of a sample
  (``roost.headline.Measured.sample``: per-request TTFT or decode rates, per-repeat aggregate tok/s)
  of n values whose standard deviation ``sd`` is ``(p90 - p10) / 2.5631`` from 10 values up, else
  ``(max - min) / d2(n)`` (the range of n normal values is ``d2(n)`` standard deviations: 1.128 for 2,
  1.693 for 3 ...); ``s_i = 1.2533 x sd / sqrt(n)`` is the standard error of that median, the same
  quantity ``s_b`` estimates across runs; ``dof_i = n - 1``. A sample of fewer than two values adds nothing.

So one earlier run does not mean zero noise, and two runs far apart (10 and 14 tok/s) do not make
every move look like noise: their one degree of freedom is pooled with the runs' own spreads.
A metric *regresses* when it moves the wrong way by more than the threshold

    max(rel_floor x |m|, mad_k x s, metric.abs_floor)

a move the right way by more than the same threshold is an *improvement*; anything smaller is *unchanged*.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from roost.catalogue import Direction, Metric, fmt_change
from roost.headline import Measured, run_metrics
from roost.records import Distribution, EvalRecord, RunMeta, RunRecord

Verdict = Literal["regressed", "improved", "unchanged", "new", "insufficient"]
Status = Literal["baseline", "ok", "regressed", "failed_run", "insufficient"]

MAD_TO_SD = 1.4826
"""MAD x 1.4826 estimates the standard deviation of normal values."""

P10_P90_SD = 2.5631
"""p90 - p10 of normal values spans 2 x 1.28155 standard deviations."""

MEDIAN_SE = 1.2533
"""The standard error of the median of n normal values is 1.2533 x sd / sqrt(n)."""

D2: dict[int, float] = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
"""d2(n): the expected range of n normal values, in standard deviations."""


class RegressConfig(BaseModel):
    """How a run is compared with its history."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(default=5, ge=1, description="How many of the latest comparable runs form the baseline.")
    min_runs: int = Field(default=3, ge=1, description="Fewest earlier comparable runs a verdict needs; fewer: "
                          "'insufficient baseline', nothing flagged.")
    rel_floor: float = Field(default=0.05, ge=0, description="Smallest relative move that counts (0.05 = 5%).")
    mad_k: float = Field(default=3.0, ge=0, description="Moves within k x the noise (a pooled standard deviation of "
                         "the runs' values and their own spread: roost.regress) are noise.")
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
    baseline_mad: float | None = Field(default=None, description="MAD of the baseline runs' values (unscaled).")
    noise_sd: float | None = Field(default=None, description="The pooled noise s (module docstring), in the metric's unit.")
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
    def insufficient(self) -> bool:
        """Too few earlier comparable runs for a verdict (``RegressConfig.min_runs``)."""
        return self.status == "insufficient"

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


def band_pct(c: MetricComparison) -> float | None:
    """How far ``c``'s metric could move before it counted, as a percentage of its baseline (the threshold
    the verdict used); None when it was not judged or the baseline is 0."""
    if c.threshold is None or not c.baseline:
        return None
    return 100.0 * c.threshold / abs(c.baseline)


def not_judged_reason(c: MetricComparison, config: RegressConfig) -> str:
    """Why ``c`` has no verdict (``""`` when it has one): no earlier value, or too few of them."""
    if c.verdict == "new":
        return "no earlier value"
    if c.verdict == "insufficient":
        return f"{c.baseline_runs} earlier value{'s' if c.baseline_runs != 1 else ''}; a verdict needs {config.min_runs}"
    return ""


class VerdictScope(BaseModel):
    """What a verdict covered: the named metrics it judged (label, change, band, verdict), the named ones it
    did not judge and why, and how many other (per-point) metrics it judged and did not."""

    judged: list[tuple[str, str, str, str]] = Field(default_factory=list, description="(label, change, band, verdict)")
    not_judged: list[str] = Field(default_factory=list)
    others_judged: int = 0
    others_not_judged: int = 0


def verdict_scope(report: RegressionReport, named: Sequence[tuple[str, str | None, str]]) -> VerdictScope:
    """The scope of ``report``'s verdict; ``named``: (label, compared metric name or None when the run has no
    value, why it has none) of the metrics to name, e.g. the headline's. ``judged``: ``("decode tok/s", "-1.2%", "±32%",
    "unchanged")``; ``not_judged``: ``decode tok/s (2 earlier values; a verdict needs 3)``."""
    scope = VerdictScope()
    seen: set[str] = set()
    for label, name, missing in named:
        c = report.get(name) if name else None
        if name:
            seen.add(name)
        if c is None:
            scope.not_judged.append(f"{label} ({missing or 'not measured'})")
        elif why := not_judged_reason(c, report.config):
            scope.not_judged.append(f"{label} ({why})")
        else:
            pct = band_pct(c)
            band = f"±{pct:.0f}%" if pct is not None else f"±{c.metric.format(c.threshold)}"
            change = fmt_change(c.change_pct) if c.change_pct is not None else f"{c.metric.format(c.current)}"
            scope.judged.append((label, change, band, c.verdict))
    for c in report.comparisons:
        if c.metric.name not in seen:
            if not_judged_reason(c, report.config):
                scope.others_not_judged += 1
            else:
                scope.others_judged += 1
    return scope


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


def within_sd(sample: Distribution | None) -> tuple[float, int] | None:
    """(standard error of its median, degrees of freedom) of one run's own sample (module docstring), or
    None when it has fewer than two values or no spread statistics."""
    if sample is None or sample.count is None or sample.count < 2:
        return None
    n = sample.count
    if n >= 10 and sample.p10 is not None and sample.p90 is not None:
        sd = (sample.p90 - sample.p10) / P10_P90_SD
    elif sample.min is not None and sample.max is not None:
        sd = (sample.max - sample.min) / D2[min(n, 10)]
    else:
        return None
    se = MEDIAN_SE * sd / math.sqrt(n)
    return (se, n - 1) if math.isfinite(se) and se >= 0 else None


def pooled_sd(baseline_values: Sequence[float], samples: Iterable[Distribution | None]) -> float:
    """The noise ``s``: between-run MAD (scaled) pooled with the runs' within-run spreads, weighted by
    degrees of freedom (module docstring); 0 when there is nothing to estimate it from."""
    parts: list[tuple[float, int]] = []
    if len(baseline_values) >= 2:
        parts.append((MAD_TO_SD * mad(list(baseline_values)), len(baseline_values) - 1))
    parts += [w for w in (within_sd(s) for s in samples) if w is not None]
    dof = sum(d for _, d in parts)
    if not dof:
        return 0.0
    return math.sqrt(sum(d * sd * sd for sd, d in parts) / dof)


def judge(
    metric: Metric,
    current: float,
    baseline_values: list[float],
    config: RegressConfig,
    samples: Sequence[Distribution | None] = (),
) -> MetricComparison:
    """Compare one value with the values of the baseline runs; ``samples`` are the within-run samples
    of the baseline runs and the current run (``Measured.sample``), where known."""
    if not baseline_values:
        return MetricComparison(metric=metric, current=current, verdict="new")
    base = float(statistics.median(baseline_values))
    change = current - base
    out = MetricComparison(
        metric=metric,
        current=current,
        baseline=base,
        baseline_mad=mad(baseline_values),
        baseline_runs=len(baseline_values),
        change=change,
        change_pct=100.0 * change / abs(base) if base != 0 else None,
        verdict="insufficient",
    )
    if len(baseline_values) < config.min_runs:
        return out
    noise = pooled_sd(baseline_values, samples)
    threshold = max(config.rel_floor * abs(base), config.mad_k * noise, metric.abs_floor)
    better = change if metric.direction == Direction.HIGHER else -change
    verdict: Verdict = "unchanged"
    if better < -threshold:
        verdict = "regressed"
    elif better > threshold:
        verdict = "improved"
    return out.model_copy(update={"noise_sd": noise, "threshold": threshold, "verdict": verdict})


def _runs(n: int) -> str:
    return f"{n} earlier comparable run{'s' if n != 1 else ''}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def compare(current: RunRecord, history: Iterable[RunRecord], config: RegressConfig | None = None) -> RegressionReport:
    """Compare ``current`` with the baseline formed by its comparable ``history``."""
    cfg = config or RegressConfig()
    key = list(key_of(current.meta, cfg))

    def report(status: Status, message: str, **more: Any) -> RegressionReport:
        return RegressionReport(run_id=current.meta.run_id, comparable_key=key, status=status, message=message,
                                config=cfg, **more)

    if current.status != "completed":
        stage = current.failed_stage or "an unknown stage"
        return report("failed_run", f"the run failed at {stage}; no metrics were compared and the baseline is unchanged")
    base_runs = comparable_history(current, history, cfg.window, cfg)
    by_run: list[dict[str, Measured]] = [{m.metric.name: m for m in run_metrics(r)} for r in base_runs]
    comparisons = []
    for measured in run_metrics(current):
        earlier = [vals[measured.metric.name] for vals in by_run if measured.metric.name in vals]
        samples = [m.sample for m in earlier] + [measured.sample]
        comparisons.append(judge(measured.metric, measured.value, [m.value for m in earlier], cfg, samples))
    ids = [r.meta.run_id for r in base_runs]
    n = len(base_runs)
    if not base_runs:
        return report("baseline", "first run of this configuration: it establishes the baseline",
                      comparisons=comparisons)
    if n < cfg.min_runs:
        return report("insufficient", f"insufficient baseline ({_runs(n)}: {', '.join(ids)}; a verdict needs "
                      f"{cfg.min_runs})", baseline_run_ids=ids, comparisons=comparisons)
    regressed = [c for c in comparisons if c.verdict == "regressed"]
    improved = [c for c in comparisons if c.verdict == "improved"]
    against = f"against the median of runs {', '.join(ids)} ({_runs(n)})"
    message = f"{_plural(len(regressed), 'metric')} regressed {against}" if regressed else f"no regression {against}"
    if improved:
        message += f"; {len(improved)} improved"
    return report("regressed" if regressed else "ok", message, baseline_run_ids=ids, comparisons=comparisons)


# --- accuracy --------------------------------------------------------------------------------------
#
# Accuracy is compared run to run on the same questions, not against a median: the baseline is the
# newest earlier completed run of the same model (any host, image or commit: a new quantization,
# chat template or serving image is exactly what the check must catch) with an evaluation of the
# same key (task, dataset revision, sample, sampling other than concurrency) that was not itself a
# significant drop: a regression stays flagged, night after night, until the accuracy is back (a
# drop one accepts is accepted by changing the evaluation, which starts a new key).
# roost.eval.scoring.paired does the test.


def accuracy_baseline(current: EvalRecord, history: Iterable[RunRecord],
                      before: dt.datetime | None = None) -> tuple[RunRecord, EvalRecord] | None:
    """The run (and its evaluation) ``current`` is paired with; None when no earlier run matches."""
    for rec in sorted(history, key=lambda r: r.meta.started_at, reverse=True):
        if rec.status != "completed" or (before is not None and rec.meta.started_at >= before):
            continue
        for e in rec.evals:
            regressed = e.comparison is not None and e.comparison.significant and e.comparison.direction == "worse"
            if e.status == "completed" and e.key() == current.key() and not regressed:
                return rec, e
    return None


def latest_scores(task: str, dataset_revision: str, history: Iterable[RunRecord]) -> tuple[RunRecord, EvalRecord] | None:
    """Another model's newest completed evaluation of ``task`` on the same dataset revision."""
    for rec in sorted(history, key=lambda r: r.meta.started_at, reverse=True):
        if rec.status != "completed":
            continue
        for e in rec.evals:
            if e.status == "completed" and e.task == task and e.dataset.revision == dataset_revision:
                return rec, e
    return None
