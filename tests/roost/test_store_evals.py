"""The results store's accuracy tables: ``evals`` (one row per evaluation of a committed run, written by
``append_run``) and ``eval_answers`` (one row per question asked), append-only and atomic like the rest.

Beside ``test_store.py``: the store's tests are flat under tests/roost/."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.samples import spark_run

from roost import store
from roost.eval.datasets import DatasetInfo
from roost.eval.log import Answer
from roost.eval.scoring import paired, summarize
from roost.eval.suites import Sampling
from roost.records import EvalRecord, RunRecord
from roost.store.layout import partition_key
from roost.store.schema import EVALS_SCHEMA, eval_rows, parquet_bytes

REPO = "deepreinforce/Ornith-1.0-9B"


def answers(wrong: set[int], n: int = 10) -> list[Answer]:
    """Questions q0..q{n-1} (even: law, odd: math), right but for ``wrong``; the reference is always B."""
    return [Answer(id=f"q{i}", category="law" if i % 2 == 0 else "math",
                   verdict="wrong" if i in wrong else "correct", extracted="C" if i in wrong else "B", reference="B",
                   output_tokens=100 + i, prompt_tokens=50, finish_reason="stop", seconds=0.25,
                   answer=f"ANSWER: {'C' if i in wrong else 'B'}", reasoning="long thoughts")
            for i in range(n)]


def evaluation(got: list[Answer], task: str = "mmlu-pro", baseline: list[Answer] | None = None) -> EvalRecord:
    comparison = None
    if baseline is not None:
        comparison = paired({a.id: (a.category, a.verdict == "correct") for a in baseline},
                            {a.id: (a.category, a.verdict == "correct") for a in got})
    return EvalRecord(task=task, dataset=DatasetInfo(source="TIGER-Lab/MMLU-Pro", revision="3373e0b" * 5 + "12345"),
                      sampling=Sampling(temperature=0.0, thinking=False, concurrency=8), per_category=5,
                      sample_digest="5eed5eed5eed5eed", summary=summarize(a.model_dump() for a in got), elapsed_s=3.5,
                      baseline_run_id="r1" if baseline is not None else "", comparison=comparison)


def run(run_id: str, day: int, *evals: EvalRecord) -> RunRecord:
    rec = spark_run(day=day, run_id=run_id)
    return rec.model_copy(update={"evals": list(evals)})


def test_append_run_writes_one_evals_row_per_evaluation(tmp_path: Path) -> None:
    first = answers({1})
    store.append_run(run("r1", 1, evaluation(first)), tmp_path)
    second = evaluation(answers({1, 0, 2, 4}), baseline=first)
    gsm = evaluation([Answer(id="g1", verdict="correct", reference="18")], task="gsm8k")
    store.append_run(run("r2", 2, second, gsm), tmp_path)
    store.append_run(run("r3", 3), tmp_path)  # no evaluation: no evals file

    folder = (tmp_path / partition_key("evals", REPO, "spark"))
    assert sorted(p.name for p in folder.iterdir()) == ["r1.parquet", "r2.parquet"]
    raw = pd.read_parquet(tmp_path / "evals")  # one pandas call reads the table
    assert len(raw) == 3
    df = store.load_evals(tmp_path)
    assert list(df["run_id"]) == ["r1", "r2", "r2"] and list(df["task"]) == ["mmlu-pro", "mmlu-pro", "gsm8k"]
    r2 = df[(df["run_id"] == "r2") & (df["task"] == "mmlu-pro")].iloc[0]
    assert (r2["n"], r2["correct"], r2["wrong"]) == (10, 6, 4) and r2["accuracy"] == pytest.approx(0.6)
    assert r2["ci_low"] < 0.6 < r2["ci_high"]
    assert r2["mean_output_tokens"] == pytest.approx(104.5)
    assert r2["baseline_run_id"] == "r1" and bool(r2["paired_significant"]) is False
    assert r2["paired_change_points"] == pytest.approx(-30.0)
    assert r2["paired_p_value"] == pytest.approx(second.comparison.p_value)  # type: ignore[union-attr]
    assert json.loads(r2["per_category"])["law"] == {"n": 5, "correct": 2, "accuracy": 0.4}
    assert json.loads(r2["sampling"])["temperature"] == 0.0
    assert (r2["dataset_source"], r2["sample_digest"], r2["sample_per_category"]) == (
        "TIGER-Lab/MMLU-Pro", "5eed5eed5eed5eed", 5)
    assert r2["eval_status"] == "completed" and r2["status"] == "completed" and r2["host"] == "spark"
    r1 = df[df["run_id"] == "r1"].iloc[0]
    assert r1["baseline_run_id"] == "" and pd.isna(r1["paired_p_value"]) and pd.isna(r1["paired_significant"])
    assert list(store.load_evals(tmp_path, model=REPO, host="spark")["run_id"]) == ["r1", "r2", "r2"]
    assert store.load_evals(tmp_path, host="elsewhere").empty


def test_load_evals_returns_only_committed_runs(tmp_path: Path) -> None:
    store.append_run(run("r1", 1, evaluation(answers(set()))), tmp_path)
    crashed = run("r2", 2, evaluation(answers({3})))
    # a run that died after its evals file and before its runs row (the commit)
    path = (tmp_path / partition_key("evals", REPO, "spark")) / "r2.parquet"
    store.atomic_write_bytes(path, parquet_bytes(eval_rows(crashed), EVALS_SCHEMA))
    assert set(pd.read_parquet(tmp_path / "evals")["run_id"]) == {"r1", "r2"}
    assert list(store.load_evals(tmp_path)["run_id"]) == ["r1"]
    store.append_run(crashed, tmp_path)  # the retry commits it, re-using the evals file already written
    assert list(store.load_evals(tmp_path)["run_id"]) == ["r1", "r2"]
    assert len(pd.read_parquet(tmp_path / "evals")) == 2


def test_eval_answers_round_trip(tmp_path: Path) -> None:
    rec = run("r1", 1)
    got = answers({1, 4})
    path = store.append_eval_answers(rec.meta, "mmlu-pro", "5eed5eed5eed5eed", [a.model_dump() for a in got], tmp_path)
    assert path == str(tmp_path / partition_key("eval_answers", REPO, "spark") / "r1-mmlu-pro.parquet")
    store.append_eval_answers(rec.meta, "gsm8k", "9999", [{"id": "g1", "verdict": "correct", "reference": "18"}],
                              tmp_path)
    other = run("r2", 2)
    store.append_eval_answers(other.meta, "mmlu-pro", "5eed5eed5eed5eed", [a.model_dump() for a in answers(set())],
                              tmp_path)

    df = store.load_eval_answers("r1", "mmlu-pro", tmp_path)
    assert list(df["question_id"]) == [a.id for a in got]  # the sample's order
    assert list(df["verdict"]) == [a.verdict for a in got] and list(df["category"]) == [a.category for a in got]
    assert list(df["extracted"]) == [a.extracted for a in got] and set(df["reference"]) == {"B"}
    assert list(df["output_tokens"]) == [a.output_tokens for a in got] and set(df["answer"]) == {"ANSWER: B", "ANSWER: C"}
    assert set(df["sample_digest"]) == {"5eed5eed5eed5eed"} and set(df["commit"]) == {rec.meta.commit}
    assert "reasoning" not in df.columns  # the reasoning stays in the eval log
    assert list(store.load_eval_answers("r1", "gsm8k", tmp_path)["question_id"]) == ["g1"]
    assert store.load_eval_answers("r1", "math500", tmp_path).empty
    assert list(store.load_eval_answers("r2", "mmlu-pro", tmp_path, model=REPO)["verdict"]) == ["correct"] * 10
    assert store.load_eval_answers("r1", "mmlu-pro", tmp_path, model="someone/else").empty
    assert store.append_eval_answers(rec.meta, "math500", "", [], tmp_path) is None  # nothing asked, nothing written


def test_the_same_answers_written_twice_keep_one_file(tmp_path: Path) -> None:
    meta = run("r1", 1).meta
    rows = [a.model_dump() for a in answers({2})]
    stored = store.append_eval_answers(meta, "mmlu-pro", "5eed", rows, tmp_path)
    assert stored is not None
    first = Path(stored)
    data = first.read_bytes()
    again = store.append_eval_answers(meta, "mmlu-pro", "5eed", rows, tmp_path)  # a retried stage
    assert again == stored
    other = store.append_eval_answers(meta, "mmlu-pro", "5eed", [a.model_dump() for a in answers(set())], tmp_path)
    assert other == stored and first.read_bytes() == data  # append-only: a stored file is never rewritten
    assert [p.name for p in first.parent.iterdir()] == ["r1-mmlu-pro.parquet"]  # no temporary left beside it
    df = store.load_eval_answers("r1", "mmlu-pro", tmp_path)
    assert len(df) == 10 and list(df["verdict"]).count("wrong") == 1


def test_a_store_from_before_the_eval_tables_reads_as_empty(tmp_path: Path) -> None:
    store.append_run(run("r1", 1), tmp_path)  # a release before roost.eval: runs, points, records only
    assert not (tmp_path / "evals").exists() and not (tmp_path / "eval_answers").exists()
    evals = store.load_evals(tmp_path)
    assert evals.empty and {"run_id", "task", "accuracy", "paired_p_value", "model", "host"} <= set(evals.columns)
    assert store.load_eval_answers("r1", "mmlu-pro", tmp_path).empty
    assert store.load_table("eval_answers", tmp_path).empty
    (record,) = store.load_records(tmp_path)
    assert record.evals == []
    assert store.load_evals(tmp_path / "nothing-here").empty  # not even a runs table
