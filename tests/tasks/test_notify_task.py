
"""The notify task: loads the Slack block from a real Prefect server, sends through the real
slack-sdk to a real HTTP slack_receiver on loopback, and records each outcome in the results store."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import SecretStr
from support.slack import TOKEN, assert_no_secret, bot, regressed
from support.slack_receiver import SlackReceiver

from blocks.slack import SlackNotifier


@pytest.mark.slow
def test_notify_task_loads_the_block_sends_and_records(prefect_api: str, slack_receiver: SlackReceiver, slack_chart: Path,
                                                       tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from prefect import flow

    from roost.records import NotifyResult
    from roost.report.outcome import ReportOutcome
    from roost.store import load_notifications
    from tasks.notify import notify_task

    bot(slack_receiver).save("roost-slack-test-notify", overwrite=True)
    loaded = SlackNotifier.load("roost-slack-test-notify")
    assert loaded.bot_token is not None and loaded.bot_token.get_secret_value() == TOKEN  # type: ignore[union-attr]

    current, comparison = regressed()
    outcome = ReportOutcome(comparison=comparison)  # type: ignore[arg-type]

    @flow(name="notify-test")
    def run_notify(block_name: str) -> NotifyResult:
        return notify_task(current, outcome, block_name=block_name, results_root=tmp_path)  # type: ignore[arg-type]

    result = run_notify("roost-slack-test-notify")
    assert result.status == "sent" and result.kind == "regression"
    assert len(slack_receiver.calls("chat.postMessage")) == 1

    missing = run_notify("no-such-block")
    assert missing.status == "skipped"

    # saved from the UI with the channel left empty: skipped, and the log says which field, not the token
    SlackNotifier.model_construct(bot_token=SecretStr(TOKEN), channel="", webhook_url=None,
                                  notify_on=["regression", "failure"]).save("roost-slack-invalid", overwrite=True)
    with caplog.at_level(logging.INFO):
        invalid = run_notify("roost-slack-invalid")
    assert invalid.status == "skipped"
    said = [r.getMessage() for r in caplog.records if "roost-slack-invalid" in r.getMessage()]
    assert any("is invalid" in m and "channel is empty" in m for m in said), said
    assert_no_secret(caplog.text)

    rows = load_notifications(tmp_path)
    assert list(rows["status"]) == ["sent", "skipped", "skipped"]
    assert list(rows["run_id"]) == [current.meta.run_id] * 3  # type: ignore[attr-defined]
    assert_no_secret(rows.to_json(date_format="iso"))
