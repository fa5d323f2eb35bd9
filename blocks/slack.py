"""``SlackNotifier``: where and when roost tells Slack about a run.

Two transports:

- a bot token (``xoxb-...``) + a channel: ``chat.postMessage`` with Block Kit, and the key chart
  uploaded into the message's thread (``files_upload_v2``; the bot needs ``chat:write`` and
  ``files:write``);
- an incoming-webhook URL: the same Block Kit message, no upload (webhooks cannot carry files).

The token and the URL are ``SecretStr``: Prefect stores them encrypted and shows them masked; roost
never logs them. Register the type once with ``prefect block register -m blocks.slack`` and create
a block named ``roost-slack`` (the name ``tasks.notify.notify_task`` loads by default)::

    SlackNotifier(bot_token="xoxb-...", channel="C0123456789", mention_on_regression=["U0ABC"]).save("roost-slack")
"""

from __future__ import annotations

from typing import Literal

from prefect.blocks.core import Block
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.types import SecretDict
from pydantic import Field, SecretStr, model_validator

NotifyOn = Literal["regression", "failure", "every_run"]

SLACK_BLOCK = "roost-slack"
"""The SlackNotifier block roost reads by default (``tasks.notify``) and ``roost setup`` makes crash alerts from."""

STAGE_LABEL = "roost.stage"
"""The flow-run label ``flows.stages.timing.stage`` sets to the stage a run is in; the crash alert reports it."""

ALERT_TEXT = "*{{subject}}*\n{{body}}"
"""The Slack text of a server-sent notification: the automation's rendered subject and body."""


def _default_notify_on() -> list[NotifyOn]:
    return ["regression", "failure"]


class SlackNotifier(Block):
    """Slack alerts for roost runs: regressions, failed runs, and optionally every run."""

    _block_type_name = "Roost Slack Notifier"
    _block_type_slug = "roost-slack-notifier"
    _description = "Where and when roost posts run reports, regressions and failures to Slack."

    bot_token: SecretStr | None = Field(
        default=None, description="Bot token (xoxb-...) with chat:write and files:write. Preferred over the webhook."
    )
    webhook_url: SecretStr | None = Field(
        default=None, description="Incoming-webhook URL; used when no bot token is set (no chart upload)."
    )
    channel: str = Field(
        default="", description="Channel for the bot token: an ID (C0123...) is safest; required with a bot token."
    )
    mention_on_regression: list[str] = Field(
        default_factory=list,
        description="Who to mention on a regression or a failed run: user IDs (U0123), 'here', or group IDs (S0123).",
    )
    notify_on: list[NotifyOn] = Field(
        default_factory=_default_notify_on,
        description="When to post: on a regression, on a failed run, and/or on every run.",
    )
    upload_chart: bool = Field(default=True, description="Upload the key chart into the message's thread (bot token only).")
    base_url: str = Field(default="https://slack.com/api/", description="Slack Web API base URL (override for tests).")
    prefect_ui_url: str = Field(
        default="", description="Prefect UI URL for the run link; empty means the PREFECT_UI_URL setting."
    )
    timeout_s: int = Field(default=30, ge=1, description="Per-request timeout.")
    max_retries: int = Field(default=2, ge=0, description="Retries for a 429, a connection error or a 5xx.")

    @model_validator(mode="after")
    def _one_transport(self) -> SlackNotifier:
        has_token = self.bot_token is not None and bool(self.bot_token.get_secret_value().strip())
        has_hook = self.webhook_url is not None and bool(self.webhook_url.get_secret_value().strip())
        if not (has_token or has_hook):
            raise ValueError("SlackNotifier needs bot_token (with channel) or webhook_url; neither is set")
        if has_token and not self.channel.strip():
            raise ValueError("SlackNotifier.channel is empty: a bot token needs the channel to post to (e.g. C0123456789)")
        if has_hook and not has_token:
            url = self.webhook_url.get_secret_value().strip() if self.webhook_url else ""
            if not url.startswith(("https://", "http://")):
                raise ValueError("SlackNotifier.webhook_url must be an http(s) URL (https://hooks.slack.com/services/...)")
        return self

    @property
    def transport(self) -> Literal["bot", "webhook"]:
        """``bot`` when a bot token is set, else ``webhook``."""
        if self.bot_token is not None and self.bot_token.get_secret_value().strip():
            return "bot"
        return "webhook"

    def prefect_notification_block(self) -> CustomWebhookNotificationBlock:
        """The same Slack destination as a Prefect notification block, for automations to send through.

        The Prefect server sends it, so a message goes out when the run's own process is gone (a crash).
        A bot token posts ``chat.postMessage`` to ``base_url`` with ``Authorization: Bearer`` and the
        channel; a webhook URL gets the text posted to it. The token, or the webhook URL (its path is the
        credential), is only in the block's ``secrets``, substituted when the message is sent.
        """
        if self.transport == "bot":
            token = self.bot_token.get_secret_value().strip() if self.bot_token is not None else ""
            return CustomWebhookNotificationBlock(
                name="roost crash alerts: Slack chat.postMessage", url=self.base_url.rstrip("/") + "/chat.postMessage",
                method="POST", headers={"Authorization": "Bearer {{token}}",
                                        "Content-Type": "application/json; charset=utf-8"},
                json_data={"channel": self.channel.strip(), "text": ALERT_TEXT},
                cookies=None, secrets=SecretDict({"token": token}), timeout=float(self.timeout_s))
        url = self.webhook_url.get_secret_value().strip() if self.webhook_url is not None else ""
        return CustomWebhookNotificationBlock(
            name="roost crash alerts: Slack incoming webhook", url="{{webhook_url}}", method="POST",
            json_data={"text": ALERT_TEXT}, headers=None, cookies=None, secrets=SecretDict({"webhook_url": url}),
            timeout=float(self.timeout_s))

    def secrets(self) -> list[str]:
        """The secret values (to redact from any text that could reach a log or a record)."""
        out = []
        for s in (self.bot_token, self.webhook_url):
            if s is not None and s.get_secret_value().strip():
                out.append(s.get_secret_value().strip())
        return out
