"""Regression detection with fixed histories: baseline = median of the last N comparable runs,
threshold = max(rel floor, k x MAD, the metric's absolute floor)."""

from __future__ import annotations

import datetime as dt

import pytest
from support.samples import dist

from roost.catalogue import Direction, Metric
from roost.records import BenchPoint, RunMeta, RunRecord, ServeObservation
from roost.regress import RegressConfig, comparable_history, compare, judge, mad

DECODE = "decode_tok_s@prompt=2048"
TTFT = "ttft_s@prompt=2048"
AGG = "output_tok_s@concurrency=16"


def run(i: int, decode: float = 12.6, ttft: float = 0.54, agg: float = 141.5, errors: int = 0,
        commit: str = "abc123", args: tuple[str, ...] = ("--max-num-seqs", "20"), host: str = "spark",
        status: str = "completed", cold: float = 108.0) -> RunRecord:
    meta = RunMeta(run_id=f"run-{i:02d}", started_at=dt.datetime(2026, 3, 1, tzinfo=dt.UTC) + dt.timedelta(days=i),
                   roost_version="0.1.0", profile="ornith-9b", repo_id="deepreinforce/Ornith-1.0-9B", revision="main",
                   commit=commit, served_model_name="ornith-9b", host=host, backend="docker",
                   image_digest="sha256:feed", vllm_args=list(args))
    points = [
        BenchPoint(kind="prompt_length", prompt_tokens=2048, output_tokens=256, concurrency=1, requests=3,
                   errors=errors, decode_tok_s=dist(decode), ttft_s=dist(ttft)),
        BenchPoint(kind="concurrency", prompt_tokens=2048, output_tokens=512, concurrency=16, requests=32,
                   output_tok_s=dist(agg)),
    ]
    return RunRecord(meta=meta, status=status, points=points if status == "completed" else [],  # type: ignore[arg-type]
                     failed_stage="" if status == "completed" else "benchmark",
                     serve=ServeObservation(start_to_healthy_s=cold))


def history(decodes: list[float], **kw: object) -> list[RunRecord]:
    return [run(i, decode=d, **kw) for i, d in enumerate(decodes)]  # type: ignore[arg-type]


def test_first_run_establishes_the_baseline_and_says_so() -> None:
    report = compare(run(10), [])
    assert report.status == "baseline" and report.first_run
    assert "establishes the baseline" in report.message
    assert report.baseline_run_ids == []
    assert {c.verdict for c in report.comparisons} == {"new"}
    assert report.get(DECODE) is not None and report.get(DECODE).current == 12.6  # type: ignore[union-attr]
    assert not report.has_regressions


def test_baseline_is_the_median_of_the_last_n_comparable_runs() -> None:
    hist = history([50.0, 50.0, 12.0, 12.4, 12.6, 12.8, 13.0])  # the two old outliers fall outside window=5
    report = compare(run(10, decode=12.6), hist, RegressConfig(window=5))
    c = report.get(DECODE)
    assert c is not None
    assert c.baseline == pytest.approx(12.6)
    assert c.baseline_runs == 5
    assert report.baseline_run_ids == [f"run-{i:02d}" for i in range(2, 7)]
    assert c.verdict == "unchanged"


def test_a_drop_beyond_the_relative_floor_is_a_regression() -> None:
    hist = history([12.6, 12.6, 12.6, 12.6, 12.6])  # MAD 0: the 5 % floor decides (0.63 tok/s)
    assert compare(run(10, decode=11.9), hist).get(DECODE).verdict == "regressed"  # type: ignore[union-attr]  # -5.6 %
    assert compare(run(10, decode=12.0), hist).get(DECODE).verdict == "unchanged"  # type: ignore[union-attr]  # -4.8 %
    report = compare(run(10, decode=11.0), hist)
    c = report.get(DECODE)
    assert c is not None and c.verdict == "regressed"
    assert c.change == pytest.approx(-1.6) and c.change_pct == pytest.approx(-12.698, abs=1e-3)
    assert c.threshold == pytest.approx(0.63)
    assert report.status == "regressed" and report.has_regressions
    assert "1 metric(s) regressed against the median of 5 earlier comparable runs" in report.message


def test_a_noisy_baseline_widens_the_threshold_to_k_times_its_mad() -> None:
    hist = history([10.5, 11.5, 12.5, 13.5, 14.5])  # median 12.5, MAD 1.0 -> threshold 3.0 (k=3) > 5 % (0.625)
    report = compare(run(10, decode=10.0), hist)
    c = report.get(DECODE)
    assert c is not None and c.baseline == 12.5 and c.baseline_mad == 1.0
    assert c.threshold == pytest.approx(3.0)
    assert c.verdict == "unchanged"  # -2.5 tok/s is within the noise
    assert compare(run(10, decode=9.4), hist).get(DECODE).verdict == "regressed"  # type: ignore[union-attr]
    # with k=1 the same -2.5 tok/s is a regression
    assert compare(run(10, decode=10.0), hist, RegressConfig(mad_k=1.0)).get(DECODE).verdict == "regressed"  # type: ignore[union-attr]


def test_direction_lower_is_better_for_ttft_and_higher_for_throughput() -> None:
    hist = [run(i) for i in range(5)]
    slower = compare(run(10, ttft=0.70), hist)
    assert slower.get(TTFT).verdict == "regressed"  # type: ignore[union-attr]
    faster = compare(run(10, ttft=0.40), hist)
    assert faster.get(TTFT).verdict == "improved"  # type: ignore[union-attr]
    more = compare(run(10, agg=170.0), hist)
    assert more.get(AGG).verdict == "improved"  # type: ignore[union-attr]
    assert more.get("peak_output_tok_s").verdict == "improved"  # type: ignore[union-attr]
    assert more.status == "ok" and [c.metric.name for c in more.improvements] == [AGG, "peak_output_tok_s"]
    assert "no regression" in more.message and "2 improved" in more.message
    less = compare(run(10, agg=120.0), hist)
    assert {c.metric.name for c in less.regressions} == {AGG, "peak_output_tok_s"}


def test_failed_requests_regress_from_zero() -> None:
    hist = [run(i) for i in range(3)]
    report = compare(run(10, errors=1), hist)
    c = report.get("error_requests")
    assert c is not None and c.baseline == 0 and c.change_pct is None and c.verdict == "regressed"


def test_only_comparable_completed_earlier_runs_form_the_baseline() -> None:
    current = run(10, decode=11.0)
    hist = [
        run(1, decode=12.6),
        run(2, decode=5.0, commit="other-commit"),
        run(3, decode=5.0, args=("--max-num-seqs", "32")),
        run(4, decode=5.0, host="cpu"),
        run(5, decode=5.0, status="failed"),
        run(20, decode=5.0),  # later than the current run
        current,  # the run itself
    ]
    assert [r.meta.run_id for r in comparable_history(current, hist, 10)] == ["run-01"]
    report = compare(current, hist)
    assert report.baseline_run_ids == ["run-01"]
    assert report.get(DECODE).baseline == 12.6  # type: ignore[union-attr]
    assert "1 earlier comparable run" in report.message


def test_a_new_configuration_starts_its_own_baseline() -> None:
    hist = [run(i) for i in range(5)]
    report = compare(run(10, commit="new-commit", decode=6.0), hist)
    assert report.status == "baseline" and not report.has_regressions


def test_a_failed_run_is_not_compared() -> None:
    report = compare(run(10, status="failed"), [run(i) for i in range(5)])
    assert report.status == "failed_run" and report.comparisons == []
    assert "failed at benchmark" in report.message


def test_a_metric_the_baseline_never_measured_is_new() -> None:
    hist = [run(i) for i in range(3)]
    current = run(10)
    current.points.append(BenchPoint(kind="prompt_length", prompt_tokens=8192, output_tokens=256, concurrency=1,
                                     requests=3, decode_tok_s=dist(12.5), ttft_s=dist(1.65)))
    report = compare(current, hist)
    assert report.get("decode_tok_s@prompt=8192").verdict == "new"  # type: ignore[union-attr]
    assert report.get(DECODE).verdict == "unchanged"  # type: ignore[union-attr]


def test_judge_and_mad_by_hand() -> None:
    m = Metric(name="x", label="x", unit="", direction=Direction.HIGHER, definition="a test metric")
    assert mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0
    c = judge(m, 90.0, [100.0, 100.0, 100.0], RegressConfig(rel_floor=0.05))
    assert (c.baseline, c.threshold, c.verdict) == (100.0, 5.0, "regressed")
    c = judge(m, 106.0, [100.0], RegressConfig(rel_floor=0.05))
    assert c.verdict == "improved"
    floor = Metric(name="e", label="e", unit="", direction=Direction.LOWER, definition="a test metric", abs_floor=0.5)
    assert judge(floor, 0.0, [0.0, 0.0], RegressConfig()).verdict == "unchanged"


def test_the_comparability_key_is_configurable() -> None:
    hist = [run(i, decode=12.6, commit="old-commit") for i in range(3)]
    current = run(10, decode=11.0, commit="new-commit")
    assert compare(current, hist).status == "baseline"  # default: a new commit starts a new baseline
    across = compare(current, hist, RegressConfig(key_fields=["repo_id", "host"]))
    assert across.status == "regressed" and across.comparable_key == ["deepreinforce/Ornith-1.0-9B", "spark"]
    with pytest.raises(ValueError, match="key_fields"):
        RegressConfig(key_fields=["gpu"])


def test_a_profile_carries_its_regression_settings() -> None:
    from pydantic import ValidationError

    from roost.profiles import LOCAL

    prof = LOCAL.model_copy(update={"regress": {"window": 3, "rel_floor": 0.1}})
    assert prof.regress_config() == RegressConfig(window=3, rel_floor=0.1)
    assert LOCAL.regress_config() == RegressConfig()
    with pytest.raises(ValidationError, match="window"):
        type(LOCAL).model_validate(LOCAL.model_dump() | {"regress": {"window": 0}})
    with pytest.raises(ValidationError, match="windw"):
        type(LOCAL).model_validate(LOCAL.model_dump() | {"regress": {"windw": 3}})
