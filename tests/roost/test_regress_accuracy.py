"""The accuracy baseline (``roost.regress.accuracy_baseline``): the newest earlier completed run with an
evaluation of the same key (task, dataset, sample, sampling but concurrency); and ``latest_scores``,
another model's newest score on the same dataset revision."""

from __future__ import annotations

import datetime as dt
from typing import Any

from support.samples import failed_run, spark_run

from roost.eval.datasets import DatasetInfo
from roost.eval.runner import EvalSettings
from roost.eval.scoring import paired, summarize
from roost.eval.suites import Sampling
from roost.records import EvalRecord, RunRecord
from roost.regress import accuracy_baseline, latest_scores

REVISION = "sha256:0123456789abcdef"


def evaluation(correct: int = 30, *, task: str = "mmlu-pro", revision: str = REVISION, digest: str = "5eed5eed",
               source: str = "/data/mmlu-pro.parquet", status: str = "completed", settings: EvalSettings | None = None,
               **sampling: Any) -> EvalRecord:
    """An evaluation of 40 questions, ``correct`` of them right; with ``settings``, asked with their sampling
    (as ``flows.stages.eval_stage`` records it: the runner's ``Sampling`` object as it is)."""
    rows = [{"verdict": "correct" if i < correct else "wrong", "category": "law" if i % 2 else "math"}
            for i in range(40)]
    return EvalRecord(task=task, status=status, dataset=DatasetInfo(source=source, revision=revision),  # type: ignore[arg-type]
                      sampling=settings.sampling if settings is not None else
                      Sampling(**({"temperature": 0.0, "thinking": False, "concurrency": 8} | sampling)),
                      per_category=20, sample_digest=digest, summary=summarize(rows))


def run(day: int, *evals: EvalRecord, failed: bool = False, repo_id: str = "") -> RunRecord:
    rec = failed_run(day) if failed else spark_run(day=day)
    if repo_id:
        rec.meta.repo_id = repo_id
    return rec.model_copy(update={"evals": list(evals)})


def at(day: int) -> dt.datetime:
    return dt.datetime(2026, 3, day, 2, 0, tzinfo=dt.UTC)


def ids(found: tuple[RunRecord, EvalRecord] | None) -> str | None:
    return found[0].meta.run_id if found is not None else None


def test_the_newest_earlier_completed_run_with_the_same_key() -> None:
    current = evaluation()
    history = [run(1, evaluation(35)), run(3, evaluation(34)), run(2, evaluation(36))]  # not in date order
    found = accuracy_baseline(current, history, before=at(9))
    assert found is not None and found[0] is history[1] and found[1] is history[1].evals[0]
    assert found[1].summary.correct == 34
    # without ``before``: the newest of all
    assert ids(accuracy_baseline(current, history)) == history[1].meta.run_id


def test_later_runs_and_the_run_itself_are_not_baselines() -> None:
    current = evaluation()
    history = [run(1, evaluation()), run(5, evaluation()), run(9, evaluation())]
    assert ids(accuracy_baseline(current, history, before=at(5))) == history[0].meta.run_id  # day 5 itself: not earlier
    assert ids(accuracy_baseline(current, history, before=at(6))) == history[1].meta.run_id
    assert accuracy_baseline(current, history, before=at(1)) is None
    assert accuracy_baseline(current, [], before=at(9)) is None


def test_failed_runs_and_failed_evaluations_are_skipped() -> None:
    current = evaluation()
    good = run(1, evaluation(35))
    history = [good, run(4, evaluation(10), failed=True), run(3, evaluation(5, status="failed"))]
    assert ids(accuracy_baseline(current, history, before=at(9))) == good.meta.run_id


def test_only_the_same_task_dataset_sample_and_sampling_pair() -> None:
    current = evaluation()
    good = run(1, evaluation(35))
    others = [
        run(2, evaluation(digest="another-sample")),  # another sample (seed, limit, per_category)
        run(3, evaluation(revision="sha256:fedcba9876543210")),  # the dataset changed
        run(4, evaluation(source="/elsewhere/mmlu-pro.parquet")),
        run(5, evaluation(task="gsm8k")),
        run(6, evaluation(temperature=0.6)),  # other sampling: other answers
        run(7, evaluation(thinking=True)),
        run(8, evaluation(max_tokens=4096)),
    ]
    assert ids(accuracy_baseline(current, [good, *others], before=at(9))) == good.meta.run_id
    # how many questions are in flight does not change the answers
    busier = run(8, evaluation(33, concurrency=64))
    found = accuracy_baseline(current, [good, *others, busier], before=at(9))
    assert found is not None and found[0] is busier and found[1].summary.correct == 33


def test_the_matching_evaluation_of_a_run_with_several() -> None:
    current = evaluation(task="gsm8k", digest="gsm-sample")
    both = run(2, evaluation(35), evaluation(25, task="gsm8k", digest="gsm-sample"))
    found = accuracy_baseline(current, [both], before=at(9))
    assert found is not None and found[1].task == "gsm8k" and found[1].summary.correct == 25


def test_latest_scores_is_the_newest_completed_evaluation_on_the_same_revision() -> None:
    qwen = "Qwen/Qwen3-8B"
    history = [
        run(1, evaluation(20), repo_id=qwen),
        run(2, evaluation(22, digest="another-sample", temperature=0.6), repo_id=qwen),  # any sample, any sampling
        run(3, evaluation(28, revision="sha256:fedcba9876543210"), repo_id=qwen),  # another dataset revision
        run(4, evaluation(29), failed=True, repo_id=qwen),
        run(5, evaluation(30, status="failed"), repo_id=qwen),
        run(6, evaluation(31, task="gsm8k"), repo_id=qwen),
    ]
    found = latest_scores("mmlu-pro", REVISION, history)
    assert found is not None and found[0] is history[1] and found[1].summary.correct == 22
    assert latest_scores("math500", REVISION, history) is None
    assert latest_scores("mmlu-pro", "sha256:nothing", history) is None
    assert latest_scores("mmlu-pro", REVISION, []) is None


def stored(rec: RunRecord) -> RunRecord:
    """The record as ``load_records`` reads it back from the store (its JSON)."""
    return RunRecord.model_validate_json(rec.model_dump_json())


def test_a_baseline_read_back_from_the_store_pairs_with_the_profiles_settings() -> None:
    settings = EvalSettings.for_task("mmlu-pro", temperature=0.0, thinking=False, concurrency=8)
    earlier = stored(run(1, evaluation(settings=settings)))
    found = accuracy_baseline(evaluation(settings=settings), [earlier], before=at(9))
    assert found is not None and found[0].meta.run_id == earlier.meta.run_id


def test_a_profile_giving_temperature_0_pairs_with_its_stored_baseline() -> None:
    settings = EvalSettings.for_task("mmlu-pro", temperature=0, thinking=False, concurrency=8)  # a profile's JSON
    earlier = stored(run(1, evaluation(settings=settings)))
    found = accuracy_baseline(evaluation(settings=settings), [earlier], before=at(9))
    assert found is not None and found[0].meta.run_id == earlier.meta.run_id


def test_a_run_that_regressed_is_not_the_baseline_so_a_lasting_drop_stays_flagged() -> None:
    """Run 2 dropped significantly: run 3 is paired with run 1, the last run that did not regress."""
    good = stored(run(1, evaluation()))
    dropped = evaluation()
    dropped.comparison = paired({f"q{i}": ("law", True) for i in range(20)}, {f"q{i}": ("law", False) for i in range(20)})
    assert dropped.comparison is not None and dropped.comparison.significant
    bad = stored(run(2, dropped))
    found = accuracy_baseline(evaluation(), [good, bad], before=at(9))
    assert found is not None and found[0].meta.run_id == good.meta.run_id
