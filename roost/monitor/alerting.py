"""``alertmanager/alertmanager.yml``: every roost alert routed to Slack (or, with no Slack configured,
to a receiver that sends nothing), grouped, de-duplicated and followed by a resolved message.

- **Grouping.** One notification per ``alertname`` + ``model_name`` + ``instance``; the first one
  ``group_wait`` after the group appears, further changes at most every ``group_interval``, the same
  firing alerts again only after ``repeat_interval`` (:class:`RouteSettings`). Prometheus re-sends a
  firing alert on every resend interval; Alertmanager's notification log is what keeps Slack at one
  message per change.
- **Resolved.** ``send_resolved``: a group whose alerts all resolved gets one more message, titled
  ``[RESOLVED]`` (a firing one ``[FIRING:n]``), each alert's summary and description in the text.
- **Secrets.** The webhook URL (its path is the credential) or the bot token is never in the config:
  it is in :data:`WEBHOOK_FILE` / :data:`TOKEN_FILE` beside it (``roost.monitor.render`` writes them).
  Both names are relative. Alertmanager resolves ``http_config``'s ``credentials_file`` against the
  config's folder, but opens ``api_url_file`` relative to its working directory (0.25, Debian's, does
  not resolve it): ``roost monitor up`` starts the container in ``/etc/alertmanager`` (the mounted
  folder), and an Alertmanager run on the host must be started in the rendered ``alertmanager/``.

Every field used here exists since Alertmanager 0.22 (``api_url_file``; ``http_config.authorization``)
and is checked by ``amtool check-config`` of Debian's 0.25 in the tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import SecretStr

from roost.errors import UserError

CONFIG_FILE = "alertmanager.yml"
WEBHOOK_FILE = "slack-webhook-url"
TOKEN_FILE = "slack-bot-token"
SECRET_FILES = (WEBHOOK_FILE, TOKEN_FILE)
GROUP_BY = ["alertname", "model_name", "instance"]
NULL_RECEIVER = "null"
SLACK_RECEIVER = "slack"
SLACK_POST_MESSAGE = "https://slack.com/api/chat.postMessage"

Receiver = Literal["none", "slack-webhook", "slack-bot"]
RECEIVERS: tuple[Receiver, ...] = ("none", "slack-webhook", "slack-bot")

TITLE = ('[{{ if eq .Status "firing" }}FIRING:{{ .Alerts.Firing | len }}{{ else }}RESOLVED{{ end }}] '
         '{{ .CommonLabels.alertname }}{{ with .CommonLabels.model_name }} on {{ . }}{{ end }}'
         '{{ with .CommonLabels.instance }} ({{ . }}){{ end }}')
TEXT = ('{{ range .Alerts }}*{{ if eq .Status "firing" }}FIRING{{ else }}RESOLVED{{ end }}* '
        '{{ .Annotations.summary }}\n{{ .Annotations.description }}\n'
        '_{{ .Labels.severity }}, since {{ .StartsAt.Format "2006-01-02 15:04:05 MST" }}'
        '{{ if eq .Status "resolved" }}, resolved {{ .EndsAt.Format "15:04:05 MST" }}{{ end }}_\n{{ end }}')
COLOR = '{{ if eq .Status "firing" }}{{ if eq .CommonLabels.severity "critical" }}danger{{ else }}warning{{ end }}{{ else }}good{{ end }}'


@dataclass(frozen=True)
class RouteSettings:
    """Alertmanager durations (``--route NAME=VALUE``): a first message ``group_wait`` after a group's
    first alert, changes at most every ``group_interval``, an unchanged firing group again after
    ``repeat_interval``."""

    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"

    def differing(self) -> dict[str, object]:
        """The fields that differ from the defaults (what the monitor state records)."""
        default = asdict(RouteSettings())
        return {k: v for k, v in asdict(self).items() if v != default[k]}


@dataclass(frozen=True)
class SlackSettings:
    """Where alerts go, as ``roost monitor render`` was given it (from the ``roost-slack`` block).

    ``secret`` is the webhook URL (``slack-webhook``) or the bot token (``slack-bot``). A Slack
    receiver without it (a landing's re-render) keeps the secret file written last time."""

    receiver: Receiver = "none"
    channel: str = ""
    api_url: str = ""
    """``chat.postMessage``'s URL for a bot token (another base than Slack's in tests)."""
    secret: SecretStr | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.receiver not in RECEIVERS:
            raise UserError(f"alert receiver {self.receiver!r}: one of {', '.join(RECEIVERS)}")
        if self.receiver == "slack-bot":
            if not self.channel.strip():
                raise UserError("Slack alerts with a bot token need a channel (the roost-slack block's channel)")
            if not self.api_url.startswith(("https://", "http://")):
                raise UserError(f"Slack API URL {self.api_url!r}: give an http(s) URL")
        if self.receiver == "slack-webhook" and self.secret is not None \
                and not self.secret.get_secret_value().strip().startswith(("https://", "http://")):
            raise UserError("the Slack webhook URL is not an http(s) URL (https://hooks.slack.com/services/...)")

    @property
    def secret_file(self) -> str | None:
        """The file beside ``alertmanager.yml`` holding the secret; None without Slack."""
        return {"slack-webhook": WEBHOOK_FILE, "slack-bot": TOKEN_FILE}.get(self.receiver)


def _slack(settings: SlackSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"send_resolved": True}
    if settings.receiver == "slack-webhook":
        out["api_url_file"] = WEBHOOK_FILE
    else:
        out["api_url"] = settings.api_url
        out["channel"] = settings.channel.strip()
        out["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": TOKEN_FILE}}
    out.update({"title": TITLE, "text": TEXT, "fallback": TITLE, "color": COLOR, "mrkdwn_in": ["text"]})
    return out


def alertmanager_config(slack: SlackSettings, route: RouteSettings) -> dict[str, Any]:
    """The configuration document (``yaml.safe_dump`` writes it)."""
    receiver: dict[str, Any] = {"name": NULL_RECEIVER}
    if slack.receiver != "none":
        receiver = {"name": SLACK_RECEIVER, "slack_configs": [_slack(slack)]}
    return {
        "route": {"receiver": receiver["name"], "group_by": list(GROUP_BY), "group_wait": route.group_wait,
                  "group_interval": route.group_interval, "repeat_interval": route.repeat_interval},
        "receivers": [receiver],
    }
