# ruff: noqa: RUF001  (the reports print a real minus sign)
"""Slack delivery through the real slack-sdk against a real HTTP slack_receiver on loopback.

Asserts on the payloads that arrive (chat.postMessage JSON, the three files_upload_v2 steps, the
webhook body) and on what happens when the slack_receiver answers 429 + Retry-After, 500, or is not there.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from support.samples import earlier_runs, failed_run, spark_run
from support.slack import HOOK_SECRET, TOKEN, assert_no_secret, bot, hook, regressed
from support.slack_receiver import Fault, SlackReceiver

from blocks.slack import SlackNotifier
from roost.net import free_port
from roost.notify.slack import deliver, prefect_run_url, redact
from roost.regress import compare


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)  # everything any logger emits, slack-sdk's included
    return caplog


def test_bot_regression_posts_block_kit_and_uploads_the_chart(slack_receiver: SlackReceiver, slack_chart: Path,
                                                               logs: pytest.LogCaptureFixture) -> None:
    current, comparison = regressed()
    notifier = bot(slack_receiver)
    result = deliver(notifier, current, comparison, chart=slack_chart, report_location="/results/reports/x/report.html",  # type: ignore[arg-type]
                     run_url=prefect_run_url(current.meta, notifier.prefect_ui_url))  # type: ignore[attr-defined]

    assert result.status == "sent" and result.kind == "regression" and result.transport == "bot"
    assert (result.channel, result.message_ts, result.file_id, result.retries) == (
        "C0ROOSTALERTS", "1767225600.000100", "F0TEST0001", 0)
    assert [r.endpoint for r in slack_receiver.requests] == [
        "chat.postMessage", "files.getUploadURLExternal", "upload", "files.completeUploadExternal"]

    post = slack_receiver.calls("chat.postMessage")[0]
    assert post.headers["Authorization"] == f"Bearer {TOKEN}"
    assert post.headers["Content-Type"].startswith("application/json")
    payload = post.json()
    assert payload["channel"] == "C0ROOSTALERTS" and payload["unfurl_links"] is False
    assert payload["text"].startswith("<@U0ONCALL> roost regression: ornith-9b on spark: decode tok/s @ 2,042-token prompt")
    blocks = json.dumps(payload["blocks"], ensure_ascii=False)
    assert payload["blocks"][0]["type"] == "header"
    assert "• decode tok/s @ 2,042-token prompt: 12.6 tok/s → 10.7 tok/s (−14.8%)" in blocks
    assert "<http://127.0.0.1:4200/runs/flow-run/7d2f4c1e-0000-4000-8000-000000000001|Prefect flow run>" in blocks
    assert "/results/reports/x/report.html" in blocks

    get_url = slack_receiver.calls("files.getUploadURLExternal")[0].form()
    assert get_url["filename"] == "decode_vs_prompt.png" and int(get_url["length"]) == slack_chart.stat().st_size
    assert slack_receiver.uploads["F0TEST0001"] == slack_chart.read_bytes()
    complete = slack_receiver.calls("files.completeUploadExternal")[0].form()
    assert complete["channel_id"] == "C0ROOSTALERTS" and complete["thread_ts"] == "1767225600.000100"
    assert json.loads(complete["files"])[0]["id"] == "F0TEST0001"
    assert_no_secret(logs.text, result.model_dump_json())


def test_failed_run_message_names_stage_class_and_remediation(slack_receiver: SlackReceiver) -> None:
    result = deliver(bot(slack_receiver, upload_chart=False), failed_run(), None, chart=None)
    assert result.status == "sent" and result.kind == "failure"
    payload = slack_receiver.calls("chat.postMessage")[0].json()
    assert payload["text"] == "<@U0ONCALL> roost run failed: ornith-9b on spark at serve (kv_pool_too_small)"
    blocks = json.dumps(payload["blocks"])
    assert "*Stage:* serve" in blocks and "`kv_pool_too_small`" in blocks
    assert "*Remediation:* Raise --kv-cache-memory-bytes to 12884901888 (12 GiB)" in blocks
    assert len(slack_receiver.requests) == 1


def test_a_routine_run_is_not_sent_unless_every_run_is_on(slack_receiver: SlackReceiver) -> None:
    current = spark_run(day=9)
    comparison = compare(current, earlier_runs())
    skipped = deliver(bot(slack_receiver), current, comparison)
    assert skipped.status == "skipped" and skipped.kind == "run" and "notify_on" in skipped.detail
    assert slack_receiver.requests == []
    sent = deliver(bot(slack_receiver, notify_on=["every_run"], upload_chart=False), current, comparison)
    assert sent.status == "sent"
    assert slack_receiver.calls("chat.postMessage")[0].json()["text"].startswith("roost run: ornith-9b on spark: decode 12.6 tok/s")


def test_no_notifier_is_a_skip() -> None:
    result = deliver(None, failed_run(), None)
    assert result.status == "skipped" and result.detail == "no Slack notifier configured"


def test_webhook_posts_the_same_blocks_without_an_upload(slack_receiver: SlackReceiver, slack_chart: Path,
                                                         logs: pytest.LogCaptureFixture) -> None:
    current, comparison = regressed()
    result = deliver(hook(slack_receiver.webhook_url), current, comparison, chart=slack_chart)  # type: ignore[arg-type]
    assert result.status == "sent" and result.transport == "webhook" and result.channel == ""
    assert [r.endpoint for r in slack_receiver.requests] == ["webhook"]
    payload = slack_receiver.requests[0].json()
    assert payload["text"].startswith("roost regression: ornith-9b on spark")
    assert any(b["type"] == "header" for b in payload["blocks"])
    assert slack_receiver.uploads == {}
    assert_no_secret(logs.text, result.model_dump_json())


def test_rate_limit_429_waits_retry_after_then_succeeds(slack_receiver: SlackReceiver, logs: pytest.LogCaptureFixture) -> None:
    slack_receiver.fail_next("chat.postMessage", Fault(429, {"Retry-After": "1"}, '{"ok": false, "error": "ratelimited"}'))
    result = deliver(bot(slack_receiver, upload_chart=False), failed_run(), None)
    assert result.status == "sent" and result.retries == 1
    first, second = slack_receiver.calls("chat.postMessage")
    assert second.at - first.at >= 1.0  # Retry-After honoured
    assert first.json() == second.json()
    assert "rate limited (429), waiting Retry-After 1 s" in logs.text


def test_rate_limit_on_the_webhook_is_retried_too(slack_receiver: SlackReceiver) -> None:
    slack_receiver.fail_next("webhook", Fault(429, {"Retry-After": "1"}, "rate_limited"))
    result = deliver(hook(slack_receiver.webhook_url), failed_run(), None)
    assert result.status == "sent" and result.retries == 1 and len(slack_receiver.calls("webhook")) == 2


def test_a_persistent_500_is_retried_then_recorded_as_failed(slack_receiver: SlackReceiver,
                                                            logs: pytest.LogCaptureFixture) -> None:
    slack_receiver.fail_next("chat.postMessage", *[Fault(500, body='{"ok": false, "error": "internal_error"}')] * 3)
    result = deliver(bot(slack_receiver, max_retries=2), failed_run(), None)
    assert result.status == "failed" and result.retries == 2
    assert len(slack_receiver.calls("chat.postMessage")) == 3
    assert "SlackApiError" in result.detail and "internal_error" in result.detail
    assert "not sent (the run is unaffected)" in logs.text
    assert_no_secret(logs.text, result.model_dump_json())


def test_a_single_500_is_retried_and_sent(slack_receiver: SlackReceiver) -> None:
    slack_receiver.fail_next("chat.postMessage", Fault(500))
    result = deliver(bot(slack_receiver, upload_chart=False), failed_run(), None)
    assert result.status == "sent" and result.retries == 1


def test_a_500_from_the_webhook_is_recorded_as_failed(slack_receiver: SlackReceiver) -> None:
    slack_receiver.fail_next("webhook", *[Fault(500, body="internal_error")] * 2)
    result = deliver(hook(slack_receiver.webhook_url, max_retries=1), failed_run(), None)
    assert result.status == "failed" and "HTTP 500" in result.detail and len(slack_receiver.calls("webhook")) == 2


def test_connection_refused_is_retried_then_recorded_as_failed(logs: pytest.LogCaptureFixture) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    result = deliver(SlackNotifier(bot_token=TOKEN, channel="C0X", base_url=f"{closed}/api/", max_retries=2),
                     failed_run(), None)
    assert result.status == "failed" and result.retries == 2
    assert "Connection refused" in result.detail
    assert time.monotonic() - t0 < 20
    web = deliver(hook(f"{closed}/services/T0/B0/{HOOK_SECRET}", max_retries=1), failed_run(), None)
    assert web.status == "failed" and web.retries == 1 and "Connection refused" in web.detail
    assert "connection failed (URLError)" in logs.text
    assert_no_secret(logs.text, result.model_dump_json(), web.model_dump_json())


def test_a_failed_chart_upload_keeps_the_message(slack_receiver: SlackReceiver, slack_chart: Path) -> None:
    slack_receiver.fail_next("upload", Fault(500, body="upload broke"))
    current, comparison = regressed()
    result = deliver(bot(slack_receiver), current, comparison, chart=slack_chart)  # type: ignore[arg-type]
    assert result.status == "sent" and result.message_ts
    assert result.detail.startswith("chart upload failed:")
    assert slack_receiver.calls("files.completeUploadExternal") == []


def test_a_bad_token_is_recorded_without_the_token(slack_receiver: SlackReceiver, logs: pytest.LogCaptureFixture) -> None:
    wrong = "xoxb-wrong-SECRET-9999"
    result = deliver(SlackNotifier(bot_token=wrong, channel="C0X", base_url=slack_receiver.api_url), failed_run(), None)
    assert result.status == "failed" and "invalid_auth" in result.detail
    assert slack_receiver.calls("chat.postMessage")[0].headers["Authorization"] == f"Bearer {wrong}"
    assert wrong not in logs.text and wrong not in result.model_dump_json()


def test_redact() -> None:
    url = f"https://hooks.slack.com/services/T0/B0/{HOOK_SECRET}"
    assert redact(f"POST {url} failed, token {TOKEN}", [TOKEN, url]) == "POST *** failed, token ***"
    assert redact(f"path services/T0/B0/{HOOK_SECRET}", [url]) == "path ***"


# --- the Prefect task: block loaded from a real Prefect server, outcome recorded in the results store ---
