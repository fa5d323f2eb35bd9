"""What ``roost monitor render``/``up`` set up on this machine, so landings keep it in step
(``<roost home>/monitor/monitor.json``, or ``ROOST_MONITOR_STATE``). Holds no secret: whether the
gateway is scraped with its metrics token is recorded, the token is only in the rendered folder; so
is which Slack receiver Alertmanager sends to (and a bot's channel and API URL), never the webhook
URL or the bot token."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, ValidationError

from roost.errors import UserError
from roost.monitor.alerting import Receiver, RouteSettings, SlackSettings
from roost.monitor.render import RenderOptions, gateway_token_from_env
from roost.monitor.rules import RuleSettings
from roost.monitor.scrape import ScrapeSettings
from roost.settings import environment, roost_home
from roost.store.atomic import atomic_write_text


class MonitorState(BaseModel):
    out: str = Field(description="The folder the monitoring files are rendered into.")
    host: str | None = Field(default=None, description="Only this roost host's kept servers (None: every one).")
    gateway: str = "127.0.0.1:8080"
    prometheus_url: str = Field(default="", description="Where roost reaches Prometheus ('' when none runs).")
    grafana_url: str = ""
    prometheus_container: str = Field(default="", description="Its container, when roost monitor up started it.")
    grafana_container: str = ""
    docker_url: str = ""
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"
    rules: dict[str, object] = Field(default_factory=dict, description="RuleSettings fields that differ.")
    alertmanager: str = Field(default="127.0.0.1:9093", description="Where Prometheus sends alerts (HOST:PORT).")
    alertmanager_url: str = Field(default="", description="Where roost reaches Alertmanager ('' : http://<alertmanager>).")
    alertmanager_container: str = ""
    alert_receiver: Receiver = Field(default="none", description="Where Alertmanager sends alerts; the secret of "
                                     "a Slack receiver is only in the rendered folder.")
    slack_channel: str = ""
    slack_api_url: str = Field(default="", description="chat.postMessage's URL, for a bot token.")
    route: dict[str, object] = Field(default_factory=dict, description="RouteSettings fields that differ.")
    gateway_token: bool = Field(default=False, description="The gateway is scraped with its metrics token "
                                "(ROOST_GATEWAY_METRICS_TOKEN where render/up ran); re-renders without the "
                                "variable, as landings do, keep the token file written then.")

    def options(self, slack_secret: SecretStr | None = None) -> RenderOptions:
        """What to render; the gateway's metrics token is ``ROOST_GATEWAY_METRICS_TOKEN`` when set here; a
        Slack receiver writes ``slack_secret`` (``roost monitor render``/``up``, from the roost-slack block)
        or keeps the secret file written by the render that set it up (a landing's re-render)."""
        return RenderOptions(host=self.host, gateway=self.gateway,
                             prometheus_url=self.prometheus_url or "http://127.0.0.1:9090",
                             scrape=ScrapeSettings(self.scrape_interval, self.evaluation_interval),
                             rules=RuleSettings(**self.rules),  # type: ignore[arg-type]
                             gateway_token=gateway_token_from_env(), keep_gateway_token=self.gateway_token,
                             alertmanager=self.alertmanager,
                             slack=SlackSettings(self.alert_receiver, self.slack_channel, self.slack_api_url,
                                                 slack_secret),
                             route=RouteSettings(**self.route))  # type: ignore[arg-type]

    def alertmanager_api_url(self) -> str:
        return self.alertmanager_url or f"http://{self.alertmanager}"


def state_path() -> Path:
    return Path(environment().roost_monitor_state or roost_home() / "monitor" / "monitor.json")


def load_state() -> MonitorState | None:
    path = state_path()
    if not path.is_file():
        return None
    try:
        return MonitorState.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise UserError(f"{path} is not a roost monitor state file ({type(exc).__name__}): remove it and run "
                        "roost monitor render again") from None


def save_state(state: MonitorState) -> Path:
    return atomic_write_text(state_path(), state.model_dump_json(indent=2) + "\n", overwrite=True)


def forget_state() -> bool:
    try:
        state_path().unlink()
    except FileNotFoundError:
        return False
    return True
