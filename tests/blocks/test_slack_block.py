"""SlackNotifier: one transport required, secrets stay masked."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from blocks.slack import SlackNotifier

TOKEN = "xoxb-test-0000-SECRETTOKEN"
URL = "https://hooks.slack.com/services/T0/B0/XXXXSECRETHOOKXXXX"


def test_bot_token_needs_a_channel() -> None:
    with pytest.raises(ValidationError, match="channel is empty"):
        SlackNotifier(bot_token=TOKEN)  # type: ignore[arg-type]
    n = SlackNotifier(bot_token=TOKEN, channel="C0123")  # type: ignore[arg-type]
    assert n.transport == "bot" and n.notify_on == ["regression", "failure"] and n.upload_chart


def test_one_transport_is_required() -> None:
    with pytest.raises(ValidationError, match=r"needs bot_token .* or webhook_url"):
        SlackNotifier()
    with pytest.raises(ValidationError, match="needs bot_token"):
        SlackNotifier(bot_token="  ", channel="C0")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="must be an http"):
        SlackNotifier(webhook_url="hooks.slack.com/services/x")  # type: ignore[arg-type]
    assert SlackNotifier(webhook_url=URL).transport == "webhook"  # type: ignore[arg-type]
    assert SlackNotifier(webhook_url=URL, bot_token=TOKEN, channel="C0").transport == "bot"  # type: ignore[arg-type]


def test_notify_on_is_validated() -> None:
    with pytest.raises(ValidationError):
        SlackNotifier(webhook_url=URL, notify_on=["sometimes"])  # type: ignore[arg-type, list-item]
    assert SlackNotifier(webhook_url=URL, notify_on=["every_run"]).notify_on == ["every_run"]  # type: ignore[arg-type]


def test_secrets_are_masked_everywhere_but_get_secret_value() -> None:
    n = SlackNotifier(bot_token=TOKEN, webhook_url=URL, channel="C0")  # type: ignore[arg-type]
    for text in (repr(n), str(n), n.model_dump_json(), str(n.model_dump())):
        assert TOKEN not in text and "SECRETHOOK" not in text
    assert n.secrets() == [TOKEN, URL]
    assert n.bot_token is not None and n.bot_token.get_secret_value() == TOKEN
