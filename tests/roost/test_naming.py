"""Run names and verdicts as the Prefect UI shows them (pure: records and real comparisons)."""

from __future__ import annotations

import datetime as dt

from support.samples import earlier_runs, failed_run, spark_run

from roost.naming import MESSAGE_LIMIT, pinned_commit, run_name, run_verdict
from roost.regress import RegressionReport, compare


def test_run_name_has_flow_profile_host_and_short_commit() -> None:
    assert run_name("land", "nvfp4", "spark", "1a2b3c4d5e6f7a8b") == "land · nvfp4 · spark · 1a2b3c4"
    assert run_name("land", "nvfp4", "spark") == "land · nvfp4 · spark"  # the commit is not known yet
    assert run_name("rebenchmark", "", "cpu") == "rebenchmark · cpu"


def test_run_name_ends_with_its_start_in_utc_to_the_second() -> None:
    at = dt.datetime(2026, 12, 6, 7, 31, 2, 900_000, tzinfo=dt.UTC)
    assert run_name("land", "local", "cpu", "be05eef0", at) == "land · local · cpu · be05eef · 12-06 07:31:02 UTC"
    assert run_name("land", "local", "cpu", "", at) == "land · local · cpu · 12-06 07:31:02 UTC"  # before the Hub
    paris = dt.timezone(dt.timedelta(hours=1))
    assert run_name("land", "local", "", "", dt.datetime(2026, 12, 6, 8, 31, 2, tzinfo=paris)) == \
        "land · local · 12-06 07:31:02 UTC"
    assert run_name("land", started=dt.datetime(2026, 1, 2, 3, 4, 5)) == "land · 01-02 03:04:05 UTC"  # naive: UTC


def test_two_runs_in_the_same_minute_have_different_names_and_sort_by_start() -> None:
    first = dt.datetime(2026, 12, 6, 7, 31, 2, tzinfo=dt.UTC)
    names = [run_name("land", "local", "cpu", "be05eef", first + dt.timedelta(seconds=s)) for s in (0, 1, 57)]
    assert len(set(names)) == 3 and sorted(names) == names
    later = run_name("land", "local", "cpu", "be05eef", dt.datetime(2026, 12, 10, 0, 0, 0, tzinfo=dt.UTC))
    assert sorted([later, *names]) == [*names, later]


def test_only_a_full_sha_is_a_commit_known_before_the_hub() -> None:
    sha = "1A2B3C4D5E6F7A8B9C0D1E2F3A4B5C6D7E8F9A0B"
    assert pinned_commit(sha) == sha.lower() and pinned_commit(f" {sha.lower()} ") == sha.lower()
    for revision in ("main", "v1.0", "1a2b3c4", sha[:39], sha + "0", "g" * 40, ""):
        assert pinned_commit(revision) == "", revision


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
    # the verdict says the band each headline metric had (the run ids are in the report)
    assert run_verdict(same, ok).model_dump() == {
        "kind": "ok", "message": "ok: no regression against the median of 4 earlier runs; bands: decode tok/s ±5%, "
                                 "TTFT ±9%, peak aggregate output tok/s ±5%, cold start to /health ±5%, failed "
                                 "benchmark requests ±0.5 requests"}
    # a headline metric the run did not measure is named as not judged
    unmeasured = spark_run(day=9)
    unmeasured.points = [p for p in unmeasured.points if p.kind == "concurrency"]
    message = run_verdict(unmeasured, compare(unmeasured, history)).message
    assert "not judged: decode tok/s (not measured), TTFT (not measured)" in message, message
    first = spark_run(day=1)
    assert run_verdict(first, compare(first, [])).kind == "baseline"
    two = compare(same, history[:2])
    assert two.status == "insufficient"  # fewer earlier runs than RegressConfig.min_runs
    verdict = run_verdict(same, two)
    assert verdict.tag == "verdict:insufficient"
    assert verdict.message == "insufficient baseline (2 runs; a verdict needs 3): nothing judged"


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
