"""The report's History section: the latest runs of this model and host, their headline numbers,
and the charts of each across runs."""

from __future__ import annotations

import re
from pathlib import Path

from roost import catalogue as C
from roost.headline import headline
from roost.notify.slack import prefect_run_url
from roost.records import RunMeta, RunRecord
from roost.regress import RegressConfig, RegressionReport, key_of
from roost.report.blocks import Image, Section, Table, code
from roost.report.charts import HISTORY_METRICS

SHOWN = 15
"""The latest runs the table shows."""

_HEADLINE = [C.Column(metric=metric) for metric, _ in HISTORY_METRICS.values()]
_MTP = [C.Column(metric=C.MTP_SPEEDUP), C.Column(metric=C.SPEC_ACCEPTANCE)]
_PLAIN = re.compile(r"[\w.:-]+")
"""A run id a link can show as its text as it is (roost's own: ``20261206T073102Z-1a2b3c4d``)."""


def run_link(meta: RunMeta, ui_url: str) -> str:
    """The run's flow run in the Prefect UI at ``ui_url``, when that UI's server holds it: the run recorded
    the same UI (``RunMeta.prefect_ui_url``). ``""`` otherwise: a run made through ``roost run``'s temporary
    server (gone with it), on another server, or recorded before roost kept where; never a link to a
    flow run the server does not have (the UI's "Page not found")."""
    held_by = meta.prefect_ui_url.rstrip("/")
    if not held_by or held_by != ui_url.rstrip("/"):
        return ""
    return prefect_run_url(meta, held_by)


def _run_cells(r: RunRecord, record: RunRecord, key: tuple[str, ...], cfg: RegressConfig | None,
               ui_url: str) -> list[str]:
    h = headline(r)
    run_url = run_link(r.meta, ui_url)
    return [  # the link's text plain: the Prefect UI's Markdown shows a code span in a link as raw markup
        (f"[{r.meta.run_id}]({run_url})" if run_url and _PLAIN.fullmatch(r.meta.run_id) else code(r.meta.run_id))
        + (" (this run)" if r.meta.run_id == record.meta.run_id else ""),
        r.meta.started_at.strftime("%Y-%m-%d %H:%M"),
        r.status + ("" if r.status == "completed" else f" at {r.failed_stage}"),
        "yes" if key_of(r.meta, cfg) == key else "no",
        *(column.cell(getattr(h, field)) for column, field in zip(_HEADLINE, HISTORY_METRICS, strict=True)),
    ]


def _probes_cell(r: RunRecord) -> str:
    """How many capability probes passed, which failed."""
    failed = [p.name for p in r.probes if not p.ok]
    return "—" if not r.probes else (f"{len(r.probes) - len(failed)}/{len(r.probes)}"
                                     + (f" ({', '.join(failed)} failed)" if failed else ""))


def _table(record: RunRecord, shown: list[RunRecord], comparison: RegressionReport | None, ui_url: str) -> Table:
    cfg = comparison.config if comparison is not None else None
    key = key_of(record.meta, cfg)
    rows = [_run_cells(r, record, key, cfg, ui_url) for r in shown]
    headers = ["Run", "Started (UTC)", "Status", "Comparable", *(c.header for c in _HEADLINE)]
    if any(r.mtp_ab is not None for r in shown):  # the MTP A/B's headline numbers, when any run has them
        headers += [c.header for c in _MTP]
        for row, r in zip(rows, shown, strict=True):
            h = headline(r)
            row += [_MTP[0].cell(h.mtp_speedup), _MTP[1].cell(h.spec_acceptance_rate)]
    if any(r.probes for r in shown):  # the capability probes: how many passed, which failed
        headers.append("Probes")
        for row, r in zip(rows, shown, strict=True):
            row.append(_probes_cell(r))
    return Table(headers=headers, rows=rows, align_right=list(range(4, len(headers))))


def history_section(
    record: RunRecord, history: list[RunRecord], comparison: RegressionReport | None, charts: dict[str, Path],
    ui_url: str = "",
) -> Section:
    """The latest runs of this model and host; with the Prefect UI's URL (``ui_url``) each run whose flow
    run that UI's server holds links to it (:func:`run_link`; ``roost.notify.slack.prefect_run_url``, as the
    Slack message), its run id the link's plain text."""
    runs = [r for r in history if r.meta.run_id != record.meta.run_id] + [record]
    runs.sort(key=lambda r: r.meta.started_at)
    sec = Section(title="History", blocks=[_table(record, runs[-SHOWN:], comparison, ui_url)])
    titles = {f"history_{field}": f"{metric.title}{' at the reference prompt' if at_prompt else ''} across runs"
              for field, (metric, at_prompt) in HISTORY_METRICS.items()}
    for name, path in charts.items():
        if name.startswith("history_"):
            sec.blocks.append(Image(alt=titles.get(name, name), path=path))
    return sec
