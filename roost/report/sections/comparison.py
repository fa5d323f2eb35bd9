# ruff: noqa: RUF001, RUF002  (typographic characters in user-facing text are deliberate)
"""The report's comparison with the model this one replaced (``roost.report.compare``): the recipe's three
tables and charts, and what either model lacks. ``roost compare`` prints the same tables."""

from __future__ import annotations

from pathlib import Path

from roost import catalogue as C
from roost.report.blocks import Block, Bullets, Image, Para, Section, Table, code
from roost.report.compare import Estimate, ModelComparison, TaskScore


def _pct(est: Estimate | None) -> str:
    """``81.1% (78.0–84.0)`` from a proportion; ``—`` without one."""
    if est is None or est.value is None:
        return "—"
    if est.low is None or est.high is None:
        return C.ACCURACY.format(100 * est.value)
    return f"{C.ACCURACY.format(100 * est.value)} ({100 * est.low:.1f}–{100 * est.high:.1f})"


def _rate(est: Estimate | None) -> str:
    """A throughput with its min-max: ``490 (480–495)``."""
    if est is None or est.value is None:
        return "not measured"
    cell = C.OUTPUT_MEDIAN.cell
    spread = f" ({cell(est.low)}–{cell(est.high)})" if est.low is not None and est.high is not None else ""
    return cell(est.value) + spread


def throughput_table(cmp: ModelComparison) -> Table:
    """Aggregate output tok/s per concurrency (median over repeats, min–max), both models, and their ratio."""
    rows = [[str(lv.concurrency), _rate(lv.a), _rate(lv.b),
             C.fmt_value(lv.ratio, "x")] for lv in cmp.throughput.levels]
    return Table(headers=["Concurrent", cmp.a.name, cmp.b.name, "Ratio"], rows=rows, align_right=[0, 1, 2, 3])


def _score_row(title: str, name: str, s: TaskScore | None) -> list[str]:
    if s is None:
        return [title, name, "—", "not evaluated", "—", "—", "—", "—", "—"]
    tok = C.OUTPUT_TOKENS.format
    return [title, name, f"{s.n:,}", _pct(s.accuracy), f"{s.truncated:,} · {_pct(s.truncation_rate)}",
            f"{s.unparsed:,} · {_pct(s.unparsed_rate)}", tok(s.output_tokens_mean), tok(s.output_tokens_median),
            tok(s.output_tokens_p90)]


def reasoning_table(cmp: ModelComparison) -> Table:
    """GSM8K, MATH-500 and MMLU-Pro overall: accuracy, truncated and unparsed answers, output tokens per answer."""
    rows = []
    for t in [*cmp.reasoning, cmp.knowledge.overall]:
        rows += [_score_row(t.title, cmp.a.name, t.a), _score_row(t.title, cmp.b.name, t.b)]
    return Table(headers=["Task", "Model", "Questions", f"{C.ACCURACY.title} (95% CI)", C.TRUNCATION_RATE.title,
                          C.UNPARSED_RATE.title, "Tokens/answer mean", "median", "p90"],
                 rows=rows, align_right=[2, 3, 4, 5, 6, 7, 8])


def knowledge_table(cmp: ModelComparison) -> Table:
    """MMLU-Pro per category: both models' accuracy and unparsed rate, and the difference in points."""
    rows = []
    for r in cmp.knowledge.categories:
        a, b = r.a, r.b
        diff = (100 * (a.accuracy.value - b.accuracy.value) if a and b and a.accuracy.value is not None
                and b.accuracy.value is not None else None)
        rows.append([r.category, " / ".join(f"{s.n:,}" if s else "—" for s in (a, b)), _pct(a.accuracy if a else None),
                     _pct(a.unparsed_rate if a else None), _pct(b.accuracy if b else None),
                     _pct(b.unparsed_rate if b else None), f"{diff:+.1f}" if diff is not None else "—"])
    acc, unp = C.ACCURACY.label, C.UNPARSED_RATE.label
    return Table(headers=["Category", "Questions", f"{cmp.a.name} {acc}", unp, f"{cmp.b.name} {acc}", unp,
                          "Points"], rows=rows, align_right=[1, 2, 3, 4, 5, 6])


def notes(cmp: ModelComparison) -> list[str]:
    """What either model lacks, said once each."""
    out = [*cmp.throughput.notes]
    for t in [*cmp.reasoning, cmp.knowledge.overall]:
        out += t.notes
    return list(dict.fromkeys(out))


def comparison_section(cmp: ModelComparison | None, charts: dict[str, Path]) -> Section | None:
    """The section, or None when the run was not compared with another model."""
    if cmp is None:
        return None
    a, b = cmp.a, cmp.b
    blocks: list[Block] = [Para(text=(
        f"{code(a.repo_id)} (run {code(a.run_id)}) against {code(b.repo_id)} (run {code(b.run_id)}, started "
        f"{b.started_at.strftime('%Y-%m-%d %H:%M %Z')}) on {code(a.host)}. Throughput: {C.OUTPUT_THROUGHPUT.label}, "
        f"the median over repeats (min–max), and the ratio of the first to the second; accuracies and rates with "
        f"their 95% Wilson interval; {C.OUTPUT_TOKENS.label}: mean, median and p90; points: the first model's "
        "accuracy minus the second's."))]
    for table, chart, empty in (
            (throughput_table(cmp), "compare_throughput", "Neither run measured a concurrency point."),
            (reasoning_table(cmp), "compare_reasoning", ""),
            (knowledge_table(cmp), "compare_knowledge", "Neither run has MMLU-Pro per category.")):
        if table.rows:
            blocks.append(table)
        elif empty:
            blocks.append(Para(text=empty))
        if chart in charts:
            blocks.append(Image(alt=chart.replace("_", " "), path=charts[chart]))
    said = notes(cmp)
    if said:
        blocks.append(Bullets(items=said))
    return Section(title=f"Comparison with {b.repo_id}", blocks=blocks)
