"""The cold load: start a server and wait until it is ready, retrying only what can succeed.

:func:`cold_load` runs attempts until one is ready or the policy (``roost.serve.policy``) says stop.
After each failed attempt it classifies the failure (``Server.diagnose``, or the diagnosis a
refused start carries), stops that server, records one :class:`~roost.records.StartAttempt`, and
acts on the decision: wait and retry, retry on a new port, raise the KV pool once, remove a
half-written compile-cache entry once (``Server.clear_compile_cache``) and retry, or stop with
:class:`ColdLoadFailed` (its message: "class: remediation (evidence: ...)"). A failure it cannot
classify re-raises the original error, after stopping the server. No server is ever left running
by a failed attempt or an exception (KeyboardInterrupt included).

Prefect-free: the caller supplies ``start`` and ``wait`` (the flow wraps its Prefect tasks and stage
timings in them) and the ``sleep`` between attempts (tests pass a short one).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from roost.errors import StageFailed
from roost.net import free_port
from roost.records import StartAttempt
from roost.serve.base import LogFn, Readiness, Server, ServeSpec, StartFailed, _ignore, stop_grace
from roost.serve.diagnose import Diagnosis
from roost.serve.health import HealthTimeout
from roost.serve.phases import StartupPhases
from roost.serve.policy import MAX_ATTEMPTS, decide
from roost.serve.vllm_log import VllmLogFacts, parse_vllm_log
from roost.vllm.argv import VllmArgv

KV_POOL_FLAG = "--kv-cache-memory-bytes"


@dataclass
class ColdLoad:
    """A cold load that ended ready."""

    server: Server
    readiness: Readiness
    spec: ServeSpec  # what finally started (a raised pool, a new port)
    attempts: list[StartAttempt]  # one per attempt, the last one ok
    facts: VllmLogFacts  # what vLLM logged about its KV cache and load
    phases: StartupPhases


class ColdLoadFailed(StageFailed):
    """No attempt ended ready; carries the last failure's class, remediation and every attempt."""

    def __init__(self, stage: str, diagnosis: Diagnosis, attempts: list[StartAttempt]) -> None:
        self.message = f"{diagnosis.failure_class}: {diagnosis.remediation} (evidence: {diagnosis.evidence})"
        super().__init__(stage, self.message)
        self.failure_class: str = diagnosis.failure_class
        self.remediation = diagnosis.remediation
        self.evidence = diagnosis.evidence
        self.attempts = attempts


def with_kv_pool(args: list[str], pool_bytes: int) -> list[str]:
    """``args`` with ``--kv-cache-memory-bytes`` set to ``pool_bytes`` last (any earlier value, in any
    spelling vLLM reads, removed)."""
    return [*VllmArgv(args).remove(KV_POOL_FLAG), KV_POOL_FLAG, str(pool_bytes)]


def _diagnosis(exc: StageFailed, server: Server | None) -> Diagnosis | None:
    if server is None:  # the backend refused to start it (e.g. Docker could not publish the port)
        return exc.diagnosis if isinstance(exc, StartFailed) else None
    return server.diagnose(timed_out=isinstance(exc, HealthTimeout))


def _failed_attempt(attempt: int, t0: float, spec: ServeSpec, action: str, diag: Diagnosis | None,
                    exc: StageFailed) -> StartAttempt:
    """The record of a failed attempt started at ``t0``: the diagnosis's class, remediation and evidence,
    or, unclassified, the error's text as the evidence; ``action`` is what the policy decided next."""
    entry = StartAttempt(attempt=attempt, ok=False, seconds=round(time.perf_counter() - t0, 2),
                         port=spec.port, vllm_args=list(spec.vllm_args), action=action)
    if diag is None:
        entry.evidence = str(exc)
        return entry
    return entry.model_copy(update={"failure_class": diag.failure_class, "retryable": diag.retryable,
                                    "remediation": diag.remediation, "evidence": diag.evidence})


def cold_load(
    start: Callable[[ServeSpec], Server],
    wait: Callable[[Server], Readiness],
    spec: ServeSpec,
    *,
    max_attempts: int = MAX_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    new_port: Callable[[], int] = free_port,
    log: LogFn = _ignore,
    on_attempt: Callable[[StartAttempt], None] | None = None,
) -> ColdLoad:
    """Start ``spec`` with ``start`` and ``wait`` until ready; see the module doc.

    ``log`` gets one line per failed attempt and per decision; ``on_attempt`` each attempt's record as
    soon as it is known. Raises :class:`ColdLoadFailed`, or the original error when unclassified.
    """
    attempts: list[StartAttempt] = []
    pool_raised = cache_cleared = False

    def record(entry: StartAttempt) -> None:
        attempts.append(entry)
        if on_attempt is not None:
            on_attempt(entry)

    for attempt in range(1, max_attempts + 1):
        t0 = time.perf_counter()
        server: Server | None = None
        pause = 0.0
        try:
            server = start(spec)
            ready = wait(server)
            facts = parse_vllm_log(server.logs())
            phases = server.phases(ready)
        except StageFailed as exc:
            try:
                diag = _diagnosis(exc, server)
            finally:
                if server is not None:
                    server.stop()
            decision = decide(diag, attempt, pool_raised=pool_raised, cache_cleared=cache_cleared,
                              max_attempts=max_attempts, fixed_port=spec.fixed_port)
            record(_failed_attempt(attempt, t0, spec, decision.action, diag, exc))
            log(f"cold load attempt {attempt} failed: "
                + (f"{diag.failure_class}: {diag.evidence}" if diag is not None else str(exc)))
            if diag is None:
                raise
            if decision.action == "stop":
                raise ColdLoadFailed("serve" if server is None else "health-wait", diag, attempts) from None
            log(decision.reason)
            if decision.action == "raise the pool" and decision.kv_cache_bytes is not None:
                pool_raised = True
                spec = spec.model_copy(update={"vllm_args": with_kv_pool(spec.vllm_args, decision.kv_cache_bytes)})
            elif decision.action == "clear the compile cache" and server is not None and decision.compile_cache_entry:
                cache_cleared = True
                log(server.clear_compile_cache(decision.compile_cache_entry))
            elif decision.action == "retry on a new port":
                spec = spec.model_copy(update={"port": new_port()})
            pause = decision.backoff_s
        except BaseException as exc:  # a crash or a cancellation: never leave the server behind
            if server is not None:
                server.stop(stop_grace(exc))
            raise
        else:
            try:
                record(StartAttempt(attempt=attempt, ok=True, seconds=round(time.perf_counter() - t0, 2),
                                    port=spec.port, vllm_args=list(spec.vllm_args)))
            except BaseException as exc:
                server.stop(stop_grace(exc))
                raise
            return ColdLoad(server=server, readiness=ready, spec=spec, attempts=attempts, facts=facts, phases=phases)
        if pause > 0:
            sleep(pause)
    raise AssertionError("unreachable: the policy stops at the last attempt")  # pragma: no cover
