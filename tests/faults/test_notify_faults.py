"""Slack failing while a run is reported, with the real parts: the land flow's report stage
(``flows.stages.report_stage``, which landings and rebenchmarks both end with) on a real Prefect server,
the ``roost-slack`` block loaded from it, the real slack-sdk client, and the local Slack receiver
(``support.slack_receiver``) answering HTTP 500 or accepting the request and never answering.

The run stays green (Completed, its verdict unchanged); the failed notification is where a user looks: an
ERROR line in the flow run's logs on the Prefect server and a ``failed`` row (with the reason) in the
results store's ``notifications`` table; the stage is bounded by slack-sdk's per-request timeout; the token
appears in no log line, row, state message or exception text."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from support.flow_logs import run_logs, send_queued_logs
from support.samples import earlier_runs, failed_run
from support.slack import TOKEN, assert_no_secret, bot, hook, regressed
from support.slack_receiver import Fault, SlackReceiver
from support.wait import poll

from blocks.slack import SLACK_BLOCK, SlackNotifier
from roost import store
from roost.hosts import CPU
from roost.notify.slack import deliver

TIMEOUT_S = 2
RETRIES = 2


@flow(name="notify-faults-report")
def notify_report(day: int) -> dict[str, object]:
    """The last stages of a landing (report and Slack, then the verdict) on a run that regressed."""
    from flows.lifecycle import finish, results_store
    from flows.stages import report_stage

    record, _ = regressed()
    with results_store(CPU):
        comparison = report_stage(record, notify=True)
    return finish(record, "land", None, comparison)


@pytest.fixture
def notify_block(prefect_api: str, slack_receiver: SlackReceiver) -> Iterator[SlackNotifier]:
    """The ``roost-slack`` block the notify stage loads, pointed at the receiver (removed afterwards: other
    flows on this Prefect server must not find it)."""
    notifier = bot(slack_receiver, timeout_s=TIMEOUT_S, max_retries=RETRIES)
    notifier.save(SLACK_BLOCK, overwrite=True)
    try:
        yield notifier
    finally:
        SlackNotifier.delete(SLACK_BLOCK)


def notify_flow_logs(flow_run_id: Any) -> list[str]:
    """The flow run's log lines as the Prefect server has them (the UI's Logs tab)."""
    send_queued_logs()
    return poll(lambda: [f"{log.level} {log.message}" for log in run_logs(flow_run_id)],
                lambda lines: any("Slack" in line for line in lines), timeout_s=15, every_s=0.2)


def notify_task_seconds(flow_run_id: Any) -> float:
    """How long the flow run's notify task ran, by the Prefect server's clock."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    (notify,) = [r for r in runs if r.name.startswith("notify")]
    assert notify.start_time is not None and notify.end_time is not None
    return (notify.end_time - notify.start_time).total_seconds()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["http-500", "no-answer"])
def test_slack_failing_never_fails_the_landing_and_is_recorded_as_failed(
        notify_block: SlackNotifier, slack_receiver: SlackReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, fault: str) -> None:
    root = tmp_path / "results"
    monkeypatch.setenv("ROOST_RESULTS_STORE", str(root))
    monkeypatch.setenv("ROOST_RESULTS_DIR", str(root))
    for rec in earlier_runs():
        store.append_run(rec, root)
    if fault == "http-500":  # every attempt: the first and its retries
        slack_receiver.fail_next("chat.postMessage",
                                 *[Fault(500, body='{"ok": false, "error": "internal_error"}')] * (RETRIES + 1))
    else:
        slack_receiver.fail_next("chat.postMessage", *[Fault(hang=True)] * (RETRIES + 1))

    with caplog.at_level(logging.DEBUG):
        state = notify_report(9, return_state=True)
    assert state.is_completed(), state.message  # green: Slack never fails a run
    assert (state.message or "").startswith("regressed:")
    record = state.result()
    assert record["status"] == "completed" and record["failed_stage"] == ""

    posts = slack_receiver.calls("chat.postMessage")
    if fault == "http-500":
        assert len(posts) == RETRIES + 1  # slack-sdk's retries of a 5xx, then given up
    else:
        assert len(posts) == 1 and slack_receiver.hung == 1  # a request Slack took is not sent twice
    assert posts[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert slack_receiver.calls("files.getUploadURLExternal") == []

    (row,) = store.load_notifications(root).to_dict(orient="records")
    assert (row["status"], row["kind"], row["transport"], row["run_id"]) == (
        "failed", "regression", "bot", regressed()[0].meta.run_id)
    if fault == "http-500":
        assert row["retries"] == RETRIES and "internal_error" in row["detail"]
    else:
        assert row["retries"] == 0 and f"no answer from Slack within {TIMEOUT_S} s" in row["detail"]

    flow_run_id = state.state_details.flow_run_id
    lines = notify_flow_logs(flow_run_id)
    said = [line for line in lines if "message not sent (the run is unaffected)" in line]
    assert len(said) == 1 and said[0].startswith("40 Slack: regression message not sent"), lines  # 40: ERROR
    # bounded by slack-sdk's per-request timeout: at most every attempt's (the 500s: their back-off instead)
    assert notify_task_seconds(flow_run_id) < (RETRIES + 1) * TIMEOUT_S + 5

    assert_no_secret(caplog.text, "\n".join(lines), state.message or "", str(row), str(record))


def test_a_webhook_that_never_answers_is_given_up_after_its_timeout(slack_receiver: SlackReceiver,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The webhook transport (its secret is its URL) against the same silent Slack."""
    slack_receiver.fail_next("webhook", *[Fault(hang=True)] * (RETRIES + 1))
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        result = deliver(hook(slack_receiver.webhook_url, timeout_s=TIMEOUT_S, max_retries=RETRIES), failed_run(), None)
    assert time.monotonic() - started < TIMEOUT_S + 3
    assert result.status == "failed" and result.retries == 0 and slack_receiver.hung == 1
    assert f"no answer from Slack within {TIMEOUT_S} s" in result.detail
    assert "message not sent (the run is unaffected)" in caplog.text
    assert_no_secret(caplog.text, result.model_dump_json())
    assert slack_receiver.webhook_url not in caplog.text
