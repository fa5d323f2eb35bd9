"""``RunRecord.evals``: accuracy evaluations round-trip through the record's JSON, records written before
the field existed still load, and ``accuracy_regressions`` lists only significant losses (McNemar)."""

from __future__ import annotations

import json

from support.samples import spark_run

from roost.eval.datasets import DatasetInfo
from roost.eval.scoring import PairedComparison, paired, summarize
from roost.eval.suites import Sampling
from roost.records import SCHEMA_VERSION, EvalRecord, OtherModelScore, RunRecord

CATS = ("law", "math")


def outcomes(wrong: set[int], n: int = 40) -> dict[str, tuple[str, bool]]:
    """``{question id: (category, correct)}``: questions q0..q{n-1}, even ones law, odd ones math."""
    return {f"q{i}": (CATS[i % 2], i not in wrong) for i in range(n)}


def evaluation(now: dict[str, tuple[str, bool]], comparison: PairedComparison | None = None, *,
               task: str = "mmlu-pro", status: str = "completed") -> EvalRecord:
    rows = [{"verdict": "correct" if ok else "wrong", "category": cat, "output_tokens": 120}
            for cat, ok in now.values()]
    return EvalRecord(
        task=task, status=status,  # type: ignore[arg-type]
        error="" if status == "completed" else "the server stopped answering (ConnectError, 3 attempts)",
        dataset=DatasetInfo(source="/data/mmlu-pro/test.parquet", revision="sha256:0123456789abcdef",
                            files=["test.parquet"], rows=len(now)),
        sampling=Sampling(temperature=0.0, thinking=False, concurrency=8), seed=0, per_category=20,
        sample_digest="5eed5eed5eed5eed", summary=summarize(rows), elapsed_s=12.5,
        baseline_run_id="20260301T020000Z-00000001" if comparison else "", comparison=comparison)


BASE = outcomes({1, 3, 5, 7, 9})  # 35 of 40 right, the misses in math


def worse() -> EvalRecord:
    """12 law questions right in the baseline are wrong now: McNemar p = 2 / 2**12, significant."""
    now = outcomes({1, 3, 5, 7, 9, *range(0, 24, 2)})
    c = paired(BASE, now)
    assert c is not None and c.significant and c.direction == "worse"
    return evaluation(now, c)


def test_a_record_with_evaluations_round_trips_through_json() -> None:
    ev = worse()
    ev.baseline = OtherModelScore(repo_id="deepreinforce/Ornith-1.0-9B", run_id="20260301T020000Z-00000001",
                                  host="spark", accuracy=0.875, ci_low=0.74, ci_high=0.95, n=40,
                                  per_category=summarize({"verdict": "correct" if ok else "wrong", "category": c}
                                                         for c, ok in BASE.values()).per_category)
    ev.others = [OtherModelScore(repo_id="Qwen/Qwen3-8B", run_id="20260228T020000Z-0000000f", host="spark",
                                 accuracy=0.8, ci_low=0.65, ci_high=0.9, n=40)]
    gsm = evaluation({"g1": ("", True), "g2": ("", False)}, task="gsm8k", status="failed")
    record = spark_run(day=9).model_copy(update={"evals": [ev, gsm]})

    text = record.model_dump_json()
    back = RunRecord.model_validate_json(text)
    assert back == record
    assert [e.task for e in back.evals] == ["mmlu-pro", "gsm8k"]
    c = back.evals[0].comparison
    assert c is not None and (c.lost, c.gained, c.pairs) == (12, 0, 40)
    assert [(m.category, m.lost, m.gained) for m in c.categories] == [("law", 12, 0)]
    assert back.evals[0].summary.per_category["law"].correct == 8  # 20 law questions, 12 of them lost
    assert back.evals[0].baseline is not None and back.evals[0].baseline.per_category["math"].correct == 15
    assert back.evals[0].key() == record.evals[0].key()  # the pairing key survives the trip
    assert back.evals[1].status == "failed" and "stopped answering" in back.evals[1].error
    assert json.loads(text)["evals"][0]["sampling"]["concurrency"] == 8


def test_a_record_written_before_evals_existed_still_loads() -> None:
    current = json.loads(spark_run(day=2).model_dump_json())
    del current["evals"]  # what a release before roost.eval wrote
    old = RunRecord.model_validate(current)
    assert old.evals == [] and old.accuracy_regressions == []
    assert old.meta.run_id == spark_run(day=2).meta.run_id and old.points

    v1 = {k: v for k, v in current.items() if k not in ("schema_version", "points")}  # schema 1: flat statistics
    v1["points"] = [{"kind": "prompt_length", "prompt_tokens": 511, "output_tokens": 256, "concurrency": 1,
                     "requests": 3, "decode_tok_s_median": 12.6, "ttft_s_median": 0.14, "output_tok_s": 12.0}]
    upgraded = RunRecord.model_validate_json(json.dumps(v1))
    assert upgraded.schema_version == SCHEMA_VERSION and upgraded.evals == []
    assert upgraded.points[0].decode_tok_s.median == 12.6


def test_accuracy_regressions_lists_only_significant_losses() -> None:
    lost = worse()
    gained_now = outcomes(set())  # the 5 math misses now right, nothing lost: p = 0.0625, not significant
    noise_now = outcomes({1, 3, 5, 11, 13, 0, 2})  # lost 4 (11, 13, 0, 2), gained 2 (7, 9)
    better_base = outcomes({*range(0, 24, 2)})  # the baseline missed 12 law questions; all right now
    better_now = outcomes(set())
    noise, better, small_gain = paired(BASE, noise_now), paired(better_base, better_now), paired(BASE, gained_now)
    assert noise is not None and not noise.significant and noise.lost > noise.gained and noise.direction == "same"
    assert better is not None and better.significant and better.direction == "better"
    assert small_gain is not None and not small_gain.significant
    unpaired = evaluation(BASE)  # no earlier run of the same questions
    cut_short = evaluation(BASE, status="failed")
    evals = [unpaired, evaluation(noise_now, noise), lost, evaluation(better_now, better),
             evaluation(gained_now, small_gain), cut_short]
    record = spark_run(day=9).model_copy(update={"evals": evals})
    assert record.accuracy_regressions == [lost]
    assert spark_run(day=9).accuracy_regressions == []
