"""Each chart: drawn when the run has its data, skipped (None) when it has not."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from matplotlib.image import imread
from support.samples import dist, spark_record
from test_report_write import assert_real_png

from roost import catalogue as C
from roost.headline import headline
from roost.records import BenchPoint, RunRecord
from roost.regress import compare
from roost.report import charts

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the charts save from now on (``charts._save`` still writes each one)."""
    figures: list[Figure] = []
    save = charts._save

    def keep(fig: Figure, path: Path) -> Path:
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(charts, "_save", keep)
    return figures


def _near(png: Path, fig: Figure, xy: tuple[float, float], color: str, radius: int = 14) -> int:
    """Pixels of ``color`` (within a small tolerance) in the saved PNG within ``radius`` px of data point ``xy``
    of the figure's one axes (the PNG is saved at the figure's own dpi and size, so display coordinates are
    pixel coordinates, from the bottom)."""
    from matplotlib.colors import to_rgb

    (ax,) = fig.axes
    px, py = ax.transData.transform(xy)
    img = imread(png)[..., :3]
    row, col = round(float(img.shape[0] - py)), round(float(px))
    window = img[max(row - radius, 0):row + radius + 1, max(col - radius, 0):col + radius + 1]
    return int((np.abs(window - np.array(to_rgb(color))).max(axis=-1) < 0.06).sum())


def test_history_marks_this_run_against_the_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hist = [spark_record(run_id=f"r{i}", started_at=spark_record().meta.started_at.replace(day=1 + i)) for i in range(1, 4)]
    cur = spark_record(run_id="r9", started_at=spark_record().meta.started_at.replace(day=9), scale=0.8)
    report = compare(cur, hist)
    drawn = _drawn(monkeypatch)
    out = charts.history("decode_tok_s", cur, hist, report, tmp_path / "h.png")
    assert out is not None
    assert_real_png(out)
    (fig,) = drawn
    (ax,) = fig.axes
    metric = C.DECODE.at_prompt(headline(cur).reference_prompt_tokens or 0)
    cmp = report.get(metric.name)
    assert cmp is not None and cmp.verdict == "regressed" and cmp.baseline is not None, cmp
    value = headline(cur).decode_tok_s
    assert value is not None
    # this run is the 4th of 4 (by start time) and its mark is drawn there, in the regression's colour
    (mark,) = [line for line in ax.get_lines() if str(line.get_label()).startswith("this run")]
    assert mark.get_label() == "this run (regressed)"
    assert (list(mark.get_xdata()), list(mark.get_ydata())) == ([3], [value])
    assert mark.get_markeredgecolor() == charts.RED
    assert [(a.get_text(), a.xy) for a in ax.texts] == [(C.DECODE.format(value), (3, value))]
    baseline = [line for line in ax.get_lines() if str(line.get_label()).startswith("baseline ")]
    assert [list(line.get_ydata()) for line in baseline] == [[cmp.baseline, cmp.baseline]]
    # ... and it is in the PNG: the red ring at this run's point, none at the earlier runs' points
    earlier = [(i, headline(r).decode_tok_s) for i, r in enumerate(hist)]
    assert _near(out, fig, (3, value), charts.RED) > 40
    assert [_near(out, fig, (i, v), charts.RED) for i, v in earlier if v is not None] == [0, 0, 0]
    # a run with no history at all: one point, still a chart, marked as new
    assert charts.history("peak_output_tok_s", cur, [], None, tmp_path / "one.png") is not None
    (one,) = drawn[1].axes
    (mark,) = [line for line in one.get_lines() if str(line.get_label()).startswith("this run")]
    assert (mark.get_label(), list(mark.get_xdata())) == ("this run (new)", [0])


def queued_record() -> RunRecord:
    """The 9B record with what a run of this release adds: prefill rates (the recipe's 4,430 tok/s
    peak near 8K, 2,303 by 250K: prompt / TTFT) and the server's gauges (the Ornith 1.5 recipe's
    shape: --max-num-seqs 20, so 24 users keep 4 waiting)."""
    rec = spark_record()
    pts = []
    for p in rec.points:
        if p.kind == "prompt_length":
            rate = p.prompt_tokens / (p.ttft_s.median or 1.0)
            pts.append(p.model_copy(update={"prefill_tok_s": dist(rate, min=rate * 0.97, max=rate * 1.02)}))
        else:
            c = p.concurrency
            pts.append(p.model_copy(update={"metrics_delta": {"num_requests_running_max": float(min(c, 20)),
                                                               "num_requests_waiting_max": float(max(0, c - 20))}}))
    return rec.model_copy(update={"points": pts})


def legend_texts(fig: object) -> list[str]:
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def test_prefill_vs_prompt_plots_the_prefill_rate(tmp_path: Path) -> None:
    rec = queued_record()
    texts = legend_texts(charts.prefill_figure(rec))
    assert texts == ["fastest: 4,439 tok/s at a 2,042-token prompt", "prefill tok/s (median, min–max)"]  # noqa: RUF001
    out = charts.prefill_vs_prompt(rec, tmp_path / "prefill.png")
    assert out == tmp_path / "prefill.png"
    assert_real_png(out)
    # a record from before prefill was kept has no prefill chart (and writes nothing)
    assert charts.prefill_vs_prompt(spark_record(), tmp_path / "old.png") is None
    assert not (tmp_path / "old.png").exists()


def test_throughput_marks_the_levels_that_queued_and_the_servers_cap(tmp_path: Path) -> None:
    rec = queued_record()
    texts = legend_texts(charts.throughput_figure(rec))
    assert "requests queued for a running slot" in texts
    assert "server cap: --max-num-seqs 20" in texts
    (ax,) = charts.throughput_figure(rec).axes  # type: ignore[union-attr]
    assert [a.get_text() for a in ax.texts if "waiting" in a.get_text()] == ["4 waiting"]  # only 24 users queued
    assert_real_png(charts.throughput_vs_concurrency(rec, tmp_path / "tput.png"))  # type: ignore[arg-type]


def test_a_queue_shorter_than_the_gauge_poll_is_marked_from_vllms_queue_time() -> None:
    """The local run's shape: --max-num-seqs 2, 4 users; the 2 s gauge poll never saw anyone waiting, but
    vLLM's queue-time histogram says the extra two waited about half a second each."""
    rec = queued_record()
    pts = []
    for p in rec.points:
        if p.kind == "concurrency":
            queue = 0.48 if p.concurrency == 24 else 0.00002
            p = p.model_copy(update={"metrics_delta": {"num_requests_waiting_max": 0.0, "request_queue_count": 8.0,
                                                       "request_queue_time_s_mean": queue}})
        pts.append(p)
    (ax,) = charts.throughput_figure(rec.model_copy(update={"points": pts})).axes  # type: ignore[union-attr]
    assert [a.get_text() for a in ax.texts if "queued" in a.get_text()] == ["queued 0.48 s"]
    # without gauges or a cap (an older record, a server on vLLM's default): neither is drawn
    plain = spark_record()
    plain.meta.vllm_args = ["--max-model-len", "262144"]
    texts = legend_texts(charts.throughput_figure(plain))
    assert not [t for t in texts if "queued" in t or "cap" in t]
