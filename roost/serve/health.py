"""The health wait: poll a starting vLLM server until it really answers, or fail with why.

Ready means all three, in order: ``GET /health`` is 200, ``GET /v1/models`` lists the served name,
and a one-token completion comes back, all through the one vLLM client
(``roost.vllm.client.VllmClient``). Each poll (every ``poll_interval_s``) first reads what the
server logged since the previous poll (``Server.new_log_text``: never the whole log again) for
start-up milestones (shards loaded, KV cache sized, application started), which go to
``on_progress``, then asks whether the server still runs: one that exited fails the wait at once
with the tail of its log (:class:`ServerExited`); one still starting at the deadline fails it with
:class:`HealthTimeout`. ``roost.serve.coldload`` classifies either with ``Server.diagnose``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import httpx

from roost.errors import StageFailed
from roost.serve.base import Milestone, Readiness, Server
from roost.vllm import wordings as W
from roost.vllm.client import VllmClient, run_sync

API_UP = "API server up"
"""The last milestone: from the log line, or from ``/health``'s first 200 when the log lags."""
# Log milestones, in the order a start goes through them, and the fraction of the wait each marks.
# (their wordings by release: roost.vllm.wordings)
MILESTONES: list[tuple[str, re.Pattern[str], float]] = [
    ("engine starting", W.ENGINE_STARTING.marker, 0.05),
    ("loading weights", W.LOAD_STARTED.marker, 0.15),
    ("weights loaded", W.any_of(W.WEIGHTS_READ, W.MODEL_LOADED), 0.50),
    ("compiling / warming up", W.COMPILING.marker, 0.60),
    ("KV cache sized", W.KV_CACHE_SIZE.marker, 0.85),
    (API_UP, W.any_of(W.APP_STARTED, W.API_SERVER_STARTING), 0.95),
]
_SHARDS = W.SHARDS_LOADING.pattern
_LINE_END = re.compile(r"[\r\n]")

READINESS_PROMPT = "Hello, world. Tell me"
"""The one-token completion's prompt: more than one token (a one-token prompt kills some hybrid
models' CPU engine: ``causal_conv1d_fwd_cpu: expect x to be transposed``)."""
HEALTH_POLL_TIMEOUT_S = 2.0
"""Longest one ``/health`` poll may take; a dead server is noticed by the next poll's liveness check."""
TAIL_LINES = 15


class HealthTimeout(StageFailed):
    """The server still ran but was not ready within the timeout."""

    def __init__(self, message: str) -> None:
        super().__init__("health-wait", message)


class ServerExited(StageFailed):
    """The server exited before it was ready; the message ends with the last lines of its log."""

    def __init__(self, exit_code: int | None, tail: str) -> None:
        super().__init__("health-wait", f"the server exited with code {exit_code} before it was ready; "
                                        f"last log lines:\n{tail}")
        self.server_exit_code = exit_code  # (``exit_code`` is the CLI's, as on every RoostError)


class ProgressTracker:
    """The furthest start-up milestone reached, from log text fed to it as it arrives.

    Only whole lines are matched (a milestone cut at the end of one piece of text is matched when
    the rest arrives); each milestone is timed at the first feed that shows it.
    """

    def __init__(self) -> None:
        self.name = "waiting for the server process"
        self.fraction = 0.0
        self.seen: dict[str, float] = {}
        self._carry = ""

    def feed(self, text: str, at_s: float) -> None:
        if not text:
            return
        buf = self._carry + text
        ends = [m.end() for m in _LINE_END.finditer(buf)]
        cut = ends[-1] if ends else 0
        self._carry = buf[cut:][-65536:]
        self._match(buf[:cut], at_s)

    def flush(self, at_s: float) -> None:
        """Match an unfinished last line too (the text is complete)."""
        rest, self._carry = self._carry, ""
        self._match(rest, at_s)

    def _match(self, lines: str, at_s: float) -> None:
        if not lines:
            return
        for name, pattern, fraction in MILESTONES:
            if pattern.search(lines):
                self.seen.setdefault(name, at_s)
                if fraction > self.fraction:
                    self.name, self.fraction = name, fraction
        shards = _SHARDS.findall(lines)
        if shards and self.fraction < 0.5:
            done, total = (int(x) for x in shards[-1])
            self.name, self.fraction = f"loading weights ({done}/{total} shards)", 0.15 + 0.35 * done / max(total, 1)

    def milestones(self) -> list[Milestone]:
        return [Milestone(name=k, at_s=v) for k, v in self.seen.items()]


def log_progress(log: str) -> tuple[str, float]:
    """The furthest milestone reached in a whole ``log`` and its fraction (0..1); shard counts refine it."""
    tracker = ProgressTracker()
    tracker.feed(log, 0.0)
    tracker.flush(0.0)
    return tracker.name, tracker.fraction


def wait_until_ready(
    server: Server,
    *,
    api_key: str | None,
    timeout_s: float,
    poll_interval_s: float = 0.1,
    on_progress: Callable[[str, float], None] | None = None,
) -> Readiness:
    """Block until ``server`` is ready (see the module doc); raises :class:`ServerExited`,
    :class:`HealthTimeout`, or StageFailed('health-wait') when the server refuses roost's key."""
    return run_sync(lambda: _wait(server, api_key, timeout_s, poll_interval_s, on_progress))


async def _wait(server: Server, api_key: str | None, timeout_s: float, poll_interval_s: float,
                on_progress: Callable[[str, float], None] | None) -> Readiness:
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    tracker = ProgressTracker()
    reported = ""
    polls = 0
    health_ok: float | None = None
    health_ok_at = 0.0
    models_ok: float | None = None
    prev_poll_end = t0
    detect_delay = 0.0
    async with VllmClient(server.base_url, server.served_model_name, api_key=api_key,
                          connect_timeout_s=HEALTH_POLL_TIMEOUT_S) as client:
        while True:
            now = time.monotonic()
            tracker.feed(server.new_log_text(), now - t0)
            if on_progress is not None and tracker.name != reported:
                on_progress(tracker.name, tracker.fraction)
                reported = tracker.name
            if not server.is_running():
                tail = "\n".join(server.logs().splitlines()[-TAIL_LINES:])
                raise ServerExited(server.exit_code(), tail)
            if now > deadline:
                raise HealthTimeout(f"not ready after {timeout_s:.0f} s (last milestone: {tracker.name}); "
                                    "raise the host's health timeout if the model is large, or read the server log")
            polls += 1
            if health_ok is None and await client.health(timeout_s=HEALTH_POLL_TIMEOUT_S) == 200:
                health_ok = time.monotonic() - t0
                health_ok_at = time.time()
                detect_delay = time.monotonic() - prev_poll_end  # the 200 came at most one poll (+ the request) ago
            if health_ok is not None and models_ok is None:
                try:
                    answer = await client.models()
                except httpx.HTTPError:
                    answer = None
                if answer is not None and answer.status_code in (401, 403):
                    raise StageFailed("health-wait", f"the server rejected roost's API key ({answer.status_code} on /v1/models)")
                if answer is not None and server.served_model_name in answer.ids:
                    models_ok = time.monotonic() - t0
            if models_ok is not None and await client.complete_one_token(READINESS_PROMPT):
                tracker.feed(server.new_log_text(), time.monotonic() - t0)
                tracker.flush(time.monotonic() - t0)
                # A log follower can lag the HTTP answers (Docker's, on a busy host): /health's 200 is itself
                # the proof that the API server is up, timed when it came.
                tracker.seen.setdefault(API_UP, health_ok or 0.0)
                if on_progress is not None:
                    on_progress("ready", 1.0)
                return Readiness(
                    health_ok_s=health_ok or 0.0, health_ok_at=health_ok_at, models_ok_s=models_ok,
                    completion_ok_s=time.monotonic() - t0, detect_delay_s=detect_delay, polls=polls,
                    milestones=tracker.milestones(),
                )
            prev_poll_end = time.monotonic()
            await asyncio.sleep(poll_interval_s)

