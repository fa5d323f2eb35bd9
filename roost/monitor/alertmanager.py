"""An Alertmanager's HTTP API as roost uses it: ready, reload, and the alerts it holds (API v2).

Its answers are read as hostile: at most :data:`MAX_BODY` bytes within ``timeout_s`` in all (not per
read), a body that is not the documented shape is an :class:`AlertmanagerError`, at most
:data:`MAX_ALERTS` alerts are kept and every string is cut to :data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from roost.errors import RoostError
from roost.net import ReadCut, read_capped

MAX_BODY = 4 * 1024 * 1024
MAX_ALERTS = 500
MAX_LABELS = 64
MAX_TEXT = 512


class AlertmanagerError(RoostError):
    """Alertmanager could not be reached, or answered something unusable."""


@dataclass(frozen=True)
class HeldAlert:
    name: str
    state: str  # active, suppressed, unprocessed
    labels: dict[str, str]
    summary: str
    starts_at: str
    receivers: list[str]


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {_text(k): _text(v) for k, v in list(value.items())[:MAX_LABELS] if isinstance(k, str)}


def _alert(doc: Any) -> HeldAlert | None:
    if not isinstance(doc, dict):
        return None
    labels = _strings(doc.get("labels"))
    status = doc.get("status")
    receivers = doc.get("receivers")
    return HeldAlert(name=labels.get("alertname", ""),
                     state=_text(status.get("state")) if isinstance(status, dict) else "",
                     labels=labels, summary=_strings(doc.get("annotations")).get("summary", ""),
                     starts_at=_text(doc.get("startsAt")),
                     receivers=[_text(r.get("name")) for r in receivers[:MAX_LABELS] if isinstance(r, dict)]
                     if isinstance(receivers, list) else [])


class AlertmanagerAPI:
    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str) -> tuple[int, bytes]:
        """Status and body, the body at most ``MAX_BODY`` bytes, all within ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        try:
            with httpx.stream(method, f"{self.url}{path}", timeout=self.timeout_s) as r:
                return r.status_code, read_capped(r.iter_bytes(), MAX_BODY, deadline)
        except ReadCut as cut:
            if cut.too_big:
                raise AlertmanagerError(f"Alertmanager at {self.url} answered {path} with more than "
                                        f"{MAX_BODY // 1024 // 1024} MiB") from None
            raise AlertmanagerError(f"Alertmanager at {self.url} took over {self.timeout_s:g} s "
                                    f"to answer {path}") from None
        except httpx.HTTPError as exc:
            raise AlertmanagerError(f"Alertmanager at {self.url} is not answering ({type(exc).__name__})") from None

    def ready(self) -> bool:
        try:
            return self._request("GET", "/-/ready")[0] == 200
        except AlertmanagerError:
            return False

    def reload(self) -> None:
        """POST ``/-/reload``: read the rendered files again."""
        status, body = self._request("POST", "/-/reload")
        if status != 200:
            raise AlertmanagerError(f"Alertmanager at {self.url} failed to reload: "
                                    f"{body[:300].decode(errors='replace').strip()}")

    def alerts(self) -> list[HeldAlert]:
        """The alerts it holds (``/api/v2/alerts``: active, suppressed and unprocessed)."""
        status, body = self._request("GET", "/api/v2/alerts")
        if status != 200:
            raise AlertmanagerError(f"Alertmanager at {self.url} answered /api/v2/alerts with HTTP {status}")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            raise AlertmanagerError(f"Alertmanager at {self.url} answered /api/v2/alerts with no usable JSON") from None
        if not isinstance(doc, list):
            raise AlertmanagerError(f"Alertmanager at {self.url} answered /api/v2/alerts with a {type(doc).__name__}, "
                                    "not a list")
        return [a for a in (_alert(d) for d in doc[:MAX_ALERTS]) if a is not None]
