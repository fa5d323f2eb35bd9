"""Health-wait: poll a starting vLLM server until it really answers, or fail with why.

Ready means all three, in order: ``GET /health`` is 200, ``GET /v1/models`` lists the served name,
and a one-token completion comes back. While waiting, the server log is read for milestones
(shards loaded, KV cache sized, application started) which are handed to ``on_progress``.
A server process that exits while we wait fails the wait at once with the tail of its log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, Field

from roost.errors import StageFailed
from roost.serve.base import ServerHandle

# Log milestones, in the order a start goes through them, and the fraction of the wait each marks.
MILESTONES: list[tuple[str, re.Pattern[str], float]] = [
    ("engine starting", re.compile(r"Initializing a V1 LLM engine|EngineCore .*started|Resolved architecture"), 0.05),
    ("loading weights", re.compile(r"Loading (?:weights|safetensors checkpoint shards)|Starting to load model"), 0.15),
    ("weights loaded", re.compile(r"Loading weights took|Model loading took"), 0.50),
    ("compiling / warming up", re.compile(r"torch\.compile|Compiling a graph|warming up|Warming up", re.I), 0.60),
    ("KV cache sized", re.compile(r"KV cache size:"), 0.85),
    ("API server up", re.compile(r"Application startup complete|Starting vLLM API server"), 0.95),
]
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s*\d+% Completed \|\s*(\d+)/(\d+)")


class HealthTimeout(StageFailed):
    """The server still ran but was not ready within the timeout."""

    def __init__(self, message: str) -> None:
        super().__init__("health-wait", message)


class Milestone(BaseModel):
    name: str
    at_s: float


class HealthResult(BaseModel):
    """Seconds from the start of the wait to each step; ``detect_delay_s`` is the poll latency bound."""

    health_ok_s: float
    health_ok_at: float = Field(description="Wall clock (epoch seconds) when roost saw /health 200.")
    models_ok_s: float
    completion_ok_s: float
    detect_delay_s: float
    polls: int
    milestones: list[Milestone]


def log_progress(log: str) -> tuple[str, float]:
    """The furthest milestone reached in ``log`` and its fraction (0..1); shard counts refine it."""
    name, frac = "waiting for the server process", 0.0
    for m_name, pattern, m_frac in MILESTONES:
        if pattern.search(log):
            name, frac = m_name, m_frac
    shards = _SHARDS.findall(log)
    if shards and frac < 0.5:
        done, total = (int(x) for x in shards[-1])
        name, frac = f"loading weights ({done}/{total} shards)", 0.15 + 0.35 * done / max(total, 1)
    return name, frac


def wait_until_ready(
    server: ServerHandle,
    *,
    api_key: str | None,
    timeout_s: float,
    poll_interval_s: float = 0.1,
    on_progress: Callable[[str, float], None] | None = None,
    prompt: str = "Hello, world. Tell me",
) -> HealthResult:
    """Block until ``server`` is ready (see module doc) or raise StageFailed('health-wait', ...)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    polls = 0
    seen: dict[str, float] = {}
    last_reported = ""
    health_ok: float | None = None
    health_ok_at = 0.0
    models_ok: float | None = None
    prev_poll_end = t0
    detect_delay = 0.0
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=httpx.Timeout(5.0, read=60.0)) as client:
        while True:
            now = time.monotonic()
            log = server.logs()
            name, frac = log_progress(log)
            for m_name, pattern, _ in MILESTONES:
                if m_name not in seen and pattern.search(log):
                    seen[m_name] = now - t0
            if on_progress and name != last_reported:
                on_progress(name, frac)
                last_reported = name
            if not server.is_running():
                tail = "\n".join(log.splitlines()[-15:])
                raise StageFailed("health-wait", f"the server exited with code {server.exit_code()} before it was ready; "
                                  f"last log lines:\n{tail}")
            if now > deadline:
                raise HealthTimeout(f"not ready after {timeout_s:.0f} s (last milestone: {name}); "
                                    "raise the host's health timeout if the model is large, or read the server log")
            polls += 1
            try:
                if health_ok is None:
                    r = client.get("/health")
                    if r.status_code == 200:
                        health_ok = time.monotonic() - t0
                        health_ok_at = time.time()
                        # the 200 happened at most one poll interval (+ the request) ago
                        detect_delay = time.monotonic() - prev_poll_end
                if health_ok is not None and models_ok is None:
                    r = client.get("/v1/models")
                    if r.status_code == 401:
                        raise StageFailed("health-wait", "the server rejected roost's API key (401 on /v1/models)")
                    if r.status_code == 200 and _lists_model(r.json(), server.served_model_name):
                        models_ok = time.monotonic() - t0
                if models_ok is not None:
                    r = client.post("/v1/completions", json={
                        "model": server.served_model_name, "prompt": prompt, "max_tokens": 1, "temperature": 0,
                    })
                    if r.status_code == 200 and r.json().get("choices"):
                        if on_progress:
                            on_progress("ready", 1.0)
                        return HealthResult(
                            health_ok_s=health_ok or 0.0, health_ok_at=health_ok_at, models_ok_s=models_ok,
                            completion_ok_s=time.monotonic() - t0, detect_delay_s=detect_delay, polls=polls,
                            milestones=[Milestone(name=k, at_s=v) for k, v in seen.items()],
                        )
            except httpx.TransportError:
                pass
            prev_poll_end = time.monotonic()
            time.sleep(poll_interval_s)


def _lists_model(payload: Any, name: str) -> bool:
    return any(m.get("id") == name for m in payload.get("data", []) if isinstance(m, dict))


def server_version(base_url: str, api_key: str | None = None, *, timeout_s: float = 5.0) -> str:
    """vLLM's version as the running server reports it (``GET /version``); "" when it does not say."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{base_url.rstrip('/')}/version", headers=headers, timeout=timeout_s, trust_env=False)
        version = r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return ""
    return str(version) if isinstance(version, str) else ""
