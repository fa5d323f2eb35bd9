"""A sweep's comparison as Markdown: the Prefect artifact, the file beside the chart, ``roost sweep``'s output."""

from __future__ import annotations

from roost import catalogue as C
from roost.sweep.compare import SweepComparison, VariantRow

STATUS_WORDS = {"done": "measured", "measured": "measured earlier", "failed": "failed", "missing": "MISSING",
                "refused": "refused by the plan", "pending": "not started", "running": "running"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(r: VariantRow, comparison: SweepComparison) -> list[str]:
    best = comparison.best
    mark = " **(best)**" if best is not None and best.clear and r.variant == best.variant else ""
    peak = (f"{C.PEAK_OUTPUT.format(r.peak_output_tok_s)} @ {r.peak_concurrency}"
            if r.peak_output_tok_s is not None else "—")
    cells = [f"`{r.variant}`{mark}", STATUS_WORDS.get(r.status, r.status), r.host or "—", peak,
             str(r.knee_concurrency) if r.knee_concurrency is not None else "—",
             C.DECODE.format(r.decode_tok_s) if r.decode_tok_s is not None else "—",
             C.TTFT.format(r.ttft_s) if r.ttft_s is not None else "—"]
    cells += [C.OUTPUT_THROUGHPUT.format(r.output_tok_s[c]) if c in r.output_tok_s else "—"
              for c in comparison.concurrencies]
    cells.append(r.run_id or "—")
    return cells


def _heads(comparison: SweepComparison) -> list[str]:
    """The columns of the comparison's table (Markdown and the table artifact alike)."""
    return ["variant", "status", "host", "peak output", "knee", "decode", "TTFT",
            *[f"tok/s @ {c}" for c in comparison.concurrencies], "run"]


def render(comparison: SweepComparison, *, title: str, chart: str | None = None, notes: list[str] | None = None) -> str:
    """The comparison as a Markdown document; ``chart`` is an image source (a URL, a data URI or a path)."""
    heads = _heads(comparison)
    lines = [f"# {title}", "", f"**{comparison.summary}** (objective: {comparison.metric.label})", ""]
    lines += [f"- {n}" for n in notes or []]
    if notes:
        lines.append("")
    lines += ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in _row(r, comparison)) + " |" for r in comparison.rows]
    problems = [r for r in comparison.rows if r.status in ("missing", "failed", "refused")]
    if problems:
        lines += ["", "## Not measured", ""]
        lines += [f"- `{r.variant}`: {STATUS_WORDS.get(r.status, r.status)}"
                  f"{f' on {r.host}' if r.host and r.status != 'refused' else ''}: {r.reason or 'no reason given'}"
                  for r in problems]
        if comparison.missing:
            lines += ["", "Run the sweep again to measure the missing variants: the ones measured here are "
                      "skipped (same commit, arguments and image)."]
    b = comparison.best
    if b is not None and b.runner_up is not None:
        m = comparison.metric
        lines += ["", "## Best variant", "",
                  f"- {m.label}: `{b.variant}` {m.format(b.value)}, runner-up `{b.runner_up}` {m.format(b.runner_up_value)}",
                  f"- margin {m.format(b.margin)}" + (f" ({b.margin_pct:.1f}%)" if b.margin_pct is not None else "")
                  + f"; noise band {m.format(b.noise_band)} (the larger of the relative floor, k x the pooled "
                  f"within-run spread {m.format(b.noise_sd)}, and the metric's floor): "
                  + ("beyond it" if b.clear else "within it: not a clear winner")]
    if chart:
        lines += ["", f"![aggregate output throughput per variant]({chart})"]
    return "\n".join(lines) + "\n"


def table_rows(comparison: SweepComparison) -> list[dict[str, str]]:
    """The comparison as rows for a Prefect table artifact."""
    return [dict(zip(_heads(comparison), _row(r, comparison), strict=True)) for r in comparison.rows]
