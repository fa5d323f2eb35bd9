"""The cold-load policy (pure): after a failed start, retry, fix or stop?

Decided from the failure's class (``roost.serve.diagnose``), the attempt number and whether the KV
pool was already raised once:

==============================  =============================================================
failure class                   decision
==============================  =============================================================
out_of_memory, health_timeout   retry after a backoff (5 s, 10 s, 20 s ... at most 60 s): memory
                                a previous server still holds, a slow cold load, are transient
port_in_use                     retry at once on a new port (someone took it); stop when the port
                                is fixed (the profile's: a gateway expects the server there)
compile_cache_corrupt           remove the compile-cache entry the log names (``Server.clear_compile_cache``)
                                once and retry at once: a server stopped mid-compile left it half-written,
                                and every start of the same configuration would load it; stop when it
                                was removed once already (the fault is not the cache)
kv_pool_too_small               raise ``--kv-cache-memory-bytes`` once to what vLLM said one
                                request needs, and retry; stop when vLLM named no size, or the
                                raised pool was too small again
visual_uninitialized,           stop with the remediation: the checkpoint or the arguments must
language_model_only_with_tower, change, so another attempt would fail the same way
mtp_weights_missing, unknown
no diagnosis                    stop: roost cannot say what failed (the caller re-raises the error)
==============================  =============================================================

No decision retries past the last attempt (``max_attempts``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from roost.serve.diagnose import Diagnosis

Action = Literal["retry", "retry on a new port", "raise the pool", "clear the compile cache", "stop"]
"""What roost does after a failed attempt (``roost.records.StartAttempt.action``)."""

MAX_ATTEMPTS = 3
BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 60.0
TRANSIENT = ("out_of_memory", "health_timeout")


class Decision(BaseModel):
    """What to do after a failed cold-load attempt."""

    action: Action
    backoff_s: float = Field(default=0.0, description="Wait this long before the next attempt.")
    kv_cache_bytes: int | None = Field(default=None, description="raise the pool: the new --kv-cache-memory-bytes.")
    compile_cache_entry: str | None = Field(default=None, description="clear the compile cache: the entry to remove.")
    reason: str = Field(description="One sentence for the log: why this decision.")


def backoff_s(attempt: int) -> float:
    """The wait after failed attempt ``attempt`` (1-based): 5 s doubling, at most 60 s."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** (attempt - 1))


def decide(diagnosis: Diagnosis | None, attempt: int, *, pool_raised: bool = False, cache_cleared: bool = False,
           max_attempts: int = MAX_ATTEMPTS, fixed_port: bool = False) -> Decision:
    """The decision after attempt ``attempt`` (1-based) failed with ``diagnosis``; ``fixed_port``: the
    server must listen on its port (never moved); ``cache_cleared``: a compile-cache entry was removed
    by an earlier attempt."""
    if diagnosis is None:
        return Decision(action="stop", reason="the failure has no diagnosis: nothing says a retry could succeed")
    cls = diagnosis.failure_class
    last = attempt >= max_attempts
    if cls == "kv_pool_too_small":
        size = diagnosis.suggested_kv_cache_bytes
        if size is not None and not pool_raised and not last:
            return Decision(action="raise the pool", kv_cache_bytes=size,
                            reason=f"raising the KV pool to {size} bytes (what vLLM said one request needs) and retrying")
        why = "the raised pool was too small too" if pool_raised else (
            "vLLM named no size to raise the pool to" if size is None else "no attempt left")
        return Decision(action="stop", reason=f"{why}: {diagnosis.remediation}")
    if cls == "compile_cache_corrupt":
        entry = diagnosis.compile_cache_entry
        if entry is not None and not cache_cleared and not last:
            return Decision(action="clear the compile cache", compile_cache_entry=entry,
                            reason=f"removing the half-written compile-cache entry {entry} and retrying at once")
        why = ("an entry was removed once already, so the cache is not the fault" if cache_cleared else
               "no attempt left" if last else "the log names no cache entry roost may remove")
        return Decision(action="stop", reason=f"{why}: {diagnosis.remediation}")
    if cls == "port_in_use" and fixed_port:
        return Decision(action="stop", reason="the port is fixed by the profile (clients expect the server there): "
                        "free it, or run with --replace when a container holds it")
    if cls == "port_in_use" and not last:
        return Decision(action="retry on a new port", reason="the port is taken: retrying at once on another port")
    if cls in TRANSIENT and not last:
        wait = backoff_s(attempt)
        return Decision(action="retry", backoff_s=wait, reason=f"retrying in {wait:.0f} s ({cls} is transient)")
    if diagnosis.retryable:
        return Decision(action="stop", reason=f"no attempt left after {attempt}: {diagnosis.remediation}")
    return Decision(action="stop", reason=f"{cls} fails the same way again: {diagnosis.remediation}")
