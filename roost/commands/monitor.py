"""``roost monitor``: Prometheus, alert rules and the Grafana dashboard for what roost keeps serving
(``roost/monitor/``).

- ``roost monitor render --out DIR [--host H] [--gateway ADDR] [--prometheus URL] [--rule K=V ...]
  [--alertmanager ADDR] [--route K=V ...] [--no-slack]``: writes ``prometheus/prometheus.yml`` (jobs
  ``vllm``, every server landed and kept on the host, and ``llm-gateway``; alerts sent to the
  Alertmanager at ADDR, default 127.0.0.1:9093), ``prometheus/rules.yml``,
  ``alertmanager/alertmanager.yml``, ``grafana/dashboards/vllm-command-center.json`` and Grafana's
  provisioning files, and records DIR so landings keep it in step (``--no-sync`` not). JSON: ``out,
  vllm_targets, gateway_target, decode_floors, changed, gateway_token, alert_receiver,
  alertmanager_target`` (sync's keys too without ``--no-sync``). With ``ROOST_GATEWAY_METRICS_TOKEN``
  set, the ``llm-gateway`` job sends it as a bearer token read from
  ``prometheus/gateway-metrics-token`` (DIR made private to its owner); landings' re-renders keep it.
  Alerts go to Slack per the ``roost-slack`` block (read when a Prefect API is configured):
  ``alert_receiver`` ``slack-bot`` (its token in ``alertmanager/slack-bot-token``), ``slack-webhook``
  (the URL in ``alertmanager/slack-webhook-url``) or ``none`` (a receiver that sends nothing);
  landings' re-renders keep the receiver and its secret file. ``--route`` sets ``group_wait``,
  ``group_interval``, ``repeat_interval``.
- ``roost monitor up [--out DIR] [--mount dir|file] [--no-grafana] [--no-alertmanager] ...``:
  Prometheus, Alertmanager and Grafana containers (official images) with the rendered files mounted.
  JSON: ``prometheus, prometheus_container, grafana, grafana_container, out, mount, alertmanager,
  alertmanager_container, alert_receiver``.
- ``roost monitor sync [--json]``: re-render and reload as a landing does (JSON adds ``reload``,
  ``loaded_targets``, ``note``, ``alertmanager_reload``).
- ``roost monitor status [--prometheus URL] [--alertmanager URL] [--json]``: what is scraped, what
  fires and what Alertmanager holds (JSON: ``prometheus, targets[{job, address, health, last_error}],
  alerts[{name, state, labels, summary}], stale, alertmanager{url, alerts[{name, state, labels,
  summary, starts_at, receivers}], error}``; an Alertmanager not answering is ``error``, not a failure).
- ``roost monitor down``: removes the containers (data volumes stay).

Exit 0 success, 2 unusable input (one line), 1 Prometheus or Docker failing at run time.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from roost.commands._common import echo_json, user_errors
from roost.errors import UserError
from roost.settings import roost_home

if TYPE_CHECKING:
    from blocks.slack import SlackNotifier
    from roost.monitor.alerting import SlackSettings
    from roost.monitor.state import MonitorState

DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
ADDRESS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")

OutOpt = Annotated[Path | None, typer.Option("--out", help="Folder for the files (default: the one recorded, else "
                                             "<roost home>/monitor/files).")]
HostOpt = Annotated[str | None, typer.Option("--host", help="Only this roost host's kept servers (default: all).")]
GatewayOpt = Annotated[str, typer.Option("--gateway", help="The gateway's address as Prometheus scrapes it.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
AlertmanagerOpt = Annotated[str, typer.Option("--alertmanager", help="Alertmanager's address (HOST:PORT): where "
                                              "Prometheus sends alerts and roost monitor up's container listens.")]
RouteOpt = Annotated[list[str] | None, typer.Option("--route", help="Alert grouping, NAME=VALUE (group_wait, "
                                                    "group_interval, repeat_interval; e.g. group_wait=10s); repeatable.")]
NoSlackOpt = Annotated[bool, typer.Option("--no-slack", help="Route alerts nowhere, even with a roost-slack block.")]


def _duration(flag: str, value: str, *, positive: bool = False) -> str:
    if not value or not DURATION.match(value):
        raise UserError(f"{flag} {value!r} is not a Prometheus duration: use e.g. 15s, 5m, 1h")
    if positive and not any(c in "123456789" for c in value):
        raise UserError(f"{flag} {value!r}: give a duration above zero, e.g. 15s")
    return value


def _rule_settings(pairs: list[str]) -> dict[str, object]:
    from roost.monitor.rules import RuleSettings

    fields = {f.name: f for f in dataclasses.fields(RuleSettings)}
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in fields:
            raise UserError(f"--rule {pair!r}: use NAME=VALUE with NAME one of {', '.join(fields)}")
        if fields[name].type in ("float", float):
            try:
                number = float(value)
            except ValueError:
                raise UserError(f"--rule {name}={value!r}: give a number") from None
            if not 0 <= number <= (1e9 if name == "bypass_slack" else 1):
                raise UserError(f"--rule {name}={value}: out of range (a fraction between 0 and 1)")
            out[name] = number
        else:
            out[name] = _duration(f"--rule {name}", value)
    return out


def _route_settings(pairs: list[str]) -> dict[str, object]:
    from roost.monitor.alerting import RouteSettings

    names = [f.name for f in dataclasses.fields(RouteSettings)]
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in names:
            raise UserError(f"--route {pair!r}: use NAME=VALUE with NAME one of {', '.join(names)}")
        out[name] = _duration(f"--route {name}", value, positive=name != "group_wait")
    return RouteSettings(**out).differing()  # type: ignore[arg-type]


def slack_settings(notifier: SlackNotifier) -> SlackSettings:
    """The Alertmanager receiver of a SlackNotifier block: its bot token (+ channel, ``chat.postMessage``
    under its ``base_url``), else its webhook URL."""
    from roost.monitor.alerting import SlackSettings

    if notifier.transport == "bot" and notifier.bot_token is not None:
        return SlackSettings("slack-bot", notifier.channel.strip(), notifier.base_url.rstrip("/") + "/chat.postMessage",
                             notifier.bot_token)
    return SlackSettings("slack-webhook", secret=notifier.webhook_url)


def _slack(no_slack: bool, old: MonitorState | None) -> SlackSettings:
    """Where alerts go: the ``roost-slack`` block when a Prefect API is configured here. Without one, or
    with the Prefect API not answering, the receiver recorded earlier stays (its secret file with it)."""
    import logging

    from roost.commands.doctor import prefect_api_url
    from roost.monitor.alerting import SlackSettings

    if no_slack:
        return SlackSettings()
    kept = SlackSettings(old.alert_receiver, old.slack_channel, old.slack_api_url) if old else SlackSettings()
    if not prefect_api_url():
        return kept
    from pydantic import ValidationError

    from blocks.resolve import validation_problems
    from blocks.slack import SLACK_BLOCK, SlackNotifier

    try:
        notifier = SlackNotifier.load(SLACK_BLOCK)
    except ValueError:  # no such block
        return SlackSettings()
    except Exception as exc:  # Prefect wraps a saved document that fails validation; else its API not answering
        if isinstance(exc, RuntimeError) and isinstance(exc.__cause__, ValidationError):
            raise UserError(f"the {SLACK_BLOCK} block is invalid ({validation_problems(exc.__cause__)}): fix it in "
                            "the Prefect UI (Blocks), or pass --no-slack") from None
        logging.getLogger(__name__).warning("could not read the %s block (%s): alerts keep going to %s", SLACK_BLOCK,
                                            type(exc).__name__, kept.receiver)
        return kept
    return slack_settings(notifier) if isinstance(notifier, SlackNotifier) else SlackSettings()


def _state_for(out: Path | None, host: str | None, gateway: str, prometheus: str | None, rules: list[str],
               scrape_interval: str, evaluation_interval: str, alertmanager: str = "127.0.0.1:9093",
               routes: list[str] | None = None, no_slack: bool = False) -> tuple[MonitorState, SlackSettings]:
    """The state to save and where alerts go (the Slack secret, when given, only in the latter)."""
    from roost.monitor.render import gateway_token_from_env
    from roost.monitor.state import MonitorState, load_state

    if not ADDRESS.match(gateway):
        raise UserError(f"--gateway {gateway!r}: give HOST:PORT as Prometheus reaches the gateway, e.g. 127.0.0.1:8080")
    if not ADDRESS.match(alertmanager):
        raise UserError(f"--alertmanager {alertmanager!r}: give HOST:PORT, e.g. 127.0.0.1:9093")
    if prometheus is not None and not re.match(r"^https?://[^/\s]+", prometheus):
        raise UserError(f"--prometheus {prometheus!r}: give Prometheus's URL, e.g. http://127.0.0.1:9090")
    old = load_state()
    folder = out or (Path(old.out) if old else roost_home() / "monitor" / "files")
    state = MonitorState(out=str(folder.expanduser().resolve()), host=host, gateway=gateway,
                         prometheus_url=(prometheus if prometheus is not None else (old.prometheus_url if old else "")),
                         scrape_interval=_duration("--scrape-interval", scrape_interval, positive=True),
                         evaluation_interval=_duration("--evaluation-interval", evaluation_interval, positive=True),
                         rules=_rule_settings(rules), route=_route_settings(routes or []), alertmanager=alertmanager,
                         gateway_token=gateway_token_from_env() is not None)  # as configured where this runs
    slack = _slack(no_slack, old)
    state.alert_receiver, state.slack_channel, state.slack_api_url = slack.receiver, slack.channel, slack.api_url
    if old is not None and Path(old.out) == Path(state.out):  # keep what up started
        state.prometheus_container, state.grafana_container = old.prometheus_container, old.grafana_container
        state.grafana_url, state.docker_url = old.grafana_url, old.docker_url
        if old.alertmanager == alertmanager:
            state.alertmanager_container, state.alertmanager_url = old.alertmanager_container, old.alertmanager_url
        if prometheus is None:
            state.prometheus_url = old.prometheus_url
    return state, slack


def _alerts_line(receiver: object) -> str:
    return {"slack-webhook": "alerts go to Slack (incoming webhook)", "slack-bot": "alerts go to Slack (bot token)"}.get(
        str(receiver), "alerts go nowhere (no roost-slack block, or --no-slack)")


def render_cmd(
    out: OutOpt = None,
    host: HostOpt = None,
    gateway: GatewayOpt = "127.0.0.1:8080",
    prometheus: Annotated[str | None, typer.Option("--prometheus", help="A running Prometheus to reload on changes "
                                                   "(needs --web.enable-lifecycle).")] = None,
    rule: Annotated[list[str] | None, typer.Option("--rule", help="An alert threshold, NAME=VALUE (e.g. "
                                                   "kv_threshold=0.9, bypass_window=10m); repeatable.")] = None,
    scrape_interval: Annotated[str, typer.Option("--scrape-interval")] = "15s",
    evaluation_interval: Annotated[str, typer.Option("--evaluation-interval")] = "15s",
    alertmanager: AlertmanagerOpt = "127.0.0.1:9093",
    route: RouteOpt = None,
    no_slack: NoSlackOpt = False,
    no_sync: Annotated[bool, typer.Option("--no-sync", help="Write the files only; landings will not update them.")] = False,
    as_json: JsonOpt = False,
) -> None:
    from roost.monitor.render import render
    from roost.monitor.state import save_state
    from roost.monitor.sync import sync

    state, slack = _state_for(out, host, gateway, prometheus, rule or [], scrape_interval, evaluation_interval,
                              alertmanager, route, no_slack)
    if no_sync:
        result: dict[str, object] = render(Path(state.out), state.options(slack.secret)).to_json()
    else:
        save_state(state)
        synced = sync(state, force_reload=bool(state.prometheus_url), slack_secret=slack.secret)
        assert synced is not None
        result = synced.to_json()
    if as_json:
        echo_json(result)
        return
    typer.echo(f"monitoring files in {result['out']}: {len(result['vllm_targets'])} vLLM target(s) "  # type: ignore[arg-type]
               f"{', '.join(result['vllm_targets']) or '(none kept yet)'}, gateway {result['gateway_target']}"  # type: ignore[arg-type]
               + (" (scraped with its metrics token)" if result.get("gateway_token") else ""))
    typer.echo(f"Alertmanager {result['alertmanager_target']}: {_alerts_line(result['alert_receiver'])}")
    if result.get("reload") not in (None, "none"):
        typer.echo(f"Prometheus: {result['reload']}{'; ' + str(result['note']) if result.get('note') else ''}")


def up_cmd(
    out: OutOpt = None,
    host: HostOpt = None,
    gateway: GatewayOpt = "127.0.0.1:8080",
    mount: Annotated[str, typer.Option("--mount", help="dir: mount the Prometheus folder (reloads work); file: "
                                       "mount prometheus.yml itself (changes restart the container).")] = "dir",
    prometheus_image: Annotated[str, typer.Option("--prometheus-image")] = "",
    grafana_image: Annotated[str, typer.Option("--grafana-image")] = "",
    no_grafana: Annotated[bool, typer.Option("--no-grafana", help="Do not start Grafana.")] = False,
    alertmanager_image: Annotated[str, typer.Option("--alertmanager-image")] = "",
    no_alertmanager: Annotated[bool, typer.Option("--no-alertmanager", help="Do not start Alertmanager.")] = False,
    alertmanager: AlertmanagerOpt = "127.0.0.1:9093",
    route: RouteOpt = None,
    no_slack: NoSlackOpt = False,
    listen: Annotated[str, typer.Option("--listen", help="Prometheus's listen address.")] = "127.0.0.1:9090",
    grafana_port: Annotated[int, typer.Option("--grafana-port", min=1, max=65535)] = 3000,
    docker_url: Annotated[str, typer.Option("--docker-url", help="The Docker engine (default: the local socket).")] = "",
    rule: Annotated[list[str] | None, typer.Option("--rule", help="An alert threshold, NAME=VALUE.")] = None,
    scrape_interval: Annotated[str, typer.Option("--scrape-interval")] = "15s",
    evaluation_interval: Annotated[str, typer.Option("--evaluation-interval")] = "15s",
    as_json: JsonOpt = False,
) -> None:
    from roost.monitor import containers
    from roost.serve.docker.images import DEFAULT_DOCKER_URL

    if mount not in ("dir", "file"):
        raise UserError(f"--mount {mount!r}: choose dir or file")
    if not ADDRESS.match(listen):
        raise UserError(f"--listen {listen!r}: give HOST:PORT, e.g. 127.0.0.1:9090")
    if not 0 < grafana_port < 65536:
        raise UserError(f"--grafana-port {grafana_port}: give a port between 1 and 65535")
    state, slack = _state_for(out, host, gateway, f"http://{listen}", rule or [], scrape_interval, evaluation_interval,
                              alertmanager, route, no_slack)
    state.docker_url = docker_url
    client = containers.engine(docker_url or DEFAULT_DOCKER_URL)
    opts = containers.UpOptions(prometheus_image=prometheus_image or containers.PROMETHEUS_IMAGE,
                                grafana_image=grafana_image or containers.GRAFANA_IMAGE, grafana=not no_grafana,
                                alertmanager_image=alertmanager_image or containers.ALERTMANAGER_IMAGE,
                                alertmanager=not no_alertmanager,
                                mount=mount, prometheus_listen=listen, grafana_port=grafana_port)  # type: ignore[arg-type]
    state = containers.up(client, state, opts, slack_secret=slack.secret)
    doc = {"prometheus": state.prometheus_url, "prometheus_container": state.prometheus_container,
           "grafana": state.grafana_url, "grafana_container": state.grafana_container, "out": state.out,
           "mount": mount, "alertmanager": state.alertmanager_url,
           "alertmanager_container": state.alertmanager_container, "alert_receiver": state.alert_receiver}
    if as_json:
        echo_json(doc)
        return
    typer.echo(f"Prometheus {state.prometheus_url} ({state.prometheus_container}, {mount} mount)"
               + (f"; Alertmanager {state.alertmanager_url} ({state.alertmanager_container})"
                  if state.alertmanager_url else "")
               + (f"; Grafana {state.grafana_url} ({state.grafana_container})" if state.grafana_url else ""))
    typer.echo(_alerts_line(state.alert_receiver))


def down_cmd(as_json: JsonOpt = False) -> None:
    from roost.monitor import containers
    from roost.monitor.state import load_state
    from roost.serve.docker.images import DEFAULT_DOCKER_URL

    state = load_state()
    if state is None or not (state.prometheus_container or state.grafana_container or state.alertmanager_container):
        raise UserError("roost monitor up has not started anything here")
    gone = containers.down(containers.engine(state.docker_url or DEFAULT_DOCKER_URL), state)
    if as_json:
        echo_json({"removed": gone})
        return
    typer.echo(f"removed {', '.join(gone) or 'nothing (already gone)'}; data volumes kept")


def sync_cmd(as_json: JsonOpt = False) -> None:
    from roost.monitor.sync import sync

    result = sync(force_reload=True)
    if result is None:
        raise UserError("no monitoring set up here: run roost monitor render --out DIR first")
    if as_json:
        echo_json(result.to_json())
        return
    typer.echo(f"{len(result.rendered.targets.vllm)} vLLM target(s); Prometheus: {result.method}"
               + (f" ({result.note})" if result.note else ""))


def _held(url: str) -> dict[str, object]:
    """What the Alertmanager at ``url`` holds, or why it could not be asked (never a traceback)."""
    from roost.monitor.alertmanager import AlertmanagerAPI, AlertmanagerError

    try:
        alerts = AlertmanagerAPI(url, timeout_s=5.0).alerts()
    except AlertmanagerError as exc:
        return {"url": url, "alerts": [], "error": str(exc)}
    return {"url": url, "alerts": [dataclasses.asdict(a) for a in alerts], "error": None}


def _echo_held(held: dict[str, Any]) -> None:
    if held["error"]:
        typer.echo(f"Alertmanager {held['url']}: {held['error']}")
        return
    typer.echo(f"Alertmanager {held['url']}: {len(held['alerts'])} alert(s) held")
    for a in held["alerts"]:
        where = ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items()) if k in ("model_name", "instance"))
        typer.echo(f"  {a['state']:<10} {a['name']}{' (' + where + ')' if where else ''}: {a['summary']}")


def status_cmd(
    prometheus: Annotated[str | None, typer.Option("--prometheus", help="Prometheus's URL (default: the one "
                                                   "recorded by render/up).")] = None,
    alertmanager: Annotated[str | None, typer.Option("--alertmanager", help="Alertmanager's URL (default: the one "
                                                     "recorded by render/up).")] = None,
    as_json: JsonOpt = False,
) -> None:
    from roost.monitor import scrape
    from roost.monitor.prometheus import PrometheusAPI
    from roost.monitor.state import load_state
    from roost.monitor.targets import address_of, kept_servers

    state = load_state()
    url = prometheus or (state.prometheus_url if state else "")
    if not url:
        raise UserError("no Prometheus known: pass --prometheus URL, or run roost monitor up")
    if not re.match(r"^https?://[^/\s]+", url):
        raise UserError(f"--prometheus {url!r}: give Prometheus's URL, e.g. http://127.0.0.1:9090")
    am_url = alertmanager or (state.alertmanager_api_url() if state else "http://127.0.0.1:9093")
    if not re.match(r"^https?://[^/\s]+", am_url):
        raise UserError(f"--alertmanager {am_url!r}: give Alertmanager's URL, e.g. http://127.0.0.1:9093")
    api = PrometheusAPI(url)
    targets = api.targets()
    alerts = api.alerts()
    loaded = scrape.vllm_addresses(api.loaded_config())
    kept = sorted(address_of(r.base_url) for r in kept_servers(state.host if state else None))
    stale = state is not None and loaded != kept
    held = _held(am_url)
    if as_json:
        echo_json({"prometheus": url, "targets": [dataclasses.asdict(t) for t in targets],
                   "alerts": [dataclasses.asdict(a) for a in alerts], "stale": stale, "alertmanager": held})
        return
    typer.echo(f"Prometheus {url}: {len(targets)} target(s)")
    for t in targets:
        typer.echo(f"  {t.job:<12} {t.address:<24} {t.health}{'  ' + t.last_error if t.last_error else ''}")
    firing = [a for a in alerts if a.state == "firing"]
    pending = [a for a in alerts if a.state == "pending"]
    typer.echo(f"alerts: {len(firing)} firing, {len(pending)} pending")
    for a in firing + pending:
        typer.echo(f"  {a.state:<8} {a.name}: {a.summary}")
    _echo_held(held)
    if stale:
        typer.echo(f"note: Prometheus scrapes {', '.join(loaded) or 'no vLLM server'} but roost keeps "
                   f"{', '.join(kept) or 'none'}: run roost monitor sync")


def register(app: typer.Typer) -> None:
    group = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                        help="Live monitoring: Prometheus, alert rules and the Grafana dashboard for kept servers.")
    group.command("render", help="Write prometheus.yml, alert rules and the Grafana dashboard.")(user_errors(render_cmd))
    group.command("up", help="Start Prometheus and Grafana as containers with the rendered files.")(user_errors(up_cmd))
    group.command("sync", help="Re-render and reload Prometheus (what a landing does).")(user_errors(sync_cmd))
    group.command("status", help="What Prometheus scrapes and what fires.")(user_errors(status_cmd))
    group.command("down", help="Remove the monitoring containers (data kept).")(user_errors(down_cmd))
    app.add_typer(group, name="monitor")
