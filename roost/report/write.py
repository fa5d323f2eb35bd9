"""Write one run's report: charts (PNG), Markdown and self-contained HTML, into one directory."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from roost.records import RunRecord
from roost.regress import RegressionReport
from roost.report import charts as ch
from roost.report import compare_charts
from roost.report.compare import ModelComparison
from roost.report.document import build_document
from roost.report.html import render_html
from roost.report.markdown import render_markdown
from roost.store import atomic_write_text

KEY_CHART_ORDER = ("decode_vs_prompt", "throughput_vs_concurrency", "ttft_vs_prompt", "timeline")
"""The chart sent to Slack: the first of these the run produced."""

HEADLINE_CHART_COUNT = 2
"""How many charts count as the headline ones: drawn first in a report artifact without a results URL (its
budget may stop before the rest)."""


def headline_charts(charts: dict[str, Path], count: int = HEADLINE_CHART_COUNT) -> list[str]:
    """The names of the run's headline charts: the first ``count`` of ``KEY_CHART_ORDER`` it produced."""
    return [k for k in KEY_CHART_ORDER if k in charts][:count]


class ReportFiles(BaseModel):
    """What ``write_report`` wrote."""

    directory: Path
    markdown: Path
    html: Path
    charts: dict[str, Path] = Field(default_factory=dict)
    key_chart: Path | None = None


def render_charts(
    record: RunRecord, history: list[RunRecord], comparison: RegressionReport | None, charts_dir: Path,
    models: ModelComparison | None = None,
) -> dict[str, Path]:
    """Every chart the run has data for, by name (with ``models``, the comparison's: ``compare_charts``)."""
    made: dict[str, Path | None] = {
        "decode_vs_prompt": ch.decode_vs_prompt(record, charts_dir / "decode_vs_prompt.png"),
        "ttft_vs_prompt": ch.ttft_vs_prompt(record, charts_dir / "ttft_vs_prompt.png"),
        "prefill_vs_prompt": ch.prefill_vs_prompt(record, charts_dir / "prefill_vs_prompt.png"),
        "throughput_vs_concurrency": ch.throughput_vs_concurrency(record, charts_dir / "throughput_vs_concurrency.png"),
        "timeline": ch.timeline(record, charts_dir / "timeline.png"),
    }
    for i, e in enumerate(record.evals):
        made[f"accuracy_{e.task}"] = ch.accuracy(record, i, charts_dir / f"accuracy_{e.task}.png")
    for field in ch.HISTORY_METRICS:
        made[f"history_{field}"] = ch.history(field, record, history, comparison, charts_dir / f"history_{field}.png")
    made |= compare_charts.render(models, charts_dir) if models is not None else {}
    return {k: v for k, v in made.items() if v is not None}


def write_report(
    record: RunRecord,
    history: list[RunRecord],
    comparison: RegressionReport | None,
    out_dir: Path,
    ui_url: str = "",
    models: ModelComparison | None = None,
) -> ReportFiles:
    """Render the report of ``record`` (with ``history``: earlier runs of the same model and host;
    ``ui_url``: the Prefect UI, so history rows link to their flow runs; ``models``: the comparison with the
    model it replaced)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    charts = render_charts(record, history, comparison, out_dir / "charts", models)
    doc = build_document(record, history, comparison, charts, ui_url=ui_url, models=models)
    md = atomic_write_text(out_dir / "report.md", render_markdown(doc, out_dir), overwrite=True)
    page = atomic_write_text(out_dir / "report.html", render_html(doc), overwrite=True)
    key = next((charts[k] for k in KEY_CHART_ORDER if k in charts), None)
    return ReportFiles(directory=out_dir, markdown=md, html=page, charts=charts, key_chart=key)
