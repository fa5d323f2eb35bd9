# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The three charts of two models side by side (``roost.report.compare``), as the Ornith 1.5 recipe
publishes them: aggregate throughput per concurrency; GSM8K and MATH-500 accuracy with the truncation rate
and the output tokens per answer; MMLU-Pro accuracy per category with the unparsed rate. Every value has
its interval bar (min-max over repeats, or the 95 % Wilson interval). Each function returns the path it
wrote, or None when neither model has the data. Drawn like ``roost.report.charts`` (Agg, no pyplot).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from roost import catalogue as C
from roost.report.charts import BLUE, ORANGE, _figure, _save
from roost.report.compare import Estimate, ModelComparison, TaskScore

if TYPE_CHECKING:
    from matplotlib.axes import Axes

CHART_NAMES = ("compare_throughput", "compare_reasoning", "compare_knowledge")
"""The charts' names (their files are ``<name>.png``), in the order the report shows them."""

COLOURS = (BLUE, ORANGE)
"""Model a, model b."""


def _bars(est: Estimate | None, scale: float = 100.0) -> tuple[float, float, float]:
    """(value, below, above) of an estimate for a bar and its interval (zeros when unknown)."""
    if est is None or est.value is None:
        return 0.0, 0.0, 0.0
    v = scale * est.value
    lo = v - scale * est.low if est.low is not None else 0.0
    hi = scale * est.high - v if est.high is not None else 0.0
    return v, max(0.0, lo), max(0.0, hi)


def throughput(cmp: ModelComparison, path: Path) -> Path | None:
    """Aggregate output tok/s against concurrency, one line per model, min-max bars over repeats."""
    levels = cmp.throughput.levels
    if not levels:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    top = 0.0
    for side, colour, run in (("a", COLOURS[0], cmp.a), ("b", COLOURS[1], cmp.b)):
        got = [(lv.concurrency, est) for lv in levels if (est := getattr(lv, side)) is not None and est.value is not None]
        if not got:
            continue
        xs = [c for c, _ in got]
        vals = [_bars(e, 1.0) for _, e in got]
        ax.errorbar(xs, [v for v, _, _ in vals], yerr=[[lo for _, lo, _ in vals], [hi for _, _, hi in vals]], fmt="o-",
                    color=colour, capsize=4, lw=2, ms=7, label=f"{run.name} (median, min–max over repeats)")
        below = side == "b"  # the second model's values under its points, so two close values stay apart
        for x, (v, lo, hi) in zip(xs, vals, strict=True):
            ax.annotate(C.OUTPUT_MEDIAN.cell(v), (x, v - lo if below else v + hi), textcoords="offset points",
                        xytext=(0, -12 if below else 5), ha="center", fontsize=8, color=colour)
        top = max(top, *(v + hi for v, _, hi in vals))
    xs_all = [lv.concurrency for lv in levels]
    ax.set_xticks(xs_all)
    ax.set_ylim(0, (top or 1.0) * 1.2)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel(C.OUTPUT_THROUGHPUT.label)
    ax.set_title(f"Aggregate throughput — {cmp.a.name} vs {cmp.b.name} on {cmp.a.host}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)


def _grouped(ax: Axes, groups: list[str], values: list[tuple[Estimate | None, Estimate | None]], scale: float,
             cmp: ModelComparison) -> None:
    """Vertical bars per group, one per model, each with its interval and its value on top."""
    width = 0.38
    for i, (colour, run) in enumerate(zip(COLOURS, (cmp.a, cmp.b), strict=True)):
        xs = [g + (i - 0.5) * width for g in range(len(groups))]
        bars = [_bars(pair[i], scale) for pair in values]
        ax.bar(xs, [v for v, _, _ in bars], width=width * 0.92, color=colour, label=run.name,
               yerr=[[lo for _, lo, _ in bars], [hi for _, _, hi in bars]], capsize=3, ecolor="black")
        for x, pair, (v, _, hi) in zip(xs, values, bars, strict=True):
            est = pair[i]
            text = "n/a" if est is None or est.value is None else (f"{v:.1f}" if scale == 100 else f"{v:,.0f}")
            ax.annotate(text, (x, v + hi), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.grid(True, axis="y", alpha=0.3)


def _tokens(score: TaskScore | None) -> Estimate | None:
    """The output tokens per answer as a bar: the mean, its bar spanning median to p90 when known."""
    if score is None or score.output_tokens_mean is None:
        return None
    low, high = score.output_tokens_median, score.output_tokens_p90
    if low is not None and high is not None:
        low, high = min(low, score.output_tokens_mean), max(high, score.output_tokens_mean)
    return Estimate(value=score.output_tokens_mean, low=low, high=high)


def reasoning(cmp: ModelComparison, path: Path) -> Path | None:
    """GSM8K and MATH-500: accuracy and truncation rate (Wilson bars), output tokens per answer (mean;
    the bar spans median to p90); None when neither model ran either."""
    tasks = [t for t in cmp.reasoning if t.a is not None or t.b is not None]
    if not tasks:
        return None
    fig = _figure(11.0, 4.4)
    axes = fig.subplots(1, 3)
    groups = [t.title for t in tasks]
    _grouped(axes[0], groups, [(t.a.accuracy if t.a else None, t.b.accuracy if t.b else None) for t in tasks], 100, cmp)
    axes[0].set_ylim(0, 112)
    axes[0].set_title(f"{C.ACCURACY.title} (%, 95% Wilson)", fontsize=10)
    _grouped(axes[1], groups, [(t.a.truncation_rate if t.a else None, t.b.truncation_rate if t.b else None)
                               for t in tasks], 100, cmp)
    axes[1].set_ylim(bottom=0)
    axes[1].set_title(f"{C.TRUNCATION_RATE.title} (%, 95% Wilson)", fontsize=10)
    _grouped(axes[2], groups, [(_tokens(t.a), _tokens(t.b)) for t in tasks], 1.0, cmp)
    axes[2].set_ylim(bottom=0)
    axes[2].set_title(f"{C.OUTPUT_TOKENS.title}\n(mean; bar: median–p90)", fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle(f"Reasoning & output length — {cmp.a.name} vs {cmp.b.name}")
    return _save(fig, path)


def knowledge(cmp: ModelComparison, path: Path) -> Path | None:
    """MMLU-Pro accuracy overall and per category (Wilson bars), each bar labelled with its unparsed rate;
    None when neither model ran it."""
    k = cmp.knowledge
    if k.overall.a is None and k.overall.b is None:
        return None
    rows: list[tuple[str, tuple[Estimate | None, Estimate | None], tuple[Estimate | None, Estimate | None]]] = [
        ("all", (k.overall.a.accuracy if k.overall.a else None, k.overall.b.accuracy if k.overall.b else None),
         (k.overall.a.unparsed_rate if k.overall.a else None, k.overall.b.unparsed_rate if k.overall.b else None))]
    rows += [(r.category, (r.a.accuracy if r.a else None, r.b.accuracy if r.b else None),
              (r.a.unparsed_rate if r.a else None, r.b.unparsed_rate if r.b else None)) for r in k.categories]
    fig = _figure(8.5, max(3.0, 0.5 * len(rows) + 1.4))
    ax = fig.add_subplot()
    height = 0.4
    for i, (colour, run) in enumerate(zip(COLOURS, (cmp.a, cmp.b), strict=True)):
        ys = [g + i * height for g in range(len(rows))]
        bars = [_bars(acc[i]) for _, acc, _ in rows]
        ax.barh(ys, [v for v, _, _ in bars], height=height * 0.9, color=colour, label=run.name,
                xerr=[[lo for _, lo, _ in bars], [hi for _, _, hi in bars]], capsize=2, ecolor="black")
        for y, (_, acc, unparsed), (v, _, hi) in zip(ys, rows, bars, strict=True):
            got = acc[i]
            if got is None or got.value is None:
                ax.text(1, y, "not evaluated", va="center", fontsize=7, color="grey")
                continue
            u = unparsed[i]
            extra = f", {C.UNPARSED_RATE.label} {C.UNPARSED_RATE.format(100 * u.value)}" if u and u.value is not None else ""
            ax.text(v + hi + 1, y, f"{v:.1f}%{extra}", va="center", fontsize=7)
    ax.set_yticks([g + height / 2 for g in range(len(rows))])
    ax.set_yticklabels([name for name, _, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 125)
    ax.set_xlabel(f"{C.ACCURACY.label} (%), 95% Wilson interval; beside each bar its {C.UNPARSED_RATE.label} rate")
    ax.set_title(f"MMLU-Pro per category — {cmp.a.name} vs {cmp.b.name}")
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8)
    return _save(fig, path)


def render(cmp: ModelComparison, charts_dir: Path) -> dict[str, Path]:
    """Every comparison chart there is data for, by name (:data:`CHART_NAMES`)."""
    made = {"compare_throughput": throughput(cmp, charts_dir / "compare_throughput.png"),
            "compare_reasoning": reasoning(cmp, charts_dir / "compare_reasoning.png"),
            "compare_knowledge": knowledge(cmp, charts_dir / "compare_knowledge.png")}
    return {k: v for k, v in made.items() if v is not None}
