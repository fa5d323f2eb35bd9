"""``roost monitor render``: every monitoring file for a host, written atomically into one folder.

Layout (the folders ``roost monitor up`` mounts)::

    DIR/prometheus/prometheus.yml        scrape jobs vllm + llm-gateway
    DIR/prometheus/rules.yml             alert rules
    DIR/prometheus/gateway-metrics-token the gateway's metrics token (only when one is configured)
    DIR/alertmanager/alertmanager.yml    every alert routed to Slack, or to nothing (roost.monitor.alerting)
    DIR/alertmanager/slack-webhook-url   the Slack webhook URL, or slack-bot-token the bot token (with Slack)
    DIR/grafana/provisioning/datasources/roost.yml
    DIR/grafana/provisioning/dashboards/roost.yml
    DIR/grafana/dashboards/vllm-command-center.json

A file whose content is unchanged is not rewritten (Prometheus and Grafana see no change).

The gateway's metrics token (``ROOST_GATEWAY_METRICS_TOKEN`` where ``roost monitor render``/``up``
run) goes into its own file, never into ``prometheus.yml``, the output or a log line. A re-render
without the variable (a landing's) keeps the file written last time while the recorded state says a
token is in use (:attr:`RenderOptions.keep_gateway_token`). The Slack secret Alertmanager sends with
(webhook URL or bot token) is kept the same way: its own file, DIR private; a re-render given the
receiver without the secret (a landing's, from the monitor state) keeps the file written last time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import SecretStr

from roost.errors import UserError
from roost.gateway.registry import Registration
from roost.monitor import alerting, dashboard, grafana, rules, scrape
from roost.monitor.targets import DecodeFloor, ScrapeTarget, Targets, address_of, decode_floor, kept_servers
from roost.settings import environment
from roost.store.atomic import atomic_write_text

log = logging.getLogger(__name__)

PROMETHEUS_DIR = "prometheus"
DASHBOARD_FILE = "grafana/dashboards/vllm-command-center.json"
DATASOURCES_FILE = "grafana/provisioning/datasources/roost.yml"
PROVIDERS_FILE = "grafana/provisioning/dashboards/roost.yml"
ALERTMANAGER_DIR = "alertmanager"


@dataclass
class RenderOptions:
    host: str | None = None
    gateway: str = "127.0.0.1:8080"
    prometheus_url: str = "http://127.0.0.1:9090"  # as Grafana reaches it
    scrape: scrape.ScrapeSettings = field(default_factory=scrape.ScrapeSettings)
    rules: rules.RuleSettings = field(default_factory=rules.RuleSettings)
    gateway_token: SecretStr | None = field(default=None, repr=False)
    """The gateway's metrics token: written beside ``prometheus.yml`` and sent by the gateway job."""
    keep_gateway_token: bool = False
    """No token given, but one is in use: the gateway job keeps sending the file written earlier."""
    alertmanager: str = "127.0.0.1:9093"
    """Where Prometheus sends alerts (HOST:PORT)."""
    slack: alerting.SlackSettings = field(default_factory=alerting.SlackSettings)
    route: alerting.RouteSettings = field(default_factory=alerting.RouteSettings)


@dataclass
class Rendered:
    out: Path
    targets: Targets
    changed: list[str]
    gateway_token: bool = False
    alert_receiver: alerting.Receiver = "none"
    alertmanager: str = ""

    def to_json(self) -> dict[str, object]:
        return {"out": str(self.out), "vllm_targets": [t.address for t in self.targets.vllm],
                "gateway_target": self.targets.gateway,
                "decode_floors": {f.model_name: round(f.tok_s, 3) for f in self.targets.floors},
                "changed": self.changed, "gateway_token": self.gateway_token,
                "alert_receiver": self.alert_receiver, "alertmanager_target": self.alertmanager}


def gateway_token_from_env() -> SecretStr | None:
    """``ROOST_GATEWAY_METRICS_TOKEN`` as the gateway checks it (a UserError naming the variable, never
    its value, when it is not a usable token); None when unset."""
    from roost.gateway.access import TOKEN_ENV, check_token

    value = environment().roost_gateway_metrics_token
    return check_token(value, TOKEN_ENV) if value else None


def _private_folder(out: Path) -> None:
    """Make ``out`` (the folder above the mounted ``prometheus/`` and ``alertmanager/``) reachable by
    its owner only.

    Why a secret file (the gateway's metrics token, the Slack webhook URL or bot token) is 0644 and
    this folder 0700, not the file 0600: the official Prometheus and Alertmanager images run as
    ``nobody`` (65534) and roost runs as an ordinary user, who cannot chown a file to
    65534; a 0600 file of that user is unreadable to Prometheus in the container. Inside the
    container only the mounted folder's own mode counts (``/etc/prometheus`` and ``/etc/alertmanager``
    are the bind mounts' roots; its host ancestors are never looked up there), so a world-readable file in it is readable
    by whatever user the image runs as, while on the host nobody but the owner (and root) gets past
    ``out``. A Prometheus or Alertmanager run on the host by another user needs to be given access.
    """
    try:
        mode = out.stat().st_mode
        if mode & 0o077:
            os.chmod(out, stat.S_IMODE(mode) & 0o700)
    except PermissionError as exc:
        raise UserError(f"cannot make {out} private for its secret files ({exc.strerror}): give --out a "
                        "folder of your own") from None


def _write_token(path: Path, token: SecretStr) -> bool:
    """Write the token file atomically (mode 0644, in the private folder above); False when unchanged."""
    data = token.get_secret_value().encode() + b"\n"
    with contextlib.suppress(OSError):
        if path.is_file() and path.read_bytes() == data and stat.S_IMODE(path.stat().st_mode) == 0o644:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # 0600 while written
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return True


def _gateway_token(out: Path, options: RenderOptions) -> tuple[bool, list[str]]:
    """Write or keep the token file: (does the gateway job send a token, files changed). A token file
    no longer wanted is removed by :func:`render` once the config that read it is replaced."""
    rel = f"{PROMETHEUS_DIR}/{scrape.GATEWAY_TOKEN_FILE}"
    path = out / rel
    if options.gateway_token is not None:
        out.mkdir(parents=True, exist_ok=True)
        _private_folder(out)
        return True, [rel] if _write_token(path, options.gateway_token) else []
    if options.keep_gateway_token:
        if not path.is_file():
            log.warning("the gateway's metrics token was set up but %s is gone: the gateway's scrape will fail until "
                        "roost monitor render runs with ROOST_GATEWAY_METRICS_TOKEN set", path)
        return True, []
    return False, []


def _alert_secret(out: Path, slack: alerting.SlackSettings) -> list[str]:
    """Write or keep the Slack secret file Alertmanager reads; the files changed. The other receiver's
    file, or both without Slack, is removed by :func:`render` once the config that read it is replaced."""
    name = slack.secret_file
    if name is None:
        return []
    rel = f"{ALERTMANAGER_DIR}/{name}"
    if slack.secret is not None:
        out.mkdir(parents=True, exist_ok=True)
        _private_folder(out)
        secret = SecretStr(slack.secret.get_secret_value().strip())
        return [rel] if _write_token(out / rel, secret) else []
    if not (out / rel).is_file():
        log.warning("Slack alerts were set up (%s) but %s is gone: Alertmanager cannot send to Slack until roost "
                    "monitor render runs where the roost-slack block is readable", slack.receiver, out / rel)
    return []


def _floor_for(run_id: str, results: Path | None) -> DecodeFloor | None:
    from roost.store import load_record

    if not run_id:
        return None
    try:
        return decode_floor(load_record(run_id, results))
    except (UserError, OSError, ValueError) as exc:  # a landing not in this store (another host's)
        log.info("no decode floor for run %s: %s", run_id, exc)
        return None


def _floor(r: Registration, results: Path | None) -> DecodeFloor | None:
    """The decode rate the registration carries (landings since roost.monitor), else its landing's
    record in the results store."""
    if r.decode_tok_s:
        return DecodeFloor(r.served_model_name, r.decode_tok_s, r.decode_concurrency, r.run_id)
    return _floor_for(r.run_id, results)


def gather(options: RenderOptions, results: Path | None = None) -> Targets:
    """The host's kept servers (landing registry) and their landings' decode rates."""
    servers = kept_servers(options.host)
    floors = [f for f in (_floor(r, results) for r in servers) if f is not None]
    unique = {f.model_name: f for f in floors}  # one rule per model (the latest registration wins)
    return Targets(vllm=[ScrapeTarget(address_of(r.base_url), r.served_model_name, r.host, r.run_id) for r in servers],
                   gateway=options.gateway, floors=list(unique.values()))


def _dump_yaml(doc: object) -> str:
    body: str = yaml.safe_dump(doc, sort_keys=False, width=4096)
    return "# Written by roost monitor render; re-rendered when a landing keeps or retires a server.\n" + body


def render(out: Path, options: RenderOptions, results: Path | None = None, targets: Targets | None = None) -> Rendered:
    """Write every file under ``out``; returns what was written (relative paths of changed files)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file: give a folder for the monitoring files")
    targets = targets if targets is not None else gather(options, results)
    try:
        # the token first: the config that sends it is never there without it
        token, changed = _gateway_token(out, options)
        changed += _alert_secret(out, options.slack)
    except PermissionError as exc:
        raise UserError(f"cannot write the secret files under {out}: {exc.strerror}") from None
    files = {
        f"{PROMETHEUS_DIR}/{scrape.CONFIG_FILE}": _dump_yaml(scrape.prometheus_config(
            targets, options.scrape, gateway_token=token, alertmanager=options.alertmanager)),
        f"{PROMETHEUS_DIR}/{scrape.RULES_FILE}": _dump_yaml(rules.rules(options.rules, targets.floors, options.scrape.scrape_interval)),
        DASHBOARD_FILE: json.dumps(dashboard.dashboard(), indent=2) + "\n",
        DATASOURCES_FILE: _dump_yaml(grafana.datasources(options.prometheus_url)),
        PROVIDERS_FILE: _dump_yaml(grafana.dashboard_providers()),
        f"{ALERTMANAGER_DIR}/{alerting.CONFIG_FILE}": _dump_yaml(alerting.alertmanager_config(options.slack,
                                                                                         options.route)),
    }
    try:
        for rel, text in files.items():
            path = out / rel
            if path.is_file() and path.read_text() == text:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text, overwrite=True)
            changed.append(rel)
        stale = out / PROMETHEUS_DIR / scrape.GATEWAY_TOKEN_FILE
        if not token and stale.exists():  # after the config that read it is gone
            stale.unlink()
            changed.append(f"{PROMETHEUS_DIR}/{scrape.GATEWAY_TOKEN_FILE}")
        for name in alerting.SECRET_FILES:  # a receiver no longer used: its secret goes
            if name != options.slack.secret_file and (out / ALERTMANAGER_DIR / name).exists():
                (out / ALERTMANAGER_DIR / name).unlink()
                changed.append(f"{ALERTMANAGER_DIR}/{name}")
    except PermissionError as exc:
        raise UserError(f"cannot write the monitoring files under {out}: {exc.strerror}") from None
    return Rendered(out, targets, changed, token, options.slack.receiver, options.alertmanager)
