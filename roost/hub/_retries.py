"""Retries of Hub requests: exponential backoff with jitter for transient faults, sentences for the rest.

:func:`with_retries`: transient faults (``roost.hub.errors.is_transient``) are retried with
exponential backoff and jitter (:class:`RetryPolicy`); a transfer that made progress starts its
budget afresh; refusals become the ``UserError`` sentence at once. An endpoint that has never
answered this client (connection refused, no such host, a timeout before any answer) gets
``RetryPolicy.unanswered_attempts`` tries (3: about 2 s for a refused connection), not the patient
budget meant for a Hub that answered and then faltered.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, Field

from roost.hub.errors import (
    FaultContext,
    HubUnreachable,
    Stopped,
    is_transient,
    short_fault,
    status_error,
    to_roost_error,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter for transient faults."""

    attempts: int = Field(default=6, ge=1, description="Tries per request without progress.")
    unanswered_attempts: int = Field(
        default=3, ge=1,
        description="Tries while the endpoint has never answered this client (refused, no such host, timeouts).",
    )
    base_s: float = 1.0
    cap_s: float = 30.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based): half fixed, half random."""
        ceiling = min(self.cap_s, self.base_s * float(2 ** (failures - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    ctx: FaultContext,
    policy: RetryPolicy,
    progress_marker: Callable[[], int] | None = None,
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    answered: Callable[[], bool] | None = None,
) -> T:
    """Call ``fn``; retry transient faults with backoff; map the rest to roost errors.

    ``progress_marker`` (e.g. bytes on disk) lets a transfer that made progress start afresh.
    ``answered`` says whether the endpoint has ever answered (None: assume it has); while it has not,
    a transport fault gets ``policy.unanswered_attempts`` tries and its own sentence.
    """
    failures = 0
    started = time.monotonic()
    marker = progress_marker() if progress_marker else 0
    while True:
        try:
            return fn()
        except Exception as exc:
            mapped = to_roost_error(exc, ctx)
            if mapped is not None:
                raise mapped from None
            if not is_transient(exc):
                raise
            if progress_marker is not None:
                now = progress_marker()
                if now > marker:
                    failures = 0
                marker = now
            unanswered = answered is not None and not answered() and status_error(exc) is None
            limit = policy.unanswered_attempts if unanswered else policy.attempts
            failures += 1
            if failures >= limit:
                if unanswered:
                    raise HubUnreachable(
                        f"{what}: nothing answered at {ctx.endpoint} ({short_fault(exc)}; {failures} attempts in "
                        f"{time.monotonic() - started:.1f} s, the most roost makes at an endpoint that never "
                        "answered): check that a Hub runs there and that HF_ENDPOINT names it, then run again",
                        ctx.stage,
                    ) from None
                kept = " (finished files and partial transfers are kept and resumed)" if ctx.stage == "download" else ""
                raise HubUnreachable(
                    f"{what}: {limit} attempts failed, last with {short_fault(exc)}; "
                    f"check that {ctx.endpoint} is reachable and run again{kept}",
                    ctx.stage,
                ) from None
            delay = policy.delay(failures)
            log.warning(
                "transient fault while %s (%s); retry %d/%d in %.1f s",
                what,
                short_fault(exc),
                failures,
                limit - 1,
                delay,
            )
            if stop is not None and stop.wait(delay):
                raise Stopped() from None
            if stop is None:
                sleep(delay)

