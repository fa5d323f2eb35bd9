"""A real Prometheus (Debian's ``prometheus`` package: ``/usr/bin/prometheus`` and ``promtool``;
``scripts/test`` installs it when missing) run as a process on a free loopback port, with the
lifecycle API on, reading a config rendered by ``roost monitor render``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx

from roost.net import free_port
from support.processes import stop_group
from support.wait import http_ok, wait_for, wait_started

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def have_prometheus() -> bool:
    return Path(PROMETHEUS).is_file() and Path(PROMTOOL).is_file()


class PrometheusProcess:
    def __init__(self, config: Path, data: Path, *, lifecycle: bool = True) -> None:
        self.config, self.data, self.lifecycle = config, data, lifecycle
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data.parent / f"prometheus-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> PrometheusProcess:
        args = [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}"]
        if self.lifecycle:
            args.append("--web.enable-lifecycle")
        self.proc = subprocess.Popen(args, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_started("prometheus", self.proc, http_ok(f"{self.url}/-/ready", timeout_s=1), log=self.log_path,
                     timeout_s=timeout_s, every_s=0.2)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)  # started in a session of its own

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def wait(self, what: str, check: Any, timeout_s: float = 60.0, every_s: float = 0.5) -> Any:
        """Poll ``check()`` until it returns something truthy; fail naming ``what``."""
        return wait_for(what, check, timeout_s=timeout_s, every_s=every_s)

    def alerts(self) -> dict[str, list[dict[str, Any]]]:
        """alertname -> active alerts (pending or firing)."""
        data = httpx.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        out: dict[str, list[dict[str, Any]]] = {}
        for a in data:
            out.setdefault(a["labels"]["alertname"], []).append(a)
        return out

    def up(self, job: str) -> dict[str, float]:
        return {r["metric"]["instance"]: float(r["value"][1]) for r in self.query(f'up{{job="{job}"}}')}
