"""What the Slack tests share: the secrets the local receiver expects, notifier blocks pointed at it,
and a run that regressed (the fixtures ``slack_receiver`` and ``slack_chart`` are in ``tests/conftest.py``)."""

from __future__ import annotations

from blocks.slack import SlackNotifier
from roost.records import RunRecord
from roost.regress import RegressionReport, compare
from support.samples import earlier_runs, spark_run
from support.slack_receiver import SlackReceiver

TOKEN = "xoxb-test-0000-SECRETTOKEN"
HOOK_SECRET = "XXXXSECRETHOOKXXXX"


def bot(receiver: SlackReceiver, **kw: object) -> SlackNotifier:
    """A bot-token notifier posting to ``receiver`` (channel C0ROOSTALERTS, mentioning U0ONCALL)."""
    return SlackNotifier(bot_token=TOKEN, channel="C0ROOSTALERTS", base_url=receiver.api_url,  # type: ignore[arg-type]
                         mention_on_regression=["U0ONCALL"], prefect_ui_url="http://127.0.0.1:4200", **kw)


def hook(url: str, **kw: object) -> SlackNotifier:
    """An incoming-webhook notifier posting to ``url``."""
    return SlackNotifier(webhook_url=url, **kw)  # type: ignore[arg-type]


def regressed() -> tuple[RunRecord, RegressionReport]:
    """A run 15% slower than the four before it, and its comparison with them."""
    current = spark_run(day=9, scale=0.85, flow_run_id="7d2f4c1e-0000-4000-8000-000000000001")
    return current, compare(current, earlier_runs())


def assert_no_secret(*texts: str) -> None:
    for t in texts:
        assert TOKEN not in t and HOOK_SECRET not in t
