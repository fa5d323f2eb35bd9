"""Each chart: drawn when the run has its data, skipped (None) when it has not."""

from __future__ import annotations

from pathlib import Path

from support.samples import dist, spark_record
from test_report_write import assert_real_png

from roost.records import BenchPoint, RunRecord
from roost.regress import compare
from roost.report import charts


def tiny_cpu_record() -> RunRecord:
    """The embedded default's shape: a tiny model on this CPU, its roofline ceiling far above what it reaches."""
    rec = spark_record()
    pts = [
        BenchPoint(kind="prompt_length", prompt_tokens=p, output_tokens=64, concurrency=1, requests=2,
                   decode_tok_s=dist(d, min=d * 0.95, max=d * 1.03), ttft_s=dist(t))
        for p, d, t in [(128, 96.0, 0.031), (512, 91.5, 0.074), (1536, 80.2, 0.21)]
    ]
    pts += [BenchPoint(kind="concurrency", prompt_tokens=512, output_tokens=64, concurrency=c, requests=c * 2,
                       output_tok_s=dist(a)) for c, a in [(1, 90.0), (2, 160.0), (4, 250.0), (8, 262.0)]]
    meta = rec.meta.model_copy(update={"profile": "local", "host": "cpu", "repo_id": "roost/tiny-random"})
    return rec.model_copy(update={"meta": meta, "points": pts, "decode_ceiling_tok_s": 2450.0})


def test_each_chart_renders_a_real_png(tmp_path: Path) -> None:
    rec = spark_record()
    for name, fn in [("decode", charts.decode_vs_prompt), ("ttft", charts.ttft_vs_prompt),
                     ("tput", charts.throughput_vs_concurrency), ("timeline", charts.timeline)]:
        out = fn(rec, tmp_path / f"{name}.png")
        assert out == tmp_path / f"{name}.png"
        assert_real_png(out)


def test_an_off_scale_ceiling_still_renders(tmp_path: Path) -> None:
    out = charts.decode_vs_prompt(tiny_cpu_record(), tmp_path / "decode.png")
    assert out is not None
    assert_real_png(out)
    out = charts.throughput_vs_concurrency(tiny_cpu_record(), tmp_path / "tput.png")
    assert out is not None
    assert_real_png(out)


def test_charts_without_data_are_skipped(tmp_path: Path) -> None:
    empty = spark_record().model_copy(update={"points": [], "stages": [], "serve": spark_record().serve.model_copy(
        update={"load_s": None, "compile_s": None, "ready_s": None})})
    assert charts.decode_vs_prompt(empty, tmp_path / "a.png") is None
    assert charts.ttft_vs_prompt(empty, tmp_path / "b.png") is None
    assert charts.throughput_vs_concurrency(empty, tmp_path / "c.png") is None
    assert charts.timeline(empty, tmp_path / "d.png") is None
    assert list(tmp_path.iterdir()) == []


def test_history_marks_this_run_against_the_baseline(tmp_path: Path) -> None:
    hist = [spark_record(run_id=f"r{i}", started_at=spark_record().meta.started_at.replace(day=1 + i)) for i in range(1, 4)]
    cur = spark_record(run_id="r9", started_at=spark_record().meta.started_at.replace(day=9), scale=0.8)
    out = charts.history("decode_tok_s", cur, hist, compare(cur, hist), tmp_path / "h.png")
    assert out is not None
    assert_real_png(out)
    # a run with no history at all: one point, still a chart
    assert charts.history("peak_output_tok_s", cur, [], None, tmp_path / "one.png") is not None
