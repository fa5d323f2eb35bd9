"""What ``roost monitor render``/``up`` set up on this machine, so landings keep it in step
(``<roost home>/monitor/monitor.json``, or ``ROOST_MONITOR_STATE``). Holds no secret: whether the
gateway is scraped with its metrics token is recorded, the token is only in the rendered folder."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from roost.errors import UserError
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
    gateway_token: bool = Field(default=False, description="The gateway is scraped with its metrics token "
                                "(ROOST_GATEWAY_METRICS_TOKEN where render/up ran); re-renders without the "
                                "variable, as landings do, keep the token file written then.")

    def options(self) -> RenderOptions:
        """What to render; the gateway's metrics token is ``ROOST_GATEWAY_METRICS_TOKEN`` when set here."""
        return RenderOptions(host=self.host, gateway=self.gateway,
                             prometheus_url=self.prometheus_url or "http://127.0.0.1:9090",
                             scrape=ScrapeSettings(self.scrape_interval, self.evaluation_interval),
                             rules=RuleSettings(**self.rules),  # type: ignore[arg-type]
                             gateway_token=gateway_token_from_env(), keep_gateway_token=self.gateway_token)


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
