"""The run's verdict when an evaluation's accuracy fell significantly on the same questions (McNemar):
``regressed``, with the accuracy named, whether or not the speed regressed too (pure: real comparisons)."""

from __future__ import annotations

from collections.abc import Collection

from support.samples import earlier_runs, failed_run, spark_run

from roost.eval.datasets import DatasetInfo
from roost.eval.scoring import paired, summarize
from roost.eval.suites import Sampling
from roost.naming import run_verdict
from roost.records import EvalRecord, RunRecord
from roost.regress import compare

BASE = {f"q{i}": ("law" if i % 2 == 0 else "math", i not in {1, 3, 5, 7, 9}) for i in range(40)}  # 35 of 40


def evaluation(flipped_wrong: Collection[int], flipped_right: Collection[int] = ()) -> EvalRecord:
    """The baseline's answers with some right ones now wrong and some wrong ones now right."""
    now = {q: (cat, (ok and int(q[1:]) not in flipped_wrong) or int(q[1:]) in flipped_right)
           for q, (cat, ok) in BASE.items()}
    return EvalRecord(task="mmlu-pro", dataset=DatasetInfo(source="/data/mmlu-pro.parquet", revision="sha256:01"),
                      sampling=Sampling(temperature=0.0, thinking=False, concurrency=8), sample_digest="5eed",
                      summary=summarize({"verdict": "correct" if ok else "wrong", "category": c} for c, ok in now.values()),
                      baseline_run_id="20260301T020000Z-00000001", comparison=paired(BASE, now))


LAW_LOST = set(range(0, 24, 2))  # 12 law questions right before, wrong now: p = 2 / 2**12


def with_evals(rec: RunRecord, *evals: EvalRecord) -> RunRecord:
    return rec.model_copy(update={"evals": list(evals)})


def test_an_accuracy_only_regression_is_regressed_with_the_accuracy_named() -> None:
    current = with_evals(spark_run(day=9), evaluation(LAW_LOST))
    speed = compare(current, earlier_runs(4))
    assert speed.status == "ok" and not speed.regressions
    verdict = run_verdict(current, speed)
    assert verdict.kind == "regressed" and verdict.tag == "verdict:regressed"
    assert verdict.message == "regressed: mmlu-pro accuracy -30.0 points (McNemar p = 0.00049)"
    assert run_verdict(current, None) == verdict  # not compared for speed (no baseline could be read)
    first = compare(current, [])
    assert first.status == "baseline" and run_verdict(current, first) == verdict  # the first speed baseline


def test_speed_and_accuracy_regressions_are_both_listed() -> None:
    current = with_evals(spark_run(day=9, scale=0.5), evaluation(LAW_LOST))
    speed = compare(current, earlier_runs(4))
    assert speed.status == "regressed" and speed.regressions
    verdict = run_verdict(current, speed)
    assert verdict.kind == "regressed"
    assert verdict.message.startswith("regressed: mmlu-pro accuracy -30.0 points (McNemar p = 0.00049), ")
    assert speed.regressions[0].metric.label in verdict.message and "\u2212" in verdict.message  # fmt_change's minus


def test_noise_and_gains_leave_the_speed_verdict() -> None:
    noise = with_evals(spark_run(day=9), evaluation({0, 2}, {1, 3}))  # 2 flips each way: p = 1
    assert noise.evals[0].comparison is not None and not noise.evals[0].comparison.significant
    speed = compare(noise, earlier_runs(4))
    assert run_verdict(noise, speed).kind == "ok"
    gained = with_evals(spark_run(day=9), evaluation(set(), {1, 3, 5, 7, 9}))  # p = 0.0625: not significant
    assert run_verdict(gained, compare(gained, earlier_runs(4))).kind == "ok"
    unpaired = with_evals(spark_run(day=9), evaluation(LAW_LOST).model_copy(update={"comparison": None}))
    assert run_verdict(unpaired, None).kind == "unknown"


def test_a_failed_run_is_failed_even_with_an_accuracy_regression() -> None:
    current = with_evals(failed_run(), evaluation(LAW_LOST))
    assert run_verdict(current, None).kind == "failed"


def test_the_report_and_the_headline_table_say_regressed_for_an_accuracy_only_regression() -> None:
    """The report's verdict and the headline table artifact agree with the run's verdict: a significantly worse
    evaluation is a regression though the speed comparison is ok; the evaluation is listed as judged."""
    from roost.headline import headline_rows
    from roost.report.blocks import Bullets, Para
    from roost.report.sections.summary import verdict_blocks
    from tasks.report import headline_table

    current = with_evals(spark_run(day=9), evaluation(LAW_LOST))
    speed = compare(current, earlier_runs(4))
    blocks = verdict_blocks(current, headline_rows(current), speed)
    assert isinstance(blocks[0], Para) and blocks[0].text.startswith("**Verdict:** **REGRESSED:** mmlu-pro accuracy -30.0 points")
    assert isinstance(blocks[1], Bullets) and "mmlu-pro accuracy -30.0 points (McNemar p = 0.00049: regressed)" in blocks[1].items[0]
    assert headline_table(current, speed)[-1] == {"metric": "verdict", "value": "mmlu-pro -30.0 points", "change": "—",
                                                  "verdict": "REGRESSED"}
