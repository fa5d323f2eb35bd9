"""Two models' runs for the model comparison (``roost.report.compare``): the Ornith 1.5 recipe's new model
and the one it replaced (Qwen3.8), with concurrency sweeps, GSM8K / MATH-500 / MMLU-Pro evaluations and their
per-question answers, built in the test and optionally stored (no server)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from roost.eval.scoring import summarize
from roost.eval_record import DatasetInfo, EvalRecord, Sampling
from roost.records import RunMeta, RunRecord, ServeObservation
from roost.store import append_eval_answers, append_run
from support.samples import concurrency_point, dist

NEW = "ornith-ai/Ornith-1.5-35B-A3B-NVFP4"
OLD = "qwen/Qwen3.8-35B-A3B"
CATEGORIES = ("law", "math", "physics")


def answers(task: str, n: int, correct: int, truncated: int = 0, unparsed: int = 0, tokens: int = 1000,
            categories: tuple[str, ...] = ("",)) -> list[dict[str, Any]]:
    """``n`` answers: the first ``correct`` right, then ``truncated``, then ``unparsed``, the rest wrong;
    answer i has ``tokens + 10 * i`` output tokens and category ``categories[i % len]``."""
    rows = []
    for i in range(n):
        verdict = ("correct" if i < correct else "truncated" if i < correct + truncated
                   else "unparsed" if i < correct + truncated + unparsed else "wrong")
        rows.append({"id": f"{task}-{i}", "category": categories[i % len(categories)], "verdict": verdict,
                     "extracted": "", "reference": "", "output_tokens": tokens + 10 * i, "prompt_tokens": 100,
                     "finish_reason": "length" if verdict == "truncated" else "stop", "seconds": 1.0, "answer": ""})
    return rows


def evaluation(task: str, rows: list[dict[str, Any]], digest: str = "sample-1") -> EvalRecord:
    return EvalRecord(task=task, dataset=DatasetInfo(source=f"hub/{task}", revision="rev1"), sampling=Sampling(),
                      sample_digest=digest, summary=summarize(rows))


def run(repo_id: str, day: int, *, profile: str, rates: dict[int, float], evals: dict[str, list[dict[str, Any]]],
        host: str = "spark", policy: str = "unless-stopped", digest: str = "sample-1") -> RunRecord:
    meta = RunMeta(run_id=f"202603{day:02d}T020000Z-{day:08x}", started_at=dt.datetime(2026, 3, day, 2, tzinfo=dt.UTC),
                   roost_version="0.1.0", profile=profile, repo_id=repo_id, revision="main", commit="c0ffee",
                   served_model_name=profile, host=host, backend="docker")
    points = [concurrency_point(c, r).model_copy(update={"output_tok_s": dist(r, min=0.97 * r, max=1.02 * r)})
              for c, r in rates.items()]
    return RunRecord(meta=meta, points=points, serve=ServeObservation(restart_policy=policy),
                     evals=[evaluation(t, rows, digest) for t, rows in evals.items()])


def new_and_old() -> tuple[RunRecord, RunRecord, dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The new model (1, 16, 20, 24 concurrent) and the old one (1, 8, 16, 20: 8 only it, 24 only the new one),
    each with GSM8K, MATH-500 and MMLU-Pro (three categories) and their answers."""
    new_answers = {"gsm8k": answers("gsm8k", 40, 36, truncated=1, tokens=800),
                   "math500": answers("math500", 40, 30, truncated=2, tokens=3000),
                   "mmlu-pro": answers("mmlu-pro", 30, 24, unparsed=3, tokens=2000, categories=CATEGORIES)}
    old_answers = {"gsm8k": answers("gsm8k", 40, 37, tokens=500),
                   "math500": answers("math500", 40, 28, truncated=4, tokens=2000),
                   "mmlu-pro": answers("mmlu-pro", 30, 25, unparsed=1, tokens=1000, categories=CATEGORIES)}
    new = run(NEW, 5, profile="ornith-1.5-35b-a3b-nvfp4", rates={1: 60.0, 16: 450.0, 20: 490.3, 24: 405.7},
              evals=new_answers)
    old = run(OLD, 2, profile="qwen38", rates={1: 42.5, 8: 250.0, 16: 371.0, 20: 370.0}, evals=old_answers)
    return new, old, new_answers, old_answers


def store_run(root: Path, record: RunRecord, answers_by_task: dict[str, list[dict[str, Any]]]) -> None:
    """Store a run as the pipeline does: its answers (eval stage), then the run (report stage)."""
    for task, rows in answers_by_task.items():
        append_eval_answers(record.meta, task, "sample-1", rows, root)
    append_run(record, root)
