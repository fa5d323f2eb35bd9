"""Headline numbers: the reference point, the knee applied to a run, % of ceiling, the rows every
output shows, and the metrics the regression check compares."""

from __future__ import annotations

import pytest

from roost.catalogue import ERROR_REQUESTS, UNMEASURABLE
from roost.headline import (
    concurrency_points,
    headline,
    headline_rows,
    knee_of,
    max_num_seqs,
    pct_of_ceiling,
    reference_point,
    run_metrics,
    unmeasurable_text,
)
from roost.records import BenchPoint, Distribution, ProbeResult, RunMeta, RunRecord


def rec(points: list[BenchPoint], ceiling: float | None = 17.2, status: str = "completed") -> RunRecord:
    meta = RunMeta(roost_version="0", profile="p", repo_id="o/m", revision="main", commit="c", served_model_name="m",
                   host="spark", backend="docker")
    return RunRecord(meta=meta, points=points, decode_ceiling_tok_s=ceiling, status=status)  # type: ignore[arg-type]


def pl(prompt: int, decode: float | None, ttft: float = 0.5, **kw: object) -> BenchPoint:
    return BenchPoint(kind="prompt_length", prompt_tokens=prompt, output_tokens=256, concurrency=1, requests=3,
                      decode_tok_s=Distribution(median=decode), ttft_s=Distribution(median=ttft), **kw)  # type: ignore[arg-type]


def cc(conc: int, agg: float | None, **kw: object) -> BenchPoint:
    return BenchPoint(kind="concurrency", prompt_tokens=1024, output_tokens=512, concurrency=conc, requests=conc,
                      output_tok_s=Distribution(median=agg), **kw)  # type: ignore[arg-type]


def test_reference_point_is_the_prompt_nearest_2048_ties_to_the_shorter() -> None:
    assert reference_point(rec([pl(511, 12.65), pl(2042, 12.61), pl(8206, 12.5)])).prompt_tokens == 2042  # type: ignore[union-attr]
    assert reference_point(rec([pl(1024, 30.0), pl(3072, 29.0)])).prompt_tokens == 1024  # type: ignore[union-attr]
    assert reference_point(rec([pl(128, 80.0), pl(512, 79.0)])).prompt_tokens == 512  # type: ignore[union-attr]
    # skipped points, all-failed points and points without a decode rate do not count
    r = rec([pl(2048, 12.6, skipped=True), pl(2000, 12.0, errors=3), pl(1900, None), pl(512, 12.7)])
    assert reference_point(r).prompt_tokens == 512  # type: ignore[union-attr]
    assert reference_point(rec([])) is None


def test_with_every_decode_timing_unmeasurable_the_ttft_is_still_the_headline() -> None:
    """A busy CPU flushed every stream in a burst: no decode rate, but the TTFTs were measured."""
    r = rec([pl(128, None, ttft=0.09, unmeasurable=3), pl(1024, None, ttft=1.12, unmeasurable=3)])
    h = headline(r)
    assert (h.decode_tok_s, h.ttft_s, h.reference_prompt_tokens) == (None, 1.12, 1024)


def test_the_knee_of_a_run_is_taken_over_its_measured_concurrency_points() -> None:
    # the Ornith 1.5 recipe's sweep shape: the peak at the --max-num-seqs cap (20), a drop past it;
    # a skipped level and a level whose requests all failed do not count, however high they read
    r = rec([cc(1, 60.0), cc(16, 450.0), cc(20, 490.3), cc(24, 405.7), cc(32, 999.0, skipped=True),
             cc(40, 999.0, errors=40)])
    knee = knee_of(concurrency_points(r))
    assert knee is not None and (knee.concurrency, knee.peak_concurrency) == (16, 20)  # 450 >= 0.9 * 490.3
    assert knee_of([]) is None


def test_headline_of_a_full_run() -> None:
    r = rec([pl(511, 12.65, 0.14), pl(2042, 12.61, 0.54), cc(1, 12.6), cc(16, 141.5), cc(20, 150.2), cc(24, 131.0, errors=2)])
    h = headline(r)
    assert (h.decode_tok_s, h.ttft_s, h.reference_prompt_tokens) == (12.61, 0.54, 2042)
    assert h.decode_pct_of_ceiling == pytest.approx(73.31, abs=0.005)  # the 9B recipe: 12.61 of a 17.2 ceiling
    assert (h.peak_output_tok_s, h.peak_concurrency, h.knee_concurrency) == (150.2, 20, 16)
    assert (h.points, h.requests, h.error_requests) == (6, 6 + 1 + 16 + 20 + 24, 2)


def test_headline_of_a_run_without_points_is_empty_not_an_error() -> None:
    h = headline(rec([], ceiling=None, status="failed"))
    assert h.decode_tok_s is None and h.peak_output_tok_s is None and h.decode_pct_of_ceiling is None
    assert run_metrics(rec([pl(2048, 12.6)], status="failed")) == []


def test_run_metrics_names_and_directions() -> None:
    r = rec([pl(2048, 12.6, 0.54), pl(2048, 99.0, 9.9), cc(16, 141.5)])  # a duplicate prompt length: first counts
    got = {m.metric.name: (m.value, m.metric.direction and m.metric.direction.value) for m in run_metrics(r)}
    assert got == {
        "decode_tok_s@prompt=2048": (12.6, "higher_is_better"),
        "ttft_s@prompt=2048": (0.54, "lower_is_better"),
        "output_tok_s@concurrency=16": (141.5, "higher_is_better"),
        "peak_output_tok_s": (141.5, "higher_is_better"),
        ERROR_REQUESTS.name: (0.0, "lower_is_better"),
    }


def test_headline_rows_are_what_every_output_shows() -> None:
    r = rec([pl(511, 12.65, 0.14), pl(2042, 12.61, 0.54), cc(1, 12.6), cc(16, 141.5), cc(20, 150.2), cc(24, 131.0)])
    r.serve.logged_kv_cache_tokens, r.serve.predicted_kv_cache_tokens = 390070, 390070
    r.serve.logged_max_concurrency, r.serve.start_to_healthy_s = 1.49, 161.3
    rows = {row.label: (row.text, row.compared_as) for row in headline_rows(r)}
    assert rows == {
        "decode tok/s @ 2,042-token prompt": ("12.6 tok/s", "decode_tok_s@prompt=2042"),
        "TTFT @ 2,042-token prompt": ("0.54 s", "ttft_s@prompt=2042"),
        "roofline decode ceiling": ("17.2 tok/s", None),
        "decode % of roofline ceiling": ("73.3%", None),
        "peak aggregate output tok/s": ("150.2 tok/s @ 20 concurrent", "peak_output_tok_s"),
        "knee (≥90% of peak)": ("16 concurrent (141.5 tok/s)", None),
        "KV cache (vLLM log)": ("390,070 tokens (plan 390,070)", None),
        "max concurrency (vLLM log)": ("1.49x", None),
        "cold start to /health": ("161.3 s", "start_to_healthy_s"),
        "failed benchmark requests": ("0 of 67", "error_requests"),
    }
    # every compared row names a metric the regression check produces for this run
    compared = {m.metric.name for m in run_metrics(r)}
    assert {c for _, c in rows.values() if c} <= compared


def test_headline_rows_of_a_failed_run_have_no_values_and_say_why_in_the_cell() -> None:
    rows = headline_rows(rec([], ceiling=None, status="failed"))
    assert [row.value for row in rows] == [None] * len(rows)
    assert {row.short for row in rows} == {"— (the run failed at setup)"}


def test_a_missing_value_says_why_in_its_own_cell() -> None:
    """Every decode timing unmeasurable: the decode cell says so (not a bare dash with the reason far below);
    the TTFT, measured, is there; the % of ceiling says it lacks the decode rate."""
    r = rec([pl(2048, None, unmeasurable=3, unmeasurable_reasons="3 delivered in a burst")])
    by = {row.metric.name.split("@")[0]: row for row in headline_rows(r)}
    assert by["decode_tok_s"].short == "— (every decode timing unmeasurable: 3 of 3)"
    assert by["decode_pct_of_ceiling"].short == "— (no decode rate)"
    assert by["ttft_s"].value == 0.5
    assert by["peak_output_tok_s"].short == "— (no concurrency point in the benchmark)"
    unmeasurable = by["unmeasurable_requests"]
    assert (unmeasurable.short, unmeasurable.note) == ("3 of 3", "2,048-token prompt: 3 (3 delivered in a burst)")


@pytest.mark.parametrize(("points", "status", "decode", "peak"), [
    # every request of every point failed: not "skipped"
    ([pl(2048, None, errors=3), cc(8, None, errors=8)], "completed", "— (every request failed: 3 of 3)",
     "— (every request failed: 8 of 8)"),
    # requests completed but no TTFT or decode timing was recorded: not "no request completed"
    ([pl(2048, None, ttft=None)], "completed", "— (no decode timing recorded)", "— (no concurrency point in the benchmark)"),
    ([pl(2048, None, skipped=True)], "completed", "— (every prompt-length point skipped)",
     "— (no concurrency point in the benchmark)"),
    # a run that failed after its benchmark: what the benchmark lacked is said as such, not blamed on the failure
    ([pl(2048, 12.0)], "failed", "12.0 tok/s", "— (no concurrency point in the benchmark)"),
])
def test_each_missing_value_names_its_own_reason(points: list[BenchPoint], status: str, decode: str, peak: str) -> None:
    r = rec(points, status=status)
    r.failed_stage = "report" if status == "failed" else None
    by = {row.metric.name.split("@")[0]: row for row in headline_rows(r)}
    assert (by["decode_tok_s"].short, by["peak_output_tok_s"].short) == (decode, peak)


def test_an_unknown_ceiling_is_no_value_and_a_probe_without_a_time_keeps_its_verdict() -> None:
    r = rec([pl(2048, 12.0)], ceiling=0.0)  # plan.fit.decode_ceiling_tok_s: 0 when it cannot be computed
    r.probes = [ProbeResult(name="tool", ok=False, failure_class="tool_probe_failed", latency_s=None)]
    rows = {row.label: row for row in headline_rows(r)}
    assert rows["roofline decode ceiling"].value is None
    assert rows["tool probe"].short == "— FAILED (tool_probe_failed), no time taken"


def test_pct_of_ceiling() -> None:
    assert pct_of_ceiling(12.6, 17.2) == pytest.approx(73.26, abs=0.01)
    assert pct_of_ceiling(12.6, None) is None and pct_of_ceiling(None, 17.2) is None and pct_of_ceiling(1.0, 0.0) is None


def test_unmeasurable_decode_timings_have_a_row_only_when_there_are_some() -> None:
    clean = rec([pl(128, 200.0), pl(2042, 12.61)])
    assert headline(clean).unmeasurable_requests == 0
    assert UNMEASURABLE.name not in {row.metric.name for row in headline_rows(clean)}
    # the local profile through Docker: both repeats of the 128-token point were unmeasurable
    odd = rec([pl(128, None, unmeasurable=3, unmeasurable_reasons="2 above the roofline ceiling, 1 delivered in a burst"),
               pl(1024, 180.0), cc(1, 200.0), cc(4, 600.0, unmeasurable=1)])
    h = headline(odd)
    assert h.unmeasurable_requests == 4
    assert h.decode_tok_s == 180.0 and h.reference_prompt_tokens == 1024  # the 128-token point has no decode rate
    (row,) = [row for row in headline_rows(odd) if row.metric.name == UNMEASURABLE.name]
    assert (row.label, row.value, row.text, row.compared_as) == (
        "unmeasurable decode timings", 4.0, "4 of 11 (128-token prompt: 3, 4 concurrent: 1)", None)
    assert unmeasurable_text(clean) == ""
    many = rec([pl(100 * i, 10.0, unmeasurable=1) for i in range(1, 6)])
    assert unmeasurable_text(many) == "5 of 15 (100-token prompt: 1, 200-token prompt: 1, 300-token prompt: 1, 2 more points)"
    # not a regression metric: the decode medians already leave these requests out
    assert UNMEASURABLE.name not in {m.metric.name for m in run_metrics(odd)}


def test_max_num_seqs_is_read_from_the_runs_vllm_args() -> None:
    r = rec([])
    assert max_num_seqs(r) is None
    r.meta.vllm_args = ["--max-model-len", "262144", "--max-num-seqs", "16", "--max-num-seqs=20"]
    assert max_num_seqs(r) == 20  # the last one wins, as in vLLM
    r.meta.vllm_args = ["--max-num-seqs", "twenty"]
    assert max_num_seqs(r) is None  # unreadable: not drawn, not an error
