"""Notify stage: post the run to Slack when it regressed, failed, or (optionally) always.

Loads the ``SlackNotifier`` block (``roost-slack`` unless told otherwise), hands the message to
``roost.notify.slack.deliver`` and records the outcome (sent, skipped or failed, never a secret) in
the results store. A Slack problem never fails the flow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from prefect.settings import PREFECT_UI_URL
from pydantic import ValidationError

from blocks.resolve import validation_problems
from blocks.slack import SLACK_BLOCK, SlackNotifier
from roost.notify.slack import deliver, prefect_run_url
from roost.records import NotifyResult, RunRecord
from roost.report.outcome import ReportOutcome
from roost.store import append_notification

DEFAULT_BLOCK = SLACK_BLOCK
"""The SlackNotifier block ``notify_task`` loads when it is given none (``roost setup`` makes crash alerts from it)."""


def load_notifier(block_name: str, logger: Any) -> SlackNotifier | None:
    """The saved SlackNotifier block, or None (logged: missing, invalid with the field named, never a value)."""
    try:
        loaded = SlackNotifier.load(block_name)
        return loaded if isinstance(loaded, SlackNotifier) else None
    except RuntimeError as exc:
        # Prefect wraps a document that fails validation (saved from the UI with a field missing or wrong)
        invalid = exc.__cause__ if isinstance(exc.__cause__, ValidationError) else None
        if invalid is None:
            logger.error("could not load the SlackNotifier block %r: %s", block_name, type(exc).__name__)
        else:
            logger.error("the SlackNotifier block %r is invalid (%s): fix it in the Prefect UI (Blocks)", block_name,
                         validation_problems(invalid))
    except ValueError:
        logger.info("no SlackNotifier block named %r; Slack is not configured", block_name)
    except Exception as exc:
        logger.error("could not load the SlackNotifier block %r: %s", block_name, type(exc).__name__)
    return None


@task(name="notify", cache_policy=NO_CACHE, persist_result=False)
def notify_task(
    record: RunRecord,
    report: ReportOutcome | None = None,
    notifier: SlackNotifier | None = None,
    block_name: str | None = DEFAULT_BLOCK,
    results_root: Path | None = None,
) -> NotifyResult:
    """Send the run's Slack message (``report`` is the report stage's ``ReportOutcome``) and record
    the outcome in the results store. Never fails the flow."""
    logger = get_run_logger()
    if notifier is None and block_name:
        notifier = load_notifier(block_name, logger)
    files = report.files if report is not None else None
    ui = (notifier.prefect_ui_url if notifier is not None else "") or PREFECT_UI_URL.value() or ""
    result = deliver(notifier, record, report.comparison if report is not None else None,
                     chart=files.key_chart if files is not None else None,
                     report_location=str(files.html) if files is not None else "",
                     run_url=prefect_run_url(record.meta, ui), logger=logger)
    try:
        append_notification(record.meta, result, results_root)
    except Exception as exc:
        logger.error("could not record the notification outcome: %s", exc)
    return result
