"""The last stage, ``report``: stored, compared with the baseline, written, published, sent to Slack."""

from __future__ import annotations

from prefect import get_run_logger

from flows.stages.timing import stage
from roost.hosts import HostProfile
from roost.profiles import ModelProfile
from roost.records import RunRecord
from roost.regress import RegressionReport
from roost.report.outcome import ReportOutcome
from roost.store import current_store
from roost.store.fallback import KeepLocalCopy
from tasks.notify import notify_task
from tasks.report import publish_artifacts, report_task, results_url_for


def report_stage(
    record: RunRecord, notify: bool, prof: ModelProfile | None = None, host: HostProfile | None = None
) -> RegressionReport | None:
    """Store the run, compare it with its baseline (as the profile's ``regress`` says), write the
    report, and publish its artifacts on the flow run (with the results URL of ``ROOST_RESULTS_URL`` or
    ``host.results_url``, so the UI opens the charts and the report); then the Slack message (failed
    runs too). An artifact the API refuses is logged; the run is still reported. Returns the comparison
    with the baseline (None when it could not be made), for the verdict (``flows.lifecycle.finish``)."""
    url = results_url_for(host.results_url if host is not None else "", get_run_logger())
    report: ReportOutcome | None = None
    with stage(record, "report"):
        report = report_task(record, regress_config=prof.regress_config() if prof is not None else None,
                             results_url=url, compare_with=prof.compare_with if prof is not None else "",
                             production=prof is not None and prof.production)
        record.report_path = str(report.markdown or "")
        store = current_store()
        if isinstance(store, KeepLocalCopy) and store.failed:  # measured, stored on the worker only (or nowhere)
            get_run_logger().error("%s", store.message)
            record.fail("report", store.kept_failure())
        try:
            report.artifact_keys = publish_artifacts(record, report)
        except Exception as exc:  # the API refused an artifact: the files and the store have the report
            get_run_logger().error("could not publish the report artifacts: %s", exc)
            report.errors.append(f"artifacts: {exc}")
    if notify:
        notify_task(record, report)
    return report.comparison if report is not None else None
