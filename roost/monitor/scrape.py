"""``prometheus.yml``: the ``vllm`` job over every kept server on the host and the ``llm-gateway`` job
(the recipe's two jobs), reading the rule file beside it. With a gateway metrics token the gateway
job sends it as a bearer token read from :data:`GATEWAY_TOKEN_FILE` beside the config (never from
the config itself: ``roost.monitor.render`` writes that file). Firing and resolved alerts go to the
Alertmanager at ``alertmanager`` (``alerting: alertmanagers:``), which routes them to Slack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roost.monitor import queries as q
from roost.monitor.targets import Targets

RULES_FILE = "rules.yml"
CONFIG_FILE = "prometheus.yml"
GATEWAY_TOKEN_FILE = "gateway-metrics-token"
"""The gateway's metrics token, beside ``prometheus.yml``. Named relative to it: Prometheus resolves a
relative ``credentials_file`` against the config file's folder, so the one rendered config reads
``/etc/prometheus/gateway-metrics-token`` in ``roost monitor up``'s container (the folder mounted
there) and the rendered file itself for a Prometheus run on the host."""


@dataclass(frozen=True)
class ScrapeSettings:
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"


def prometheus_config(targets: Targets, settings: ScrapeSettings, *, gateway_token: bool = False,
                      alertmanager: str = "") -> dict[str, Any]:
    """The configuration document. Each vLLM target carries the roost host and the landing run that
    started it as labels (vLLM's own series carry ``model_name``). ``gateway_token``: the gateway job
    authenticates with the token in :data:`GATEWAY_TOKEN_FILE`. ``alertmanager`` (HOST:PORT): where
    alerts are sent ("": nowhere)."""
    vllm = [{"targets": [t.address], "labels": {k: v for k, v in (("roost_host", t.roost_host),
                                                                  ("landing_run_id", t.run_id)) if v}}
            for t in targets.vllm]
    gateway: dict[str, Any] = {"job_name": q.GATEWAY_JOB, "metrics_path": "/metrics"}
    if gateway_token:
        gateway["authorization"] = {"type": "Bearer", "credentials_file": GATEWAY_TOKEN_FILE}
    gateway["static_configs"] = [{"targets": [targets.gateway]}]
    doc: dict[str, Any] = {
        "global": {"scrape_interval": settings.scrape_interval, "evaluation_interval": settings.evaluation_interval},
    }
    if alertmanager:
        doc["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    doc["rule_files"] = [RULES_FILE]
    doc["scrape_configs"] = [{"job_name": q.VLLM_JOB, "metrics_path": "/metrics", "static_configs": vllm}, gateway]
    return doc


def vllm_addresses(config: dict[str, Any]) -> list[str]:
    """The ``vllm`` job's targets in a configuration document (rendered, or as Prometheus loaded it)."""
    for job in config.get("scrape_configs") or []:
        if job.get("job_name") == q.VLLM_JOB:
            return sorted(t for sc in job.get("static_configs") or [] for t in sc.get("targets") or [])
    return []
