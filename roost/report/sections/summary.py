# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's first sections: the headline numbers (or why the run failed) and the baseline comparison."""

from __future__ import annotations

from roost.catalogue import fmt_change
from roost.headline import headline, headline_rows
from roost.records import RunRecord
from roost.regress import RegressionReport
from roost.report.blocks import Block, Para, Section, Table, code


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
    if comparison is not None:
        blocks.append(Para(text=f"**Baseline:** {comparison.message}."))
    rows = [[r.label[:1].upper() + r.label[1:], r.text] for r in headline_rows(record)]
    rows.append(["Benchmark points / requests / failed", f"{h.points} / {h.requests:,} / {h.error_requests:,}"])
    blocks.append(Table(headers=["Headline", "Value"], rows=rows, align_right=[1]))
    return Section(title="Summary", blocks=blocks)


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
