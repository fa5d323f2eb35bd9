"""Grafana file provisioning: the Prometheus data source (the uid the dashboard's panels name) and
a dashboard provider reading the rendered dashboard folder."""

from __future__ import annotations

from typing import Any

from roost.monitor.dashboard import DATASOURCE_UID

DASHBOARDS_PATH = "/var/lib/grafana/dashboards"
"""Where the container sees the rendered ``grafana/dashboards`` folder."""


def datasources(prometheus_url: str) -> dict[str, Any]:
    return {"apiVersion": 1, "datasources": [{
        "name": "Prometheus (roost)", "type": "prometheus", "uid": DATASOURCE_UID, "access": "proxy",
        "url": prometheus_url, "isDefault": True, "editable": False,
        "jsonData": {"timeInterval": "15s"}}]}


def dashboard_providers() -> dict[str, Any]:
    return {"apiVersion": 1, "providers": [{
        "name": "roost", "orgId": 1, "folder": "roost", "type": "file", "disableDeletion": True,
        "allowUiUpdates": False, "updateIntervalSeconds": 30, "options": {"path": DASHBOARDS_PATH}}]}
