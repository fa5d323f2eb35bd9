"""The local Slack receiver holds messages to Block Kit's limits the way Slack does, and roost's
messages (a routine run, an insufficient baseline, a failure, hundreds of regressions) pass them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from support.samples import dist, earlier_runs, failed_run, spark_run
from support.slack import TOKEN, bot, hook
from support.slack_receiver import SlackReceiver, block_kit_errors

from roost.notify import build_message
from roost.notify.slack import deliver
from roost.records import BenchPoint
from roost.regress import compare


def section(text: str, kind: str = "mrkdwn") -> dict[str, Any]:
    return {"type": "section", "text": {"type": kind, "text": text}}


def post(receiver: SlackReceiver, payload: dict[str, Any], webhook: bool = False) -> tuple[int, str]:
    url = receiver.webhook_url if webhook else receiver.api_url + "chat.postMessage"
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


OK_BLOCKS: list[dict[str, Any]] = [
    {"type": "header", "text": {"type": "plain_text", "text": "h" * 150}},
    section("s" * 3000),
    {"type": "section", "fields": [{"type": "mrkdwn", "text": "f" * 2000}] * 10},
    {"type": "context", "elements": [{"type": "mrkdwn", "text": "c"}] * 10},
    {"type": "image", "image_url": "https://example.invalid/x.png", "alt_text": "chart"},
    {"type": "image", "slack_file": {"id": "F0TEST0001"}, "alt_text": "chart"},
    {"type": "divider"},
]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"text": "x", "blocks": [section("a")] * 51}, "blocks: must have at most 50 items (51)"),
        ({"text": "x", "blocks": [section("a" * 3001)]}, "blocks[0].text.text: must be less than 3001 characters (3001)"),
        ({"text": "x", "blocks": [{"type": "section", "fields": [{"type": "mrkdwn", "text": "f"}] * 11}]},
         "blocks[0].fields: must have 1 to 10 items"),
        ({"text": "x", "blocks": [{"type": "section", "fields": [{"type": "mrkdwn", "text": "f" * 2001}]}]},
         "blocks[0].fields[0].text: must be less than 2001 characters (2001)"),
        ({"text": "x", "blocks": [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]},
         "blocks[0].text.text: must be less than 151 characters (151)"),
        ({"text": "x", "blocks": [{"type": "header", "text": {"type": "mrkdwn", "text": "h"}}]},
         "blocks[0].text: type must be one of plain_text, not 'mrkdwn'"),
        ({"text": "x", "blocks": [{"type": "context", "elements": [{"type": "mrkdwn", "text": "c"}] * 11}]},
         "blocks[0].elements: must have 1 to 10 items"),
        ({"text": "t" * 40_001}, "text: must be a string of at most 40000 characters"),
        ({"text": "x", "blocks": [section("a", kind="markdown")]},
         "blocks[0].text: type must be one of mrkdwn, plain_text, not 'markdown'"),
        ({"text": "x", "blocks": [{"type": "image", "alt_text": "chart"}]},
         "blocks[0]: an image block needs image_url or slack_file"),
        ({"text": "x", "blocks": [{"type": "sectoin", "text": {"type": "mrkdwn", "text": "a"}}]},
         "blocks[0].type: unknown block type 'sectoin'"),
        ({"text": "x", "blocks": [section("")]}, "blocks[0].text: text must be a non-empty string"),
    ],
)
def test_a_message_over_a_limit_is_answered_invalid_blocks(slack_receiver: SlackReceiver, payload: dict[str, Any],
                                                           reason: str) -> None:
    assert reason in block_kit_errors(payload)
    status, body = post(slack_receiver, {"channel": "C0X", **payload})
    answer = json.loads(body)
    assert status == 200 and answer["ok"] is False and answer["error"] == "invalid_blocks"
    assert reason in answer["errors"] and f"[ERROR] {reason}" in answer["response_metadata"]["messages"]
    status, body = post(slack_receiver, payload, webhook=True)
    assert (status, body) == (400, "invalid_blocks")
    assert [errors for _, errors in slack_receiver.rejected][-2:] == [answer["errors"], answer["errors"]]


def test_a_message_at_every_limit_is_accepted(slack_receiver: SlackReceiver) -> None:
    payload = {"channel": "C0X", "text": "t" * 40_000, "blocks": OK_BLOCKS + [section("a")] * (50 - len(OK_BLOCKS))}
    assert block_kit_errors(payload) == []
    status, body = post(slack_receiver, payload)
    assert status == 200 and json.loads(body)["ok"] is True
    assert post(slack_receiver, payload, webhook=True) == (200, "ok")
    assert slack_receiver.rejected == []


def _many_regressions(n: int) -> tuple[Any, Any]:
    hist = earlier_runs(4)
    current = spark_run(day=9, scale=0.5)
    for level in range(n):
        for r in [*hist, current]:
            r.points.append(BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=100 + level,
                                       requests=4, output_tok_s=dist(100.0 if r is not current else 40.0)))
    return current, compare(current, hist)


def test_roost_messages_pass_the_limits(slack_receiver: SlackReceiver) -> None:
    current, comparison = _many_regressions(400)
    assert len(comparison.regressions) > 400
    messages = [
        build_message(current, comparison, run_url="http://127.0.0.1:4200/runs/flow-run/x", report_location="/r",
                      mentions=["U0ONCALL", "here"]),
        build_message(spark_run(day=9), compare(spark_run(day=9), earlier_runs(2))),  # insufficient baseline
        build_message(spark_run(day=1), compare(spark_run(day=1), [])),
        build_message(failed_run(), None, mentions=["U0ONCALL"]),
    ]
    for m in messages:
        assert block_kit_errors(m.model_dump()) == []
    # and through slack-sdk, bot and webhook
    result = deliver(bot(slack_receiver, upload_chart=False), current, comparison)
    assert result.status == "sent", result.detail
    assert deliver(hook(slack_receiver.webhook_url), current, comparison).status == "sent"
    assert slack_receiver.rejected == []
    posted = slack_receiver.calls("chat.postMessage")[0].json()
    assert len(posted["blocks"]) <= 50 and json.dumps(posted["blocks"], ensure_ascii=False).count("• ") == len(comparison.regressions)
