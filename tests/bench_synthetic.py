"""The synthetic streaming server (``tests/roost/bench/synthetic_server.py``) as a subprocess, and its control calls."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

SYNTHETIC = Path(__file__).resolve().parent / "roost" / "bench" / "synthetic_server.py"


class Synthetic:
    """A running synthetic server and its control endpoints."""

    def __init__(self, proc: subprocess.Popen[str], port: int, api_key: str, model: str) -> None:
        self.proc, self.port, self.api_key, self.model = proc, port, api_key, model
        self.base_url = f"http://127.0.0.1:{port}"

    def control(self, **values: Any) -> None:
        httpx.post(f"{self.base_url}/_control", json=values, timeout=10).raise_for_status()

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(f"{self.base_url}/_stats", timeout=10).json()
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_synthetic(*args: str, api_key: str = "synthetic-key", model: str = "synthetic") -> Synthetic:
    proc = subprocess.Popen(
        [sys.executable, str(SYNTHETIC), "--port", "0", "--model", model, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, SYNTHETIC_API_KEY=api_key),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"synthetic server did not start: {line!r}")
    return Synthetic(proc, int(line.split()[1]), api_key, model)
