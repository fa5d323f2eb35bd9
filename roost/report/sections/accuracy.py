"""The report's Accuracy section: each evaluation's scores, settings, paired comparison with the
baseline run (McNemar), the other models' scores and the per-category chart (``roost.eval``;
definitions in ``roost/catalogue.py``)."""

from __future__ import annotations

from pathlib import Path

from roost import catalogue as C
from roost.eval_record import EvalRecord
from roost.records import RunRecord
from roost.report.blocks import Block, Image, Para, Section, Table, code


def _title(e: EvalRecord) -> str:
    from roost.eval.suites import TASKS

    return TASKS[e.task].title if e.task in TASKS else e.task


def _scores(record: RunRecord) -> Table:
    rows = []
    for e in record.evals:
        s = e.summary
        rows.append([_title(e) + ("" if e.status == "completed" else " (stopped)"), f"{s.n:,}",
                     C.fmt_accuracy(s.accuracy, s.ci_low, s.ci_high), C.Column(metric=C.UNPARSED).cell(s.unparsed),
                     C.Column(metric=C.TRUNCATED).cell(s.truncated), C.MEAN_OUTPUT_TOKENS.format(s.mean_output_tokens),
                     e.comparison.describe() if e.comparison else "no earlier run of the same questions"])
    return Table(headers=["Task", "Questions", C.ACCURACY.title, C.UNPARSED.title, C.TRUNCATED.title,
                          C.MEAN_OUTPUT_TOKENS.title, "Against the baseline (paired)"], rows=rows, align_right=[1, 3, 4, 5])


def _settings(e: EvalRecord) -> Para:
    sp = e.sampling
    text = (f"**{_title(e)}**: dataset {code(e.dataset.source)} @ {code(e.dataset.revision[:16])}, seed {e.seed}"
            + (f", {e.per_category} per category" if e.per_category else "")
            + (f", limit {e.limit}" if e.limit else "")
            + f"; temperature {sp.temperature}, top_p {sp.top_p}, top_k {sp.top_k}, max_tokens {sp.max_tokens:,}, "
            f"thinking {'on' if sp.thinking else 'off'}, {sp.concurrency} in flight.")
    if e.status != "completed":
        text += f" Stopped: {e.error}"
    if e.resumed:
        text += f" {e.resumed} answers came from the run's log (a retried stage), not asked again."
    return Para(text=text)


def _evaluation(e: EvalRecord, charts: dict[str, Path]) -> list[Block]:
    """One evaluation's settings, its paired categories, the other models and its chart."""
    blocks: list[Block] = [_settings(e)]
    c = e.comparison
    if c is not None and c.categories:
        blocks.append(Table(
            headers=["Category", "Paired", "Right before, wrong now", "Wrong before, right now", "McNemar p"],
            rows=[[m.category or "all", str(m.pairs), str(m.lost), str(m.gained), f"{m.p_value:.3g}"]
                  for m in c.categories],
            align_right=[1, 2, 3, 4]))
    if e.others:
        blocks.append(Table(
            headers=["Other model", "Run", C.ACCURACY.title, "Questions"],
            rows=[[code(o.repo_id), code(o.run_id), C.fmt_accuracy(o.accuracy, o.ci_low, o.ci_high), f"{o.n:,}"]
                  for o in e.others], align_right=[3]))
    chart = charts.get(f"accuracy_{e.task}")
    if chart is not None:
        blocks.append(Image(alt=f"{_title(e)} accuracy per category", path=chart))
    return blocks


def accuracy_section(record: RunRecord, charts: dict[str, Path]) -> Section | None:
    """Each evaluation: accuracy with its interval, the failure modes (unparsed, truncated), output
    length, the paired comparison with the baseline run (McNemar), other models, and the per-category
    chart; None for a run without evaluations."""
    if not record.evals:
        return None
    sec = Section(title="Accuracy", blocks=[_scores(record)])
    for e in record.evals:
        sec.blocks += _evaluation(e, charts)
    sec.blocks.append(Para(text=f"{C.ACCURACY.title}: {C.ACCURACY.definition}; interval: {C.ACCURACY_CI.definition}. "
                                f"{C.ACCURACY_CHANGE.title}: {C.ACCURACY_CHANGE.definition}."))
    return sec
