"""``roost monitor render``: every monitoring file for a host, written atomically into one folder.

Layout (the folders ``roost monitor up`` mounts)::

    DIR/prometheus/prometheus.yml        scrape jobs vllm + llm-gateway
    DIR/prometheus/rules.yml             alert rules
    DIR/grafana/provisioning/datasources/roost.yml
    DIR/grafana/provisioning/dashboards/roost.yml
    DIR/grafana/dashboards/vllm-command-center.json

A file whose content is unchanged is not rewritten (Prometheus and Grafana see no change).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from roost.errors import UserError
from roost.gateway.registry import Registration
from roost.monitor import dashboard, grafana, rules, scrape
from roost.monitor.targets import DecodeFloor, ScrapeTarget, Targets, address_of, decode_floor, kept_servers
from roost.store.atomic import atomic_write_text

log = logging.getLogger(__name__)

PROMETHEUS_DIR = "prometheus"
DASHBOARD_FILE = "grafana/dashboards/vllm-command-center.json"
DATASOURCES_FILE = "grafana/provisioning/datasources/roost.yml"
PROVIDERS_FILE = "grafana/provisioning/dashboards/roost.yml"


@dataclass
class RenderOptions:
    host: str | None = None
    gateway: str = "127.0.0.1:8080"
    prometheus_url: str = "http://127.0.0.1:9090"  # as Grafana reaches it
    scrape: scrape.ScrapeSettings = field(default_factory=scrape.ScrapeSettings)
    rules: rules.RuleSettings = field(default_factory=rules.RuleSettings)


@dataclass
class Rendered:
    out: Path
    targets: Targets
    changed: list[str]

    def to_json(self) -> dict[str, object]:
        return {"out": str(self.out), "vllm_targets": [t.address for t in self.targets.vllm],
                "gateway_target": self.targets.gateway,
                "decode_floors": {f.model_name: round(f.tok_s, 3) for f in self.targets.floors},
                "changed": self.changed}


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
    files = {
        f"{PROMETHEUS_DIR}/{scrape.CONFIG_FILE}": _dump_yaml(scrape.prometheus_config(targets, options.scrape)),
        f"{PROMETHEUS_DIR}/{scrape.RULES_FILE}": _dump_yaml(rules.rules(options.rules, targets.floors, options.scrape.scrape_interval)),
        DASHBOARD_FILE: json.dumps(dashboard.dashboard(), indent=2) + "\n",
        DATASOURCES_FILE: _dump_yaml(grafana.datasources(options.prometheus_url)),
        PROVIDERS_FILE: _dump_yaml(grafana.dashboard_providers()),
    }
    changed = []
    try:
        for rel, text in files.items():
            path = out / rel
            if path.is_file() and path.read_text() == text:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text, overwrite=True)
            changed.append(rel)
    except PermissionError as exc:
        raise UserError(f"cannot write the monitoring files under {out}: {exc.strerror}") from None
    return Rendered(out, targets, changed)
