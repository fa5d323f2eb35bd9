# ruff: noqa: RUF001  (the reports print a real minus sign)
"""Headline numbers: one definition each (reference point, knee, % of ceiling, formatting)."""

from __future__ import annotations

import pytest

from roost.headline import (
    ERROR_REQUESTS,
    fmt_change,
    fmt_value,
    headline,
    knee_point,
    pct_of_ceiling,
    reference_point,
    run_metrics,
)
from roost.records import BenchPoint, RunMeta, RunRecord


def rec(points: list[BenchPoint], ceiling: float | None = 17.2, status: str = "completed") -> RunRecord:
    meta = RunMeta(roost_version="0", profile="p", repo_id="o/m", revision="main", commit="c", served_model_name="m",
                   host="spark", backend="docker")
    return RunRecord(meta=meta, points=points, decode_ceiling_tok_s=ceiling, status=status)  # type: ignore[arg-type]


def pl(prompt: int, decode: float | None, ttft: float = 0.5, **kw: object) -> BenchPoint:
    return BenchPoint(kind="prompt_length", prompt_tokens=prompt, output_tokens=256, concurrency=1, requests=3,
                      decode_tok_s_median=decode, ttft_s_median=ttft, **kw)  # type: ignore[arg-type]


def cc(conc: int, agg: float | None, **kw: object) -> BenchPoint:
    return BenchPoint(kind="concurrency", prompt_tokens=1024, output_tokens=512, concurrency=conc, requests=conc,
                      output_tok_s=agg, **kw)  # type: ignore[arg-type]


def test_reference_point_is_the_prompt_nearest_2048_ties_to_the_shorter() -> None:
    assert reference_point(rec([pl(511, 12.65), pl(2042, 12.61), pl(8206, 12.5)])).prompt_tokens == 2042  # type: ignore[union-attr]
    assert reference_point(rec([pl(1024, 30.0), pl(3072, 29.0)])).prompt_tokens == 1024  # type: ignore[union-attr]
    assert reference_point(rec([pl(128, 80.0), pl(512, 79.0)])).prompt_tokens == 512  # type: ignore[union-attr]
    # skipped points, all-failed points and points without a decode rate do not count
    r = rec([pl(2048, 12.6, skipped=True), pl(2000, 12.0, errors=3), pl(1900, None), pl(512, 12.7)])
    assert reference_point(r).prompt_tokens == 512  # type: ignore[union-attr]
    assert reference_point(rec([])) is None


def test_knee_is_the_lowest_concurrency_reaching_90_percent_of_peak() -> None:
    # seed 002's sweep shape: the peak at the --max-num-seqs cap (20), a drop past it
    pts = [cc(1, 60.0), cc(16, 450.0), cc(20, 490.3), cc(24, 405.7)]
    assert knee_point(pts).concurrency == 16  # type: ignore[union-attr]  # 450 >= 0.9 * 490.3 = 441.3
    pts = [cc(1, 60.0), cc(16, 430.0), cc(20, 490.3), cc(24, 405.7)]
    assert knee_point(pts).concurrency == 20  # type: ignore[union-attr]
    assert knee_point([]) is None


def test_headline_of_a_full_run() -> None:
    r = rec([pl(511, 12.65, 0.14), pl(2042, 12.61, 0.54), cc(1, 12.6), cc(16, 141.5), cc(20, 150.2), cc(24, 131.0, errors=2)])
    h = headline(r)
    assert (h.decode_tok_s, h.ttft_s, h.reference_prompt_tokens) == (12.61, 0.54, 2042)
    assert h.decode_pct_of_ceiling == pytest.approx(73.3, abs=0.05)  # seed 001: 12.6 is 73% of 17.2
    assert (h.peak_output_tok_s, h.peak_concurrency, h.knee_concurrency) == (150.2, 20, 16)
    assert (h.points, h.requests, h.error_requests) == (6, 6 + 1 + 16 + 20 + 24, 2)


def test_headline_of_a_run_without_points_is_empty_not_an_error() -> None:
    h = headline(rec([], ceiling=None, status="failed"))
    assert h.decode_tok_s is None and h.peak_output_tok_s is None and h.decode_pct_of_ceiling is None
    assert run_metrics(rec([pl(2048, 12.6)], status="failed")) == []


def test_run_metrics_names_and_directions() -> None:
    r = rec([pl(2048, 12.6, 0.54), pl(2048, 99.0, 9.9), cc(16, 141.5)])  # a duplicate prompt length: first counts
    got = {m.metric.name: (m.value, m.metric.direction.value) for m in run_metrics(r)}
    assert got == {
        "decode_tok_s@prompt=2048": (12.6, "higher_is_better"),
        "ttft_s@prompt=2048": (0.54, "lower_is_better"),
        "output_tok_s@concurrency=16": (141.5, "higher_is_better"),
        "peak_output_tok_s": (141.5, "higher_is_better"),
        ERROR_REQUESTS.name: (0.0, "lower_is_better"),
    }


def test_pct_of_ceiling() -> None:
    assert pct_of_ceiling(12.6, 17.2) == pytest.approx(73.26, abs=0.01)
    assert pct_of_ceiling(12.6, None) is None and pct_of_ceiling(None, 17.2) is None and pct_of_ceiling(1.0, 0.0) is None


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [(12.61, "tok/s", "12.6 tok/s"), (0.54, "s", "0.54 s"), (0.1234, "s", "0.123 s"), (490.3, "tok/s", "490.3 tok/s"),
     (390070, "tokens", "390,070 tokens"), (3.0, "", "3"), (73.26, "%", "73.3%"), (4975.0, "tok/s", "4,975 tok/s"),
     (None, "s", "—"), (float("nan"), "s", "—")],
)
def test_fmt_value(value: float | None, unit: str, text: str) -> None:
    assert fmt_value(value, unit) == text


def test_fmt_change() -> None:
    assert fmt_change(-12.698) == "−12.7%" and fmt_change(4.1) == "+4.1%" and fmt_change(None) == "n/a"
