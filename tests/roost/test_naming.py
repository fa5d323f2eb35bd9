"""Run names and verdicts as the Prefect UI shows them (pure: records and real comparisons)."""

from __future__ import annotations

from support.samples import earlier_runs, failed_run, spark_run

from roost.naming import MESSAGE_LIMIT, run_name, run_verdict
from roost.regress import RegressionReport, compare


def test_run_name_has_flow_profile_host_and_short_commit() -> None:
    assert run_name("land", "nvfp4", "spark", "1a2b3c4d5e6f7a8b") == "land · nvfp4 · spark · 1a2b3c4"
    assert run_name("land", "nvfp4", "spark") == "land · nvfp4 · spark"  # the commit is not known yet
    assert run_name("rebenchmark", "", "cpu") == "rebenchmark · cpu"


def test_a_regressed_run_names_the_metrics_and_the_baseline_runs() -> None:
    history = earlier_runs(4)
    current = spark_run(day=9, scale=0.5)
    comparison = compare(current, history)
    assert comparison.status == "regressed"
    verdict = run_verdict(current, comparison)
    assert verdict.kind == "regressed" and verdict.tag == "verdict:regressed"
    assert verdict.message.startswith("regressed: ") and "\u2212" in verdict.message  # fmt_change: minus sign
    assert f"vs runs {', '.join(comparison.baseline_run_ids)}" in verdict.message
    assert comparison.regressions[0].metric.label in verdict.message


def test_ok_baseline_and_insufficient() -> None:
    history = earlier_runs(4)
    same = spark_run(day=9)
    ok = compare(same, history)
    assert run_verdict(same, ok).model_dump() == {
        "kind": "ok", "message": f"ok: no regression against the median of runs {', '.join(ok.baseline_run_ids)} "
                                 "(4 earlier comparable runs)"}
    first = spark_run(day=1)
    assert run_verdict(first, compare(first, [])).kind == "baseline"
    two = compare(same, history[:2])
    assert two.status == "insufficient"  # fewer earlier runs than RegressConfig.min_runs
    verdict = run_verdict(same, two)
    assert verdict.tag == "verdict:insufficient" and verdict.message == "insufficient baseline (2 runs)"


def test_a_failed_run_says_where_whatever_the_comparison() -> None:
    run = failed_run()
    verdict = run_verdict(run, compare(run, earlier_runs(4)))
    assert verdict.kind == "failed" and verdict.message.startswith(f"failed at {run.failed_stage}: ")
    long = run.model_copy(update={"failure_message": "x\n" * 1000})
    assert len(run_verdict(long, None).message) < MESSAGE_LIMIT + 40


def test_no_comparison_and_an_unknown_status_are_tolerated() -> None:
    run = spark_run(day=9)
    assert run_verdict(run, None).kind == "unknown"
    known = compare(run, earlier_runs(4))
    newer = RegressionReport.model_construct(**(dict(known) | {"status": "Drifting Up", "message": "drifted"}))
    verdict = run_verdict(run, newer)
    assert verdict.tag == "verdict:drifting-up" and verdict.message == "Drifting Up: drifted"
