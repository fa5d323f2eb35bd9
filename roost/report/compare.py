"""Two models side by side, as the Ornith 1.5 recipe compares the new model with the one it replaced:
aggregate throughput per concurrency; GSM8K and MATH-500 accuracy with the truncation rate and the output
tokens per answer (the long-form length); MMLU-Pro accuracy per category with the unparsed rate.

Pure: :func:`compare_models` reads two run records and, where the store kept them, their evaluations'
per-question answers (``eval_answers`` rows: ``verdict``, ``category``, ``output_tokens``;
``compare_store.py`` finds both). ``a`` is the first model (the new one of a landing), ``b`` the second.

Intervals: an accuracy or a rate is a proportion with its 95 % Wilson interval
(``roost.eval.scoring.wilson``, the evaluations' own); an aggregate throughput is the median over the
point's repeats with their min-max. Output tokens per answer: the mean is the evaluation's
``mean_output_tokens``; median and p90 need the stored answers. Metric definitions are in
``roost/catalogue.py``. What one model lacks (no MMLU-Pro, a concurrency level the other did not
measure, no stored answers) is None and a note, never an error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field, computed_field

from roost.bench.metrics import percentile
from roost.eval.scoring import wilson
from roost.eval_record import EvalRecord
from roost.headline import concurrency_points
from roost.records import RunRecord

REASONING_TASKS: tuple[str, ...] = ("gsm8k", "math500")
"""The recipe's reasoning comparison: accuracy, truncation and the long-form length."""

KNOWLEDGE_TASK = "mmlu-pro"
"""The recipe's knowledge comparison: accuracy per category and the unparsed rate."""

Answers = Mapping[str, Sequence[Mapping[str, Any]]]
"""A run's stored answers per task: ``eval_answers`` rows (``verdict``, ``category``, ``output_tokens``)."""


class RunSide(BaseModel):
    """The run one side of the comparison comes from."""

    repo_id: str
    served_model_name: str
    profile: str
    host: str
    run_id: str
    started_at: dt.datetime

    @property
    def name(self) -> str:
        """The short name a chart's legend uses: the repo id's last part."""
        return self.repo_id.rsplit("/", 1)[-1]


class Estimate(BaseModel):
    """A figure and its interval (``low``/``high`` None when unknown)."""

    value: float | None = None
    low: float | None = None
    high: float | None = None


def proportion(count: int, n: int) -> Estimate:
    """``count / n`` with its 95 % Wilson interval (all None for n = 0)."""
    low, high = wilson(count, n)
    return Estimate(value=count / n if n > 0 else None, low=low, high=high)


class ThroughputLevel(BaseModel):
    """Aggregate output tok/s at one concurrency: median over repeats, min-max as the interval."""

    concurrency: int
    a: Estimate | None = None
    b: Estimate | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float | None:
        """a / b (1.32 is 32 % more); None unless both measured a positive rate."""
        if self.a is None or self.b is None or self.a.value is None or not self.b.value:
            return None
        return self.a.value / self.b.value


class ThroughputComparison(BaseModel):
    levels: list[ThroughputLevel] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class TaskScore(BaseModel):
    """One model's scores on one evaluation."""

    n: int
    accuracy: Estimate
    truncated: int
    truncation_rate: Estimate
    unparsed: int
    unparsed_rate: Estimate
    output_tokens_mean: float | None = None
    output_tokens_median: float | None = Field(default=None, description="None without stored answers.")
    output_tokens_p90: float | None = Field(default=None, description="None without stored answers.")


class TaskComparison(BaseModel):
    task: str
    title: str
    a: TaskScore | None = None
    b: TaskScore | None = None
    same_questions: bool | None = Field(default=None, description="Both asked the same sample (None: one is missing).")
    notes: list[str] = Field(default_factory=list)


class CategoryScore(BaseModel):
    n: int
    accuracy: Estimate
    unparsed_rate: Estimate | None = Field(default=None, description="None without stored answers.")


class CategoryRow(BaseModel):
    category: str
    a: CategoryScore | None = None
    b: CategoryScore | None = None


class KnowledgeComparison(BaseModel):
    overall: TaskComparison
    categories: list[CategoryRow] = Field(default_factory=list)


class ModelComparison(BaseModel):
    """The three comparisons of two models' runs."""

    a: RunSide
    b: RunSide
    throughput: ThroughputComparison
    reasoning: list[TaskComparison]
    knowledge: KnowledgeComparison


def side_of(record: RunRecord) -> RunSide:
    m = record.meta
    return RunSide(repo_id=m.repo_id, served_model_name=m.served_model_name, profile=m.profile, host=m.host,
                   run_id=m.run_id, started_at=m.started_at)


def _levels(record: RunRecord) -> dict[int, tuple[Estimate, tuple[int, int]]]:
    """Concurrency -> (aggregate tok/s with its min-max, (prompt, output) tokens): the first point of each level."""
    out: dict[int, tuple[Estimate, tuple[int, int]]] = {}
    for p in concurrency_points(record):
        d = p.output_tok_s
        if d.median is not None and p.concurrency not in out:
            out[p.concurrency] = (Estimate(value=d.median, low=d.min, high=d.max), (p.prompt_tokens, p.output_tokens))
    return out


def compare_throughput(a: RunRecord, b: RunRecord) -> ThroughputComparison:
    """Aggregate output tok/s per concurrency, both models, every level either measured."""
    la, lb = _levels(a), _levels(b)
    notes = [f"{side_of(r).name} has no measured concurrency point in run {r.meta.run_id}"
             for r, levels in ((a, la), (b, lb)) if not levels]
    if la and lb:
        for r, mine, theirs in ((a, la, lb), (b, lb, la)):
            only = sorted(set(mine) - set(theirs))
            if only:
                notes.append(f"only {side_of(r).name} was measured at {', '.join(map(str, only))} concurrent")
        shapes = {w for _, w in la.values()}, {w for _, w in lb.values()}
        if shapes[0] != shapes[1]:
            notes.append("the two runs' requests differ (" + "; ".join(
                f"{side_of(r).name}: " + ", ".join(f"{pt:,}-token prompts, {out:,} output tokens" for pt, out in sorted(s))
                for r, s in ((a, shapes[0]), (b, shapes[1]))) + "): not the same workload")
    levels = [ThroughputLevel(concurrency=c, a=la[c][0] if c in la else None, b=lb[c][0] if c in lb else None)
              for c in sorted(set(la) | set(lb))]
    return ThroughputComparison(levels=levels, notes=notes)


def evaluation(record: RunRecord, task: str) -> EvalRecord | None:
    """The run's last completed evaluation of ``task``."""
    return next((e for e in reversed(record.evals) if e.task == task and e.status == "completed"), None)


def _tokens(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    return [float(r["output_tokens"]) for r in rows if r.get("output_tokens") is not None]


def task_score(ev: EvalRecord, rows: Sequence[Mapping[str, Any]]) -> TaskScore:
    """One evaluation's scores; ``rows``: its stored answers (empty: median and p90 unknown)."""
    s = ev.summary
    tokens = _tokens(rows)
    return TaskScore(n=s.n, accuracy=Estimate(value=s.accuracy, low=s.ci_low, high=s.ci_high),
                     truncated=s.truncated, truncation_rate=proportion(s.truncated, s.n), unparsed=s.unparsed,
                     unparsed_rate=proportion(s.unparsed, s.n), output_tokens_mean=s.mean_output_tokens,
                     output_tokens_median=percentile(tokens, 50), output_tokens_p90=percentile(tokens, 90))


def _title(task: str) -> str:
    from roost.eval.suites import TASKS

    return TASKS[task].title if task in TASKS else task


def compare_task(task: str, a: RunRecord, b: RunRecord, answers_a: Answers, answers_b: Answers) -> TaskComparison:
    """Both models' scores on ``task``; a model without it (or without its stored answers) is noted."""
    out = TaskComparison(task=task, title=_title(task))
    evs = evaluation(a, task), evaluation(b, task)
    for ev, rec, answers, field in ((evs[0], a, answers_a, "a"), (evs[1], b, answers_b, "b")):
        name = side_of(rec).name
        if ev is None:
            out.notes.append(f"{name} has no completed {out.title} evaluation in run {rec.meta.run_id}")
            continue
        rows = answers.get(task) or []
        if not rows:
            out.notes.append(f"{name}'s {out.title} answers are not in the store: no median or p90 output tokens")
        setattr(out, field, task_score(ev, rows))
    if evs[0] is not None and evs[1] is not None:
        out.same_questions = bool(evs[0].sample_digest) and evs[0].sample_digest == evs[1].sample_digest
        if not out.same_questions:
            out.notes.append(f"the two {out.title} runs asked different samples: a difference carries both "
                             "samples' noise (see the intervals)")
    return out


def _category_scores(ev: EvalRecord | None, rows: Sequence[Mapping[str, Any]]) -> dict[str, CategoryScore]:
    if ev is None:
        return {}
    unparsed: dict[str, list[int]] = {}
    for r in rows:
        counts = unparsed.setdefault(str(r.get("category") or ""), [0, 0])
        counts[0] += r.get("verdict") == "unparsed"
        counts[1] += 1
    out = {}
    for cat, score in ev.summary.per_category.items():
        got = unparsed.get(cat)
        out[cat] = CategoryScore(n=score.n, accuracy=proportion(score.correct, score.n),
                                 unparsed_rate=proportion(got[0], got[1]) if got else None)
    return out


def compare_knowledge(a: RunRecord, b: RunRecord, answers_a: Answers, answers_b: Answers) -> KnowledgeComparison:
    """MMLU-Pro overall and per category, with the unparsed rate; a category only one model has is kept."""
    overall = compare_task(KNOWLEDGE_TASK, a, b, answers_a, answers_b)
    cats_a = _category_scores(evaluation(a, KNOWLEDGE_TASK), answers_a.get(KNOWLEDGE_TASK) or [])
    cats_b = _category_scores(evaluation(b, KNOWLEDGE_TASK), answers_b.get(KNOWLEDGE_TASK) or [])
    rows = [CategoryRow(category=c, a=cats_a.get(c), b=cats_b.get(c)) for c in sorted(set(cats_a) | set(cats_b))]
    return KnowledgeComparison(overall=overall, categories=rows)


def compare_models(a: RunRecord, b: RunRecord, answers_a: Answers | None = None,
                   answers_b: Answers | None = None) -> ModelComparison:
    """The recipe's three comparisons of run ``a`` with run ``b``."""
    aa, ab = answers_a or {}, answers_b or {}
    return ModelComparison(a=side_of(a), b=side_of(b), throughput=compare_throughput(a, b),
                           reasoning=[compare_task(t, a, b, aa, ab) for t in REASONING_TASKS],
                           knowledge=compare_knowledge(a, b, aa, ab))
