"""A Prometheus server's HTTP API as roost uses it: reload, the configuration it has loaded, what it
scrapes, what fires, and instant queries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import yaml

from roost.errors import RoostError


class PrometheusError(RoostError):
    """Prometheus could not be reached or refused a request."""


@dataclass(frozen=True)
class TargetState:
    job: str
    address: str
    health: str  # up, down, unknown
    last_error: str


@dataclass(frozen=True)
class AlertState:
    name: str
    state: str  # pending, firing
    labels: dict[str, str]
    summary: str


class PrometheusAPI:
    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, **params: str) -> Any:
        try:
            r = httpx.get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"Prometheus at {self.url} is not answering ({type(exc).__name__})") from None
        if r.status_code != 200:
            raise PrometheusError(f"Prometheus at {self.url} answered {path} with HTTP {r.status_code}: {r.text[:200]}")
        body = r.json()
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.url}: {body.get('error', body)}")
        return body["data"]

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=self.timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def reload(self) -> None:
        """POST ``/-/reload`` (needs ``--web.enable-lifecycle``)."""
        try:
            r = httpx.post(f"{self.url}/-/reload", timeout=max(self.timeout_s, 30.0))
        except httpx.HTTPError as exc:
            raise PrometheusError(f"Prometheus at {self.url} is not answering ({type(exc).__name__})") from None
        if r.status_code in (403, 404):
            raise PrometheusError(f"Prometheus at {self.url} refuses /-/reload: start it with --web.enable-lifecycle "
                                  "(roost monitor up does), or restart it after each change")
        if r.status_code != 200:
            raise PrometheusError(f"Prometheus at {self.url} failed to reload: {r.text.strip()[:300]}")

    def loaded_config(self) -> dict[str, Any]:
        """The configuration Prometheus runs with now (``/api/v1/status/config``)."""
        data = self._get("/api/v1/status/config")
        doc = yaml.safe_load(data.get("yaml") or "") or {}
        return doc if isinstance(doc, dict) else {}

    def targets(self) -> list[TargetState]:
        data = self._get("/api/v1/targets", state="active")
        return [TargetState(job=t.get("labels", {}).get("job", ""), address=t.get("labels", {}).get("instance", ""),
                            health=t.get("health", "unknown"), last_error=t.get("lastError", ""))
                for t in data.get("activeTargets") or []]

    def alerts(self) -> list[AlertState]:
        data = self._get("/api/v1/alerts")
        return [AlertState(name=a.get("labels", {}).get("alertname", ""), state=a.get("state", ""),
                           labels=dict(a.get("labels") or {}), summary=(a.get("annotations") or {}).get("summary", ""))
                for a in data.get("alerts") or []]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
        data = self._get("/api/v1/query", query=expr)
        result = data.get("result")
        return list(result) if isinstance(result, list) else []
