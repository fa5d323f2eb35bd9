"""Report stage: store the run, compare it with its baseline, write the report, publish artifacts.

Order matters: the run is stored first (so a rendering problem never loses a result), then
compared with the history that was there before it, then rendered. Artifacts have stable keys per
profile and host (``roost-report-<profile>-<host>``, ``roost-headline-...``, ``roost-files-...``) so
the Prefect UI shows each one's history across runs.

This task does not raise for a problem of its own (a full disk, a chart that cannot be drawn): it
logs it, carries on with what it can still do, and lists it in ``ReportOutcome.errors``, so the
flow still notifies Slack about the run.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import BaseModel, Field

from roost.catalogue import fmt_change, fmt_value
from roost.headline import headline_rows
from roost.records import RunRecord
from roost.regress import RegressConfig, RegressionReport, compare
from roost.report import ReportFiles, write_report
from roost.report.document import build_document
from roost.report.markdown import render_markdown
from roost.store import AlreadyStored, StoredRun, append_run, load_records, report_dir

HISTORY_LIMIT = 60
"""Earlier runs of the same model and host read for the baseline and the history charts."""


class ReportOutcome(BaseModel):
    """What the report stage did; the notify stage reads ``comparison`` and ``files``."""

    stored: StoredRun | None = None
    files: ReportFiles | None = None
    comparison: RegressionReport | None = None
    artifact_keys: dict[str, str] = Field(default_factory=dict)
    artifact_markdown: str = Field(default="", description="The report as Markdown with charts named by path.")
    errors: list[str] = Field(default_factory=list)

    @property
    def markdown(self) -> Path | None:
        return self.files.markdown if self.files else None


def artifact_key(prefix: str, *parts: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and single dashes only."""
    raw = "-".join([prefix, *parts]).lower()
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", raw)).strip("-")


def headline_table(record: RunRecord, comparison: RegressionReport | None) -> list[dict[str, str]]:
    """Rows of the headline table artifact: metric, value, baseline, change, verdict."""
    rows = []
    for r in headline_rows(record):
        c = comparison.get(r.compared_as) if comparison is not None and r.compared_as else None
        rows.append(
            {
                "metric": r.label,
                "value": r.text,
                "baseline": r.metric.format(c.baseline) if c is not None and c.baseline is not None else "—",
                "change": fmt_change(c.change_pct) if c is not None and c.change_pct is not None else "—",
                "verdict": c.verdict if c is not None else "—",
            }
        )
    rows.append({"metric": "status", "value": record.status + (f" at {record.failed_stage}" if record.failed_stage else ""),
                 "baseline": "—", "change": "—", "verdict": comparison.status if comparison else "—"})
    return rows


def publish_artifacts(record: RunRecord, outcome: ReportOutcome) -> dict[str, str]:
    """The markdown, table and link artifacts of the run; returns {kind: key}."""
    meta = record.meta
    keys = {
        "markdown": artifact_key("roost-report", meta.profile, meta.host),
        "table": artifact_key("roost-headline", meta.profile, meta.host),
        "link": artifact_key("roost-files", meta.profile, meta.host),
    }
    files = outcome.files
    what = f"{meta.profile} on {meta.host}, run {meta.run_id} ({record.status})"
    if outcome.artifact_markdown:
        markdown = outcome.artifact_markdown
    else:
        markdown = f"# roost report: {what}\n\nThe report files could not be written: {'; '.join(outcome.errors)}\n"
    create_markdown_artifact(markdown=markdown, key=keys["markdown"], description=f"roost report: {what}")
    create_table_artifact(table=headline_table(record, outcome.comparison), key=keys["table"],
                          description=f"Headline numbers: {what}")
    if files is not None:
        create_link_artifact(
            link=files.html.resolve().as_uri(),
            link_text=f"HTML report ({meta.run_id})",
            key=keys["link"],
            description=f"Report files in {files.directory}: report.html (self-contained), report.md, charts/*.png",
        )
    return keys


def build_report(
    record: RunRecord,
    results_root: Path | None = None,
    regress_config: RegressConfig | None = None,
    logger: Any = None,
) -> ReportOutcome:
    """Store, compare and render (no Prefect API needed). Problems are logged and listed, not raised."""
    log = logger or logging.getLogger("roost.report")
    outcome = ReportOutcome()
    meta = record.meta
    out_dir = report_dir(meta, results_root)
    record = record.model_copy(update={"report_path": str(out_dir / "report.md")})

    history: list[RunRecord] = []
    try:
        history = load_records(results_root, model=meta.repo_id, host=meta.host, limit=HISTORY_LIMIT)
    except Exception as exc:  # an unreadable store must not stop this run being stored
        log.error("could not read earlier runs: %s", exc)
        outcome.errors.append(f"history: {exc}")
    history = [r for r in history if r.meta.run_id != meta.run_id]

    try:
        outcome.stored = append_run(record, results_root)
        log.info("run %s stored in %s", meta.run_id, outcome.stored.run_path)
    except AlreadyStored as exc:
        log.warning("%s; not stored again", exc)
    except Exception as exc:
        log.error("could not store run %s: %s", meta.run_id, exc)
        outcome.errors.append(f"store: {exc}")

    try:
        outcome.comparison = compare(record, history, regress_config)
        log.info("baseline: %s", outcome.comparison.message)
        for c in outcome.comparison.regressions:
            log.warning("regressed: %s %s -> %s", c.metric.label, fmt_value(c.baseline, c.metric.unit),
                        fmt_value(c.current, c.metric.unit))
    except Exception as exc:
        log.error("could not compare with the baseline: %s", exc)
        outcome.errors.append(f"compare: {exc}")

    try:
        outcome.files = write_report(record, history, outcome.comparison, out_dir)
        log.info("report written: %s", outcome.files.markdown)
        doc = build_document(record, history, outcome.comparison, outcome.files.charts)
        outcome.artifact_markdown = render_markdown(doc, out_dir, images="path")
    except Exception as exc:
        log.exception("could not write the report")
        outcome.errors.append(f"report: {exc}")
    return outcome


@task(name="report", cache_policy=NO_CACHE, persist_result=False)
def report_task(
    record: RunRecord,
    results_root: Path | None = None,
    regress_config: RegressConfig | None = None,
) -> ReportOutcome:
    """Store the run, compare it with its baseline, write report files and publish artifacts."""
    logger = get_run_logger()
    outcome = build_report(record, results_root, regress_config, logger=logger)
    stored_record = record.model_copy(update={"report_path": str(outcome.markdown or "")})
    try:
        outcome.artifact_keys = publish_artifacts(stored_record, outcome)
    except Exception as exc:
        logger.error("could not publish the report artifacts: %s", exc)
        outcome.errors.append(f"artifacts: {exc}")
    return outcome
