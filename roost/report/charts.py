# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's charts as PNG files (matplotlib's Agg canvas: headless, no pyplot global state).

Each function draws one chart from a RunRecord and returns the path it wrote, or ``None`` when the
run has no data for that chart (a failed run, a sweep that was skipped).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from roost import catalogue as C
from roost.bench.knee import knee_of
from roost.catalogue import KNEE_FRACTION
from roost.headline import concurrency_points, headline, max_num_seqs, prompt_points
from roost.records import Distribution, RunRecord
from roost.regress import RegressionReport, key_of
from roost.store.atomic import atomic_write_bytes

# matplotlib is imported where a chart is drawn, not here: it costs 1.5-2 s of a cold process, which
# every flow's start (a deployment run's Pending -> Running, measured by benchmarks/bench_orchestration.py),
# the audit flow and the CLI would pay without drawing anything.
if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from roost.sweep.compare import SweepComparison

BLUE = "#2D6FB7"
ORANGE = "#E07B24"
RED = "#C0392B"
GREEN = "#3F8F3A"
GREY = "#8E8E93"
OFF_SCALE = 3.0
"""A ceiling more than this many times the fastest point is written as text, not drawn to scale."""


def _figure(width: float = 8.0, height: float = 4.6) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    return atomic_write_bytes(path, buf.getvalue(), overwrite=True)


def _tokens_label(x: float, _pos: object = None) -> str:
    """``511``, ``2.04k``, ``131k``: three significant digits at most."""
    if x >= 1000:
        return f"{x / 1000:.3g}k"
    return f"{x:g}"


def _prompt_axis(ax: object, xs: list[int]) -> None:
    from matplotlib.axes import Axes
    from matplotlib.ticker import FuncFormatter, NullFormatter

    assert isinstance(ax, Axes)
    if len(xs) > 1 and max(xs) / max(min(xs), 1) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens_label))
    ax.set_xlabel("prompt length (tokens)")
    ax.grid(True, alpha=0.3)


def _error_bars(ys: list[float], dists: list[Distribution]) -> tuple[list[float], list[float]]:
    """Min-max error bars around each median (never negative: a median outside its own min-max, as
    rows edited by hand or rounded apart can have, draws no bar on that side instead of failing)."""
    lo = [max(0.0, y - float(d.min if d.min is not None else y)) for y, d in zip(ys, dists, strict=True)]
    hi = [max(0.0, float(d.max if d.max is not None else y) - y) for y, d in zip(ys, dists, strict=True)]
    return lo, hi


def decode_vs_prompt(record: RunRecord, path: Path) -> Path | None:
    """Single-stream decode tok/s (median, min-max bars) against prompt length, with the ceiling."""
    pts = [p for p in prompt_points(record) if p.decode_tok_s.median is not None]
    if not pts:
        return None
    xs = [p.prompt_tokens for p in pts]
    ys = [float(p.decode_tok_s.median or 0.0) for p in pts]
    lo, hi = _error_bars(ys, [p.decode_tok_s for p in pts])
    fig = _figure()
    ax = fig.add_subplot()
    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", color=BLUE, capsize=4, lw=2, ms=7, label=C.DECODE_MEDIAN.legend("min–max"))
    ceiling = record.decode_ceiling_tok_s
    top = max(ys + [y + h for y, h in zip(ys, hi, strict=True)])
    if ceiling is not None and ceiling <= OFF_SCALE * top:
        ax.axhline(ceiling, color=RED, ls="--", lw=1.8, label=f"{C.DECODE_CEILING.label} {C.DECODE_CEILING.format(ceiling)}")
        top = max(top, ceiling)
    elif ceiling is not None:
        ax.text(
            0.99, 0.97, f"{C.DECODE_CEILING.label} {C.DECODE_CEILING.format(ceiling)} (off scale ↑)",
            transform=ax.transAxes, ha="right", va="top", color=RED, fontsize=10,
        )
    for x, y in zip(xs, ys, strict=True):
        label = C.DECODE_MEDIAN.cell(y)
        if ceiling:
            label += f"\n{C.PCT_OF_CEILING.cell(100 * y / ceiling)}"
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=9)
    ax.set_ylim(0, top * 1.22)
    _prompt_axis(ax, xs)
    ax.set_ylabel(f"{C.DECODE.label} (single stream)")
    ax.set_title(f"Decode rate vs prompt length — {record.meta.profile} on {record.meta.host}")
    ax.legend(loc="lower left")
    return _save(fig, path)


def ttft_vs_prompt(record: RunRecord, path: Path) -> Path | None:
    """Time to first token (median, p90) against prompt length on a log axis."""
    pts = [p for p in prompt_points(record) if p.ttft_s.median is not None and (p.ttft_s.median or 0) > 0]
    if not pts:
        return None
    xs = [p.prompt_tokens for p in pts]
    ys = [float(p.ttft_s.median or 0.0) for p in pts]
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(xs, ys, "o-", color=ORANGE, lw=2, ms=7, label=C.TTFT_MEDIAN.legend())
    p90 = [(p.prompt_tokens, p.ttft_s.p90) for p in pts if p.ttft_s.p90 is not None and p.ttft_s.p90 > 0]
    if p90:
        ax.plot([x for x, _ in p90], [float(y or 0) for _, y in p90], "s:", color=GREY, ms=5, label=C.TTFT_P90.legend())
    for x, y in zip(xs, ys, strict=True):
        ax.annotate(C.TTFT.format(y), (x, y), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=9)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    lo, hi = min(ys), max(ys + [float(y or 0) for _, y in p90])
    ax.set_ylim(lo / 2, hi * 2.5)
    _prompt_axis(ax, xs)
    ax.set_ylabel(f"{C.TTFT.label} ({C.TTFT.unit}, log scale)")
    ax.set_title(f"TTFT vs prompt length — {record.meta.profile} on {record.meta.host}")
    ax.legend(loc="upper left")
    return _save(fig, path)


def _label_points(ax: Axes, xs: Sequence[float], ys: Sequence[float], dy: int, column: C.Column) -> None:
    """Each point's value printed ``dy`` points above it, as the column's table prints it."""
    for x, y in zip(xs, ys, strict=True):
        ax.annotate(column.cell(y), (x, y), textcoords="offset points", xytext=(0, dy), ha="center", fontsize=9)


def prefill_vs_prompt(record: RunRecord, path: Path) -> Path | None:
    """Prefill tok/s (prompt tokens / TTFT; median, min-max bars) against prompt length."""
    fig = prefill_figure(record)
    return None if fig is None else _save(fig, path)


def prefill_figure(record: RunRecord) -> Figure | None:
    """The figure of :func:`prefill_vs_prompt`; None without a prefill rate."""
    pts = [p for p in prompt_points(record) if p.prefill_tok_s.median is not None]
    if not pts:
        return None
    xs = [p.prompt_tokens for p in pts]
    ys = [float(p.prefill_tok_s.median or 0.0) for p in pts]
    lo, hi = _error_bars(ys, [p.prefill_tok_s for p in pts])
    fig = _figure()
    ax = fig.add_subplot()
    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", color=GREEN, capsize=4, lw=2, ms=7,
                label=C.PREFILL_MEDIAN.legend("min–max"))
    _label_points(ax, xs, ys, 9, C.PREFILL_MEDIAN)
    peak = max(range(len(ys)), key=lambda i: ys[i])
    ax.plot([xs[peak]], [ys[peak]], marker="D", color=RED, ms=8, ls="none",
            label=f"fastest: {C.PREFILL.format(ys[peak])} at a {xs[peak]:,}-token prompt")
    ax.set_ylim(0, max(y + h for y, h in zip(ys, hi, strict=True)) * 1.22 or 1)
    _prompt_axis(ax, xs)
    ax.set_ylabel(f"{C.PREFILL.label} (prompt tokens / TTFT)")
    ax.set_title(f"Prefill rate vs prompt length — {record.meta.profile} on {record.meta.host}")
    ax.legend(loc="lower left")
    return fig


def throughput_vs_concurrency(record: RunRecord, path: Path) -> Path | None:
    """Aggregate output tok/s against concurrency: the peak, the knee, the levels whose requests
    queued (``BenchPoint.queued``: vLLM's queue time, or its waiting gauge above 0) and the server's
    ``--max-num-seqs`` cap when known."""
    fig = throughput_figure(record)
    return None if fig is None else _save(fig, path)


def throughput_figure(record: RunRecord) -> Figure | None:
    """The figure of :func:`throughput_vs_concurrency`; None without a concurrency point."""
    pts = [p for p in concurrency_points(record) if p.output_tok_s.median is not None]
    if not pts:
        return None
    xs = [p.concurrency for p in pts]
    ys = [float(p.output_tok_s.median or 0.0) for p in pts]
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(xs, ys, "o-", color=BLUE, lw=2, ms=7, label=C.OUTPUT_THROUGHPUT.label)
    _label_points(ax, xs, ys, 10, C.OUTPUT_MEDIAN)
    knee = knee_of(pts)
    if knee is not None:
        ax.axhline(KNEE_FRACTION * knee.peak_output_tok_s, color=GREY, ls=":", lw=1,
                   label=f"{KNEE_FRACTION:.0%} of peak ({C.OUTPUT_THROUGHPUT.format(KNEE_FRACTION * knee.peak_output_tok_s)})")
        ax.axvline(knee.concurrency, color=GREEN, ls="--", lw=1.5)
        ax.plot([knee.concurrency], [knee.output_tok_s], marker="*", color=GREEN, ms=18, ls="none",
                label=f"knee: {knee.concurrency} concurrent")
        ax.text(knee.concurrency, 0.03 * max(ys) * 1.2, f"knee @ {knee.concurrency} ", color=GREEN, fontsize=10,
                fontweight="bold", ha="right", va="bottom")
    if knee is not None and knee.peak_concurrency != knee.concurrency:
        ax.plot([knee.peak_concurrency], [knee.peak_output_tok_s], marker="D", color=RED, ms=8, ls="none",
                label=f"peak: {C.PEAK_OUTPUT.format(knee.peak_output_tok_s)} @ {knee.peak_concurrency}")
    waited = [(x, y, p) for p, x, y in zip(pts, xs, ys, strict=True) if p.queued(C.QUEUED_S)]
    if waited:
        ax.plot([x for x, _, _ in waited], [y for _, y, _ in waited], marker="o", ms=15, mfc="none", mec=ORANGE,
                mew=2.2, ls="none", label="requests queued for a running slot")
        for x, y, p in waited:
            text = (f"queued {C.QUEUE_TIME.format(p.queue_time_s)}" if p.queue_time_s is not None
                    else f"{C.Column(metric=C.PEAK_WAITING).cell(p.peak_waiting)} waiting")
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(0, -18), ha="center", fontsize=8,
                        color=ORANGE)
    cap = max_num_seqs(record)
    if cap is not None:
        ax.axvline(cap, color=RED, ls="-.", lw=1.4, label=f"server cap: --max-num-seqs {cap}")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if len(xs) > 1 and max(xs) / max(min(xs), 1) >= 16:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.set_ylim(0, max(ys) * 1.2)
    ax.set_xlim(0 if min(xs) <= 1 and ax.get_xscale() == "linear" else None)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel(C.OUTPUT_THROUGHPUT.label)
    ax.set_title(f"Throughput vs concurrency — {record.meta.profile} on {record.meta.host}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    return fig


def timeline(record: RunRecord, path: Path) -> Path | None:
    """The pipeline's stages as consecutive bars, with vLLM's start broken into load/compile/ready."""
    s = record.serve
    serve_parts = [(n, v) for n, v in (("load", s.load_s), ("compile", s.compile_s), ("ready", s.ready_s)) if v]
    if not record.stages and not serve_parts:
        return None
    fig = _figure(8.0, 1.2 + 0.45 * (len(record.stages) + (1 if serve_parts else 0)))
    ax = fig.add_subplot()
    labels: list[str] = []
    t = 0.0
    serve_start = 0.0
    colors = {"completed": BLUE, "failed": RED, "skipped": "#C7C7CC"}
    for i, st in enumerate(record.stages):
        color = GREY if st.cached else colors.get(st.status, BLUE)
        ax.barh(i, max(st.seconds, 0.0), left=t, color=color, height=0.6)
        note = " (cached)" if st.cached else (" FAILED" if st.status == "failed" else "")
        ax.text(t + st.seconds, i, f" {st.seconds:,.1f} s{note}", va="center", fontsize=9)
        if st.stage.startswith("serve"):
            serve_start = t
        labels.append(st.stage)
        t += st.seconds
    if serve_parts:
        row = len(record.stages)
        left = serve_start
        shades = {"load": "#5794F2", "compile": "#FF9830", "ready": "#73BF69"}
        for name, secs in serve_parts:
            ax.barh(row, float(secs or 0.0), left=left, color=shades[name], height=0.6, label=f"vLLM {name}")
            left += float(secs or 0.0)
        ax.text(left, row, f" {left - serve_start:,.1f} s", va="center", fontsize=9)
        labels.append("vLLM start")
        ax.legend(loc="upper right", fontsize=8, ncols=3)
        t = max(t, left)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(t, 1e-3) * 1.18)
    ax.set_xlabel("seconds since the run started")
    ax.set_title(f"Cold-load timeline — {record.meta.profile} on {record.meta.host}")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, path)


HISTORY_METRICS: dict[str, tuple[C.Metric, bool]] = {
    "decode_tok_s": (C.DECODE, True),
    "ttft_s": (C.TTFT, True),
    "peak_output_tok_s": (C.PEAK_OUTPUT, False),
    "start_to_healthy_s": (C.START_TO_HEALTHY, False),
}
"""Headline field -> (its metric, whether it is taken at the reference prompt)."""


def history(
    field: str,
    record: RunRecord,
    runs: list[RunRecord],
    comparison: RegressionReport | None,
    path: Path,
) -> Path | None:
    """One headline number across the runs of this model and host; comparable runs in colour."""
    base, at_prompt = HISTORY_METRICS[field]
    unit = base.unit
    all_runs = sorted({r.meta.run_id: r for r in [*runs, record]}.values(), key=lambda r: r.meta.started_at)
    all_runs = all_runs[-30:]
    cfg = comparison.config if comparison is not None else None
    key = key_of(record.meta, cfg)
    points = []
    for i, r in enumerate(all_runs):
        value = getattr(headline(r), field)
        if value is not None:
            points.append((i, float(value), r))
    failed = [i for i, r in enumerate(all_runs) if r.status != "completed"]
    if not points:
        return None
    fig = _figure(8.0, 3.8)
    ax = fig.add_subplot()
    if failed:
        ax.plot(failed, [0.0] * len(failed), "X", color=RED, ms=11, ls="none", clip_on=False, label="failed run")
    same = [(i, v) for i, v, r in points if key_of(r.meta, cfg) == key]
    other = [(i, v) for i, v, r in points if key_of(r.meta, cfg) != key]
    if same:
        ax.plot([i for i, _ in same], [v for _, v in same], "o-", color=BLUE, lw=1.8, ms=6, label="comparable runs")
    if other:
        ax.plot([i for i, _ in other], [v for _, v in other], "o", mfc="none", color=GREY, ms=6, label="other configurations")
    refs = [headline(r).reference_prompt_tokens for r in reversed(all_runs)]
    ref = next((x for x in refs if x), 0)  # this run's, or the latest run's that had one
    metric = base.at_prompt(ref) if at_prompt and ref else base
    title = metric.label
    cmp = comparison.get(metric.name) if comparison else None
    if cmp is not None and cmp.baseline is not None and cmp.threshold is not None:
        ax.axhline(cmp.baseline, color=GREEN, ls="--", lw=1.2, label=f"baseline {base.format(cmp.baseline)}")
        ax.axhspan(cmp.baseline - cmp.threshold, cmp.baseline + cmp.threshold, color=GREEN, alpha=0.08,
                   label="within threshold")
    cur = next(((i, v) for i, v, r in points if r.meta.run_id == record.meta.run_id), None)
    if cur is not None:
        verdict = cmp.verdict if cmp is not None else "new"
        color = {"regressed": RED, "improved": GREEN}.get(verdict, BLUE)
        ax.plot([cur[0]], [cur[1]], marker="o", ms=12, mfc="none", mec=color, mew=2.2, ls="none",
                label=f"this run ({verdict if verdict != 'new' else 'baseline established' if comparison and comparison.first_run else 'new'})")
        ax.annotate(base.format(cur[1]), cur, textcoords="offset points", xytext=(0, 12), ha="center", fontsize=9,
                    color=color)
    ticks = sorted({i for i, _, _ in points} | set(failed))
    ax.set_xticks(ticks, [all_runs[i].meta.started_at.strftime("%m-%d\n%H:%M") for i in ticks], fontsize=8)
    if len(ticks) > 12:
        for lbl in ax.get_xticklabels()[::2]:
            lbl.set_visible(False)
    values = [v for _, v, _ in points]
    top = max(values + ([cmp.baseline + cmp.threshold] if cmp and cmp.baseline is not None and cmp.threshold else []))
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.set_xlim(min(ticks) - 0.6, max(ticks) + 0.6)
    ax.set_ylabel(unit)
    ax.set_title(f"{title} across runs — {record.meta.profile} on {record.meta.host}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    return _save(fig, path)


def accuracy(record: RunRecord, index: int, path: Path) -> Path | None:
    """One evaluation's accuracy per category as grouped bars: this run, the baseline run it was paired
    with, and the other models the profile compares with; the whole sample first, with each series'
    95 % Wilson interval. None when the evaluation has no score."""
    from roost.eval.suites import TASKS

    e = record.evals[index]
    if e.summary.accuracy is None:
        return None
    series: list[tuple[str, float | None, float | None, float | None, dict[str, float | None]]] = [
        ("this run", e.summary.accuracy, e.summary.ci_low, e.summary.ci_high,
         {k: v.accuracy for k, v in e.summary.per_category.items()})]
    if e.baseline is not None:
        series.append((f"baseline ({e.baseline.run_id[:15]})", e.baseline.accuracy, e.baseline.ci_low,
                       e.baseline.ci_high, {k: v.accuracy for k, v in e.baseline.per_category.items()}))
    for o in e.others:
        series.append((o.repo_id, o.accuracy, o.ci_low, o.ci_high, {k: v.accuracy for k, v in o.per_category.items()}))
    groups = ["all", *sorted(e.summary.per_category)]
    fig = _figure(8.0, max(2.6, 0.42 * len(groups) * max(1, len(series)) + 1.2))
    ax = fig.add_subplot()
    height = 0.8 / len(series)
    colours = [BLUE, GREY, ORANGE, GREEN, RED]
    for i, (label, acc, low, high, cats) in enumerate(series):
        ys = [g + i * height for g in range(len(groups))]
        got = [acc if g == "all" else cats.get(g) for g in groups]
        vals = [100 * v if v is not None else 0.0 for v in got]
        ax.barh(ys, vals, height=height * 0.9, color=colours[i % len(colours)], label=label)
        if acc is not None and low is not None and high is not None:
            ax.errorbar([100 * acc], [ys[0]], xerr=[[100 * (acc - low)], [100 * (high - acc)]], fmt="none",
                        ecolor="black", capsize=4, lw=1.2)
        ax.text(vals[0] + 1, ys[0], C.ACCURACY.format(vals[0]), va="center", fontsize=8)
    ax.set_yticks([g + 0.4 - height / 2 for g in range(len(groups))])
    ax.set_yticklabels(groups)
    ax.invert_yaxis()
    ax.set_xlim(0, 105)
    ax.set_xlabel(f"{C.ACCURACY.label} ({C.ACCURACY.unit}); the whole sample with its {C.ACCURACY_CI.label} (Wilson)")
    title = TASKS[e.task].title if e.task in TASKS else e.task
    ax.set_title(f"{title} accuracy — {record.meta.profile} on {record.meta.host} ({e.summary.n:,} questions)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def sweep_throughput(comparison: SweepComparison, path: Path) -> Path | None:
    """A sweep's variants side by side: aggregate output tok/s at each concurrency, one line per
    measured variant (the best one drawn heavier); None when no variant has a concurrency point."""
    rows = [r for r in comparison.rows if r.output_tok_s]
    if not rows:
        return None
    fig = _figure(8.0, 4.8)
    ax = fig.add_subplot()
    palette = [BLUE, ORANGE, GREEN, RED, GREY, "#7E57C2", "#00897B", "#6D4C41"]
    best = comparison.best.variant if comparison.best is not None else None
    for i, r in enumerate(rows):
        xs = sorted(r.output_tok_s)
        ys = [r.output_tok_s[x] for x in xs]
        heavy = r.variant == best
        ax.plot(xs, ys, marker="o", color=palette[i % len(palette)], linewidth=2.6 if heavy else 1.4,
                label=f"{r.variant}{' (best)' if heavy and comparison.best and comparison.best.clear else ''}"
                      f"{' [earlier run]' if r.measured_earlier else ''} on {r.host}")
    ax.set_xticks(comparison.concurrencies)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel(C.OUTPUT_THROUGHPUT.label)
    ax.set_title("Sweep: aggregate output throughput per variant")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)
