# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's first sections: the headline numbers (or why the run failed) and the baseline comparison."""

from __future__ import annotations

from roost.catalogue import fmt_change
from roost.headline import HeadlineRow, headline, headline_rows
from roost.records import RunRecord
from roost.regress import RegressionReport, verdict_scope
from roost.report.blocks import Block, Bullets, Para, Section, Table, code


def summary_section(record: RunRecord, comparison: RegressionReport | None) -> Section:
    h = headline(record)
    blocks: list[Block] = []
    if record.status != "completed":
        text = f"**The run failed at stage {code(record.failed_stage or 'unknown')}**"
        if record.failure_class:
            text += f" ({code(record.failure_class)})"
        text += "."
        if record.failure_message:
            text += f" {record.failure_message}"
        blocks.append(Para(text=text))
        if record.remediation:
            blocks.append(Para(text=f"**Remediation:** {record.remediation}"))
    rows = headline_rows(record)
    table = [[_label(r.label), r.short] for r in rows]
    table.append(["Points / requests / failed", f"{h.points} / {h.requests:,} / {h.error_requests:,}"])
    blocks.append(Table(headers=["Headline", "Value"], rows=table, align_right=[1]))
    notes = [f"**{_label(r.label)}:** {r.note}" for r in rows if r.note]
    if notes:
        blocks.append(Bullets(items=notes))
    blocks += verdict_blocks(record, rows, comparison)
    return Section(title="Summary", blocks=blocks)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _label(label: str) -> str:
    return label[:1].upper() + label[1:]


def verdict_blocks(record: RunRecord, rows: list[HeadlineRow], comparison: RegressionReport | None) -> list[Block]:
    """The verdict, what it judged with the band each metric had (how far it could move before it counted),
    and what it did not judge and why: the headline's compared numbers by name, the evaluations (a paired
    McNemar test against the previous run of the same questions), the per-point metrics counted. A
    significantly worse evaluation is a regression whatever the speed comparison says."""
    if comparison is None:
        return [Para(text="**Verdict:** not compared with a baseline.")]
    worse = record.accuracy_regressions
    said = comparison.message[:1].upper() + comparison.message[1:]
    if comparison.status == "insufficient":
        said = "No verdict: " + comparison.message
    regressed = comparison.status == "regressed" or bool(worse)
    if worse:
        said = ", ".join(f"{e.task} accuracy {e.comparison.delta_points:+.1f} points" for e in worse
                         if e.comparison is not None) + f" (significant); speed: {comparison.message}"
    out: list[Block] = [Para(text=f"**Verdict:** {'**REGRESSED:** ' if regressed else ''}{said}.")]
    if comparison.status == "failed_run":
        return out
    named = [(r.label, r.compared_as if r.value is not None else None, _why_missing(r)) for r in rows if r.compared_as]
    scope = verdict_scope(comparison, named)
    judged = [f"{label} {change} (band {band}: {verdict})" for label, change, band, verdict in scope.judged]
    skipped = list(scope.not_judged)
    for e in record.evals:
        if e.comparison is None:
            skipped.append(f"{e.task} accuracy (no earlier run of the same questions)")
        else:
            judged.append(f"{e.task} accuracy {e.comparison.delta_points:+.1f} points (McNemar p = "
                          f"{e.comparison.p_value:.2g}: {'regressed' if e in worse else e.comparison.direction})")
    if scope.others_judged:
        judged.append(_count(scope.others_judged, "per-point metric") + " (Baseline comparison)")
    if scope.others_not_judged:
        skipped.append(_count(scope.others_not_judged, "per-point metric"))
    items = [f"{what}: " + "; ".join(names) + "." for what, names in (("Judged", judged), ("Not judged", skipped))
             if names]
    if items:
        out.append(Bullets(items=items))
    return out


def _why_missing(row: HeadlineRow) -> str:
    """The reason a headline cell gives for a missing value, without its dash and brackets ("" with a value)."""
    if row.value is not None:
        return ""
    return row.text.removeprefix("—").strip().removeprefix("(").removesuffix(")") or "not measured"


_VERDICT_ORDER = {"regressed": 0, "improved": 1, "unchanged": 2, "insufficient": 3, "new": 4}
_VERDICT_WORDS = {"regressed": "**REGRESSED**", "insufficient": "no verdict (too few runs)", "new": "new (no baseline)"}


def baseline_section(comparison: RegressionReport | None) -> Section:
    sec = Section(title="Baseline comparison")
    if comparison is None:
        sec.blocks.append(Para(text="No baseline comparison was made for this run."))
        return sec
    cfg = comparison.config
    same = ", ".join(cfg.key_fields) if cfg.key_fields else "model commit, image digest, vLLM args and host"
    sec.blocks.append(Para(text=comparison.message[:1].upper() + comparison.message[1:] + "."))
    n = len(comparison.baseline_run_ids)
    sec.blocks.append(
        Para(
            text=(
                f"Baseline: the median of the latest comparable runs (same {same}; up to {cfg.window}, this run had "
                f"{n}); a verdict needs at least {cfg.min_runs}. A metric regresses when it moves the wrong way by "
                f"more than max({cfg.rel_floor:.0%} of the baseline, {cfg.mad_k:g} × the noise, the metric's floor); "
                "the noise is the spread of the runs' values (1.4826 × their median absolute deviation) pooled with "
                f"each run's own spread over its requests or repeats ({code('roost/regress.py')})."
            )
        )
    )
    if comparison.baseline_run_ids:
        sec.blocks.append(Para(text="Baseline runs: " + ", ".join(code(r) for r in comparison.baseline_run_ids)))
    if comparison.comparisons:
        rows = []
        for c in sorted(comparison.comparisons, key=lambda c: _VERDICT_ORDER.get(c.verdict, len(_VERDICT_ORDER))):
            m = c.metric
            rows.append([m.label, m.format(c.baseline), m.format(c.current),
                         fmt_change(c.change_pct) if c.baseline is not None else "—", m.format(c.threshold),
                         _VERDICT_WORDS.get(c.verdict, c.verdict), m.format(c.noise_sd)])
        sec.blocks.append(
            Table(
                headers=["Metric", "Baseline", "This run", "Change", "Threshold", "Verdict", "Noise (1 s.d.)"],
                rows=rows,
                align_right=[1, 2, 3, 4, 6],
            )
        )
    return sec
