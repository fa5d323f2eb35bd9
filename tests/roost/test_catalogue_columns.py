# ruff: noqa: RUF001  (the reports print typographic dashes)
"""Table columns from the catalogue: one metric and statistic give the header, the unit and the number
every table prints (the report's points tables, the history, the benchmark's table artifact)."""

from __future__ import annotations

import pytest
from support.samples import dist

from roost import catalogue as C
from roost.records import BenchPoint


@pytest.mark.parametrize(("column", "header"), [
    (C.Column(metric=C.DECODE, statistic="median"), "Decode tok/s (median)"),  # the label names the unit
    (C.Column(metric=C.TTFT, statistic="p90"), "TTFT s (p90)"),
    (C.Column(metric=C.ITL, statistic="median", unit="ms"), "ITL ms (median)"),  # printed in another unit
    (C.Column(metric=C.OUTPUT_THROUGHPUT, statistic="median"), "Aggregate output tok/s"),  # per step: the value
    (C.Column(metric=C.REQUEST_RATE, statistic="median"), "Requests/s"),
    (C.Column(metric=C.QUEUE_TIME), "Mean queue time (s)"),  # one number: the unit in brackets
    (C.Column(metric=C.PEAK_RUNNING), "Peak running"),  # a count
    (C.Column(metric=C.MTP_SPEEDUP), "MTP speed-up"),  # a unit printed against the number
    (C.DECODE_PER_REQUEST, "Per-request decode tok/s"),  # the table's context names it
])
def test_a_header_is_the_title_the_unit_where_not_named_and_the_statistic(column: C.Column, header: str) -> None:
    assert column.header == header


def test_cells_print_the_number_without_the_unit_the_header_names() -> None:
    assert C.DECODE_MEDIAN.cell(50.0) == "50" and C.DECODE_MEDIAN.cell(12.61) == "12.6"
    assert C.TTFT_MEDIAN.cell(None) == "—" and C.TTFT_MEDIAN.cell(float("nan")) == "—"
    assert [C.ITL_MEDIAN.cell(s) for s in (0.0037, 0.00042, 0.1504)] == ["3.7", "0.42", "150"]
    assert C.Column(metric=C.SPEC_ACCEPTANCE).cell(78.0) == "78.0%" and C.Column(metric=C.MTP_SPEEDUP).cell(1.41) == "1.41x"
    assert [C.PCT_OF_CEILING.cell(v) for v in (73.3, 7.46)] == ["73%", "7.5%"]
    assert C.PREFILL_MEDIAN.legend("min–max") == "prefill tok/s (median, min–max)"


def test_a_unit_the_metric_cannot_be_printed_in_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be printed in"):
        C.Column(metric=C.DECODE, unit="ms")


def test_a_column_reads_its_statistic_or_gauge_from_a_point() -> None:
    p = BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=24, requests=48,
                   ttft_s=dist(1.84, p99=3.22), output_tok_s=dist(131.0),
                   metrics_delta={"num_requests_waiting_max": 4.0, "request_queue_time_s_mean": 0.48})
    assert C.TTFT_P99.cell_of(p) == "3.22" and C.OUTPUT_MEDIAN.cell_of(p) == "131"
    waiting, queue = (C.Column(metric=m) for m in (C.PEAK_WAITING, C.QUEUE_TIME))
    assert (waiting.cell_of(p), queue.cell_of(p), C.SERVER_COLUMNS[0].cell_of(p)) == ("4", "0.48", "—")


def test_the_benchmark_table_artifact_heads_its_columns_as_the_report_does() -> None:
    from tasks.benchmark import point_table

    p = BenchPoint(kind="prompt_length", prompt_tokens=2042, output_tokens=256, concurrency=1, requests=3,
                   decode_tok_s=dist(12.6, min=12.4, max=12.7), ttft_s=dist(0.46))
    [row] = point_table([p])
    assert list(row)[5:] == [c.header for c in C.POINT_COLUMNS] + ["skipped"]
    assert (row["TTFT s (median)"], row["Decode tok/s (min)"], row["Aggregate output tok/s"]) == ("0.46", "12.4", "—")
