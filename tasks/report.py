"""Report stage: store the run, compare it with its baseline, write the report, publish artifacts.

Order matters: the run is stored first (so a rendering problem never loses a result), then
compared with the history that was there before it, then rendered. Artifacts have stable keys per
profile and host (``roost-report-<profile>-<host>``, ``roost-headline-...``, ``roost-files-...``) so
the Prefect UI shows each one's history across runs.

This task does not raise for a problem of its own (a full disk, a chart that cannot be drawn): it
logs it, carries on with what it can still do, and lists it in ``ReportOutcome.errors``, so the
flow still notifies Slack about the run.

The artifacts are published by the flow (``flows.stages.report_stage`` calls ``publish_artifacts``)
so that they belong to the flow run. A browser reaches the report files only through a results URL
(``roost.report.publish``): with one, the Markdown artifact shows every chart from the served files
and a link and an image artifact point at them; without one, it shows every chart as a small inline PNG
and ends with how to serve the full report (a ``file://`` link would not open in the Prefect UI). The
artifact is rendered for the pane it lives in (``images="pane"``: tables fitted, ``roost.report.pane``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import (
    create_image_artifact,
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from prefect.settings import PREFECT_UI_URL

from roost.catalogue import fmt_change, fmt_value
from roost.errors import UserError
from roost.headline import headline_rows
from roost.naming import artifact_key
from roost.profiles import PROFILES
from roost.records import RunRecord
from roost.regress import MetricComparison, RegressConfig, RegressionReport, compare
from roost.report import ReportFiles, write_report
from roost.report.compare import ModelComparison
from roost.report.compare_store import landing_comparison
from roost.report.document import Document, build_document
from roost.report.markdown import png_data_uri, render_markdown
from roost.report.outcome import ReportOutcome
from roost.report.publish import ENABLE_HINT, ReportUrls, report_urls, results_url
from roost.report.sections.comparison import comparison_section
from roost.report.write import headline_charts
from roost.settings import results_dir
from roost.store import AlreadyStored, StoreLike, append_run, load_records, report_dir, resolve
from roost.store.fallback import KeepLocalCopy, pending_objects, push_pending
from roost.store.objects import LocalStore, ObjectStore

HISTORY_LIMIT = 60
"""Earlier runs of the same model and host read for the baseline and the history charts."""


def headline_table(record: RunRecord, comparison: RegressionReport | None) -> list[dict[str, str]]:
    """Rows of the headline table artifact: metric, value, change (against the baseline), verdict. Every regressed
    metric has a row (one that is not a headline number is added after them); the last row says the
    verdict in a few words (the report artifact says it in full). Short cells: the Prefect UI never wraps
    a table cell, and the table must fit its pane at 1,280 px."""
    words = {"insufficient": "too few runs", "new": "new"}

    def row(label: str, value: str, c: MetricComparison | None) -> dict[str, str]:
        return {
            "metric": label,
            "value": value,
            "change": fmt_change(c.change_pct) if c is not None and c.change_pct is not None else "—",
            "verdict": words.get(c.verdict, c.verdict) if c is not None else "—",
        }

    rows = []
    shown: set[str] = set()
    for r in headline_rows(record):
        c = comparison.get(r.compared_as) if comparison is not None and r.compared_as else None
        rows.append(row(r.label, r.short if r.value is not None else r.metric.format(None), c))
        if c is not None:
            shown.add(c.metric.name)
    for c in comparison.regressions if comparison is not None else []:
        if c.metric.name not in shown:
            rows.append(row(c.metric.label, c.metric.format(c.current), c))
    if record.status != "completed":
        verdict, value = "run failed", f"at {record.failed_stage or 'an unknown stage'}"
    elif comparison is None:
        verdict, value = "not compared", "no baseline"
    else:
        n, runs = len(comparison.regressions), len(comparison.baseline_run_ids)
        verdict = {"baseline": "baseline", "insufficient": "no verdict", "ok": "no regression", "regressed": "REGRESSED",
                   "failed_run": "run failed"}[comparison.status]
        against = f"{runs} earlier run{'s' if runs != 1 else ''}"
        value = {"baseline": "first run", "insufficient": f"{against}, {comparison.config.min_runs} needed",
                 "regressed": f"{n} metric{'s' if n != 1 else ''} vs {against}"}.get(comparison.status, f"vs {against}")
    worse = record.accuracy_regressions if record.status == "completed" else []
    if worse:  # a significantly worse evaluation (McNemar) is a regression whatever the speed says
        verdict, value = "REGRESSED", ", ".join(f"{e.task} {e.comparison.delta_points:+.1f} points" for e in worse
                                                if e.comparison is not None)
    rows.append({"metric": "verdict", "value": value, "change": "—", "verdict": verdict})
    return rows


def publish_artifacts(record: RunRecord, outcome: ReportOutcome) -> dict[str, str]:
    """The run's report artifacts, on the current (flow) run; returns {kind: key}.

    Always the Markdown report and the headline table; with a results URL also a link to the HTML
    report and an image artifact of the key chart. Without one there is no link artifact: a
    ``file://`` URL on the worker does not open in a browser elsewhere."""
    meta = record.meta
    parts = (meta.profile, meta.host)
    keys = {"markdown": artifact_key("roost-report", *parts), "table": artifact_key("roost-headline", *parts)}
    what = f"{meta.profile} on {meta.host}, run {meta.run_id} ({record.status})"
    if outcome.artifact_markdown:
        markdown = outcome.artifact_markdown
    else:
        markdown = f"# roost report: {what}\n\nThe report files could not be written: {'; '.join(outcome.errors)}\n"
    create_markdown_artifact(markdown=markdown, key=keys["markdown"], description=f"roost report: {what}")
    create_table_artifact(table=headline_table(record, outcome.comparison), key=keys["table"],
                          description=f"Headline numbers: {what}")
    urls = outcome.urls
    if urls is not None:
        keys["link"] = artifact_key("roost-files", *parts)
        create_link_artifact(
            link=urls.html,
            link_text=f"HTML report ({meta.run_id})",
            key=keys["link"],
            description=f"Full report of {what}: report.html (self-contained), served by `roost results serve`",
        )
        if urls.key_chart is not None:
            keys["image"] = artifact_key("roost-chart", *parts)
            create_image_artifact(image_url=urls.key_chart, key=keys["image"],
                                  description=f"Key chart: {what}")
    if outcome.models is not None and outcome.files is not None:
        keys["comparison"] = artifact_key("roost-comparison", *parts)
        create_markdown_artifact(markdown=comparison_markdown(outcome.models, outcome.files, outcome.urls),
                                 key=keys["comparison"],
                                 description=f"{meta.repo_id} against {outcome.models.b.repo_id} on {meta.host}")
    return keys


def comparison_markdown(models: ModelComparison, files: ReportFiles, urls: ReportUrls | None) -> str:
    """The comparison with the model this one replaced, as an artifact: its tables and its three charts (from
    the results URL, else inline PNGs, so the Prefect UI shows them either way)."""
    section = comparison_section(models, files.charts)
    if section is None:
        return ""
    charts = {p for b in section.blocks if (p := getattr(b, "path", None)) is not None}
    served = urls.charts if urls is not None else {}
    sources = {p: src for name, p in files.charts.items() if p in charts
               and (src := served.get(name) or png_data_uri(p)) is not None}
    doc = Document(title=f"{models.a.name} vs {models.b.name} on {models.a.host}", facts=[], sections=[section])
    return render_markdown(doc, files.directory, images="pane", sources=sources)


def results_url_for(host_results_url: str = "", logger: Any = None) -> str:
    """The results URL in effect on this worker (``ROOST_RESULTS_URL``, else the host profile's), or
    ``""``; a malformed setting is logged and ignored so that the run is still reported."""
    try:
        return results_url(host_results_url)
    except UserError as exc:
        (logger or logging.getLogger("roost.report")).error("%s; the report artifacts will not link to files", exc)
        return ""


ARTIFACT_CHART_BYTES = 800_000
"""Most bytes of inline charts one artifact carries (its charts as small PNGs when no results URL serves them)."""


def artifact_sources(files: ReportFiles, urls: ReportUrls | None) -> tuple[dict[Path, str], str]:
    """The charts the artifact Markdown shows as images ({path: source}), and the line that says where the
    full report is: every chart from the results URL when there is one, else every chart as a small inline
    PNG (headline charts first, while they fit ``ARTIFACT_CHART_BYTES``), so the Prefect UI shows them with no
    server."""
    if urls is not None:
        served = {path: urls.charts[name] for name, path in files.charts.items() if name in urls.charts}
        return served, f"**Full report:** [report.html]({urls.html}) · [report.md]({urls.markdown})"
    sources: dict[Path, str] = {}
    first = headline_charts(files.charts)
    budget = ARTIFACT_CHART_BYTES
    for name in [*first, *(n for n in files.charts if n not in first)]:
        uri = png_data_uri(files.charts[name])
        if uri is None or len(uri) > budget:
            break  # the rest are named (in the full report) rather than drawn
        sources[files.charts[name]] = uri
        budget -= len(uri)
    left = len(files.charts) - len(sources)
    copies = "charts here are small copies" + (f"; {left} more are only there" if left else "")
    note = (f"**Full report:** `report.html` in `{files.directory}` on the worker ({copies}); to open it from the "
            f"Prefect UI, {ENABLE_HINT}.")
    return sources, note


def reports_root(store: ObjectStore) -> Path:
    """The local directory reports are rendered into: a directory store's own, else the worker's results
    directory (an object store holds the results; the report files stay on the worker that served them)."""
    target = store.target if isinstance(store, KeepLocalCopy) else store
    return target.root if isinstance(target, LocalStore) else results_dir()


def push_kept(store: ObjectStore, log: Any) -> None:
    """Upload what an earlier run kept locally while the store did not take it (nothing when nothing waits).
    Never raises: what still waits is logged, and this run's own results are stored after it either way."""
    target = store.target if isinstance(store, KeepLocalCopy) else store
    try:
        if not pending_objects(target):
            return
        uploaded, present = push_pending(target)
        log.info("uploaded %d object(s) an earlier run kept locally for %s (%d were there already)", uploaded,
                 target.url, present)
    except Exception as exc:  # the store or the local copy: this run goes on, the copy waits for the next push
        log.warning("results kept locally for %s still wait: %s", target.url, " ".join(str(exc).split())[:300])


def build_report(
    record: RunRecord,
    results_root: StoreLike = None,
    regress_config: RegressConfig | None = None,
    logger: Any = None,
    results_url: str = "",
    ui_url: str = "",
    compare_with: str = "",
    production: bool = False,
) -> ReportOutcome:
    """Store, compare and render (no Prefect API needed). Problems are logged and listed, not raised.

    ``results_root``: the results store (a directory, an ``ObjectStore``; None: the flow's). The report
    files go to :func:`reports_root`. ``results_url`` (validated, ``roost.report.publish.results_url``):
    where a browser reaches the reports directory; the artifact Markdown and ``outcome.urls`` point there.
    ``compare_with``, ``production``: the profile's; the comparison with the model it replaced (``outcome.models``)."""
    log = logger or logging.getLogger("roost.report")
    outcome = ReportOutcome()
    meta = record.meta
    store = resolve(results_root)
    local = reports_root(store)
    out_dir = report_dir(meta, local)
    record = record.model_copy(update={"report_path": str(out_dir / "report.md")})
    push_kept(store, log)

    history: list[RunRecord] = []
    try:
        history = load_records(store, model=meta.repo_id, host=meta.host, limit=HISTORY_LIMIT)
    except Exception as exc:  # an unreadable store must not stop this run being stored
        log.error("could not read earlier runs: %s", exc)
        outcome.errors.append(f"history: {exc}")
    history = [r for r in history if r.meta.run_id != meta.run_id]

    try:
        outcome.stored = append_run(record, store)
        log.info("run %s stored in %s", meta.run_id, outcome.stored.run_path)
    except AlreadyStored as exc:
        log.warning("%s; not stored again", exc)
    except Exception as exc:
        log.error("could not store run %s: %s", meta.run_id, exc)
        outcome.errors.append(f"store: {exc}")
    if isinstance(store, KeepLocalCopy) and store.message and f"store: {store.message}" not in outcome.errors:
        outcome.errors.append(f"store: {store.message}")

    try:
        outcome.comparison = compare(record, history, regress_config)
        log.info("baseline: %s", outcome.comparison.message)
        for c in outcome.comparison.regressions:
            log.warning("regressed: %s %s -> %s", c.metric.label, fmt_value(c.baseline, c.metric.unit),
                        fmt_value(c.current, c.metric.unit))
    except Exception as exc:
        log.error("could not compare with the baseline: %s", exc)
        outcome.errors.append(f"compare: {exc}")

    outcome.models = compare_with_replaced(record, store, compare_with, production, log, outcome)
    try:
        outcome.files = write_report(record, history, outcome.comparison, out_dir, ui_url=ui_url, models=outcome.models)
        log.info("report written: %s", outcome.files.markdown)
        files = outcome.files
        outcome.urls = report_urls(files.html, files.markdown, files.charts, files.key_chart,
                                   local / "reports", results_url)
        if results_url and outcome.urls is None:
            log.warning("the report %s is not under the served reports directory; no URLs for it", files.directory)
        doc = build_document(record, history, outcome.comparison, files.charts, ui_url=ui_url, models=outcome.models)
        sources, note = artifact_sources(files, outcome.urls)
        markdown = render_markdown(doc, out_dir, images="pane", sources=sources)
        if outcome.urls is not None:  # a link that opens: under the title
            title, _, rest = markdown.partition("\n")
            outcome.artifact_markdown = f"{title}\n\n{note}\n{rest}"
        else:  # the worker's path and how to serve it: at the end, after what the pane can show
            outcome.artifact_markdown = f"{markdown}\n{note}\n"
    except OSError as exc:  # a full or read-only disk: said in one line, not as a crash
        log.error("could not write the report in %s: %s", out_dir, exc.strerror or exc)
        outcome.errors.append(f"report: {exc}")
    except Exception as exc:
        log.exception("could not write the report")
        outcome.errors.append(f"report: {exc}")
    return outcome


def compare_with_replaced(record: RunRecord, store: ObjectStore, compare_with: str, production: bool, log: Any,
                          outcome: ReportOutcome) -> ModelComparison | None:
    """The comparison with the model this landing replaced (``roost.report.compare_store.landing_comparison``);
    a failure is logged and listed, never raised."""
    if not compare_with and not production:
        return None
    try:
        models, said = landing_comparison(record, compare_with, production,
                                          {p.name for p in PROFILES.values() if p.production}, store)
        log.info("model comparison: %s", said)
        return models
    except Exception as exc:
        log.error("could not compare with the model this one replaced: %s", exc)
        outcome.errors.append(f"model comparison: {exc}")
        return None


@task(name="report", cache_policy=NO_CACHE, persist_result=False)
def report_task(
    record: RunRecord,
    results_root: Path | None = None,
    regress_config: RegressConfig | None = None,
    results_url: str = "",
    compare_with: str = "",
    production: bool = False,
) -> ReportOutcome:
    """Store the run, compare it with its baseline (and, for ``production`` or ``compare_with``, with the model
    it replaced) and write the report files (the flow publishes the artifacts: ``publish_artifacts``)."""
    return build_report(record, results_root, regress_config, logger=get_run_logger(), results_url=results_url,
                        ui_url=PREFECT_UI_URL.value() or "", compare_with=compare_with, production=production)
