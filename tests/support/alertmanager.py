"""A real Alertmanager (Debian's ``prometheus-alertmanager`` package: ``/usr/bin/prometheus-alertmanager``
and ``amtool``; ``scripts/test`` installs it when missing) run as a process on a free loopback port,
clustering off, reading the ``alertmanager.yml`` ``roost monitor render`` wrote. It runs in the
config's folder, as ``roost monitor up``'s container does (``api_url_file`` is opened relative to the
working directory: ``roost/monitor/alerting.py``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx

from roost.net import free_port
from support.processes import stop_group
from support.wait import http_ok, wait_started

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
AMTOOL = shutil.which("amtool") or "/usr/bin/amtool"


def have_alertmanager() -> bool:
    return Path(ALERTMANAGER).is_file() and Path(AMTOOL).is_file()


def check_config(config: Path) -> subprocess.CompletedProcess[str]:
    """``amtool check-config`` on ``config`` (its output in ``stdout``)."""
    return subprocess.run([AMTOOL, "check-config", str(config)], capture_output=True, text=True, timeout=60,
                          check=False)


class AlertmanagerProcess:
    def __init__(self, config: Path, data: Path, port: int | None = None) -> None:
        self.config, self.data = config, data
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.log_path = data.parent / f"alertmanager-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> AlertmanagerProcess:
        args = [ALERTMANAGER, f"--config.file={self.config}", f"--storage.path={self.data}",
                f"--web.listen-address={self.address}", "--cluster.listen-address="]
        self.proc = subprocess.Popen(args, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT,
                                     cwd=self.config.parent, start_new_session=True)
        wait_started("alertmanager", self.proc, http_ok(f"{self.url}/-/ready", timeout_s=1), log=self.log_path,
                     timeout_s=timeout_s, every_s=0.2)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)  # started in a session of its own

    def alerts(self) -> list[dict[str, Any]]:
        """What it holds (``/api/v2/alerts``)."""
        r = httpx.get(f"{self.url}/api/v2/alerts", timeout=10)
        r.raise_for_status()
        return list(r.json())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""
