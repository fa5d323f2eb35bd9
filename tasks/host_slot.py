"""The host's serving slot: one vLLM server per host at a time, enforced by Prefect.

Each host has a global concurrency limit ``roost-serve-<host>`` of one slot. ``land`` holds it
from the serve stage to teardown and ``rebenchmark`` while it finds and measures a server, so two
runs aimed at one host wait for each other while different hosts run in parallel. The limit is
created (or repaired) here and nowhere else: ``roost setup`` calls :func:`ensure_host_limit` for
every host it sets up, and a flow calls it before taking the slot, so a host that was never set
up still gets exactly one slot.

The slot is held through a lease, renewed every :data:`RENEW_EVERY_S` while held: a run whose
process dies frees its host :data:`LEASE_S` later (the server revokes the expired lease). Prefect's
own ``concurrency()`` is not used, because of what it does when the Prefect server restarts: the
default server keeps leases in memory, so after a restart it refuses the renewal (410 Gone) and
``concurrency(strict=True)`` cancels the run mid-benchmark, and its release of a lease the server
no longer knows decrements nothing, so the slot stays taken and every later run on the host waits
forever. Here a forgotten lease (:func:`roost.serve.occupancy.lease_forgotten`) is only logged
while the run goes on (the slot is still counted, so no other run can enter), and on exit the slot
is given back by count. A run that waits for a busy host says so and asks again every
:data:`WAIT_POLL_MAX_S` at most.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
from prefect.client.schemas.objects import ConcurrencyLeaseHolder
from prefect.client.schemas.responses import ConcurrencyLimitWithLeaseResponse
from prefect.concurrency.asyncio import AcquireConcurrencySlotTimeoutError, ConcurrencySlotAcquisitionError
from prefect.context import FlowRunContext
from prefect.exceptions import (
    MissingContextError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PrefectHTTPStatusError,
)
from prefect.logging import get_run_logger

from roost.serve.occupancy import lease_forgotten

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

HOST_LIMIT_PREFIX = "roost-serve-"
SLOTS_PER_HOST = 1
LEASE_S = 60
"""A held slot's lease: a crashed holder frees the host a minute later."""
RENEW_EVERY_S = 15.0
"""The lease is renewed this often while held (four renewals per lease)."""
RETRY_RENEWAL_S = 2.0
"""After a renewal that could not reach the server: ask again this soon, so that a restarted server's
refusal comes while the lease would still have been valid (told apart from an expired one)."""
WAIT_POLL_MAX_S = 5.0
"""A run waiting for a busy host asks again at least this often (the server's Retry-After can say 30 s)."""

LimitStatus = Literal["created", "updated", "unchanged"]
LeaseState = Literal["held", "forgotten", "lapsed"]

_LOG = logging.getLogger(__name__)


def host_limit_name(host_name: str) -> str:
    """The global concurrency limit that keeps one server per host: ``roost-serve-<host>``."""
    return f"{HOST_LIMIT_PREFIX}{host_name}"


def ensure_host_limit(host_name: str, client: SyncPrefectClient | None = None) -> LimitStatus:
    """Create the host's limit (one active slot) when missing, repair it when changed; say which."""
    name = host_limit_name(host_name)
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(get_client(sync_client=True))
        try:
            existing = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # created concurrently by another run: fine
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=SLOTS_PER_HOST, active=True))
            return "created"
        if existing.limit != SLOTS_PER_HOST or not existing.active:
            client.update_global_concurrency_limit(
                name, GlobalConcurrencyLimitUpdate(limit=SLOTS_PER_HOST, active=True))
            return "updated"
    return "unchanged"


@dataclass
class SlotHold:
    """A held serving slot: the host, and how long the run waited for it (another run served there)."""

    host: str
    waited_s: float


@contextlib.contextmanager
def host_slot(host_name: str, *, timeout_s: float | None = None) -> Iterator[SlotHold]:
    """Hold the host's single serving slot for the block (serve -> benchmark -> teardown).

    A missing limit is an error (``ConcurrencySlotAcquisitionError``), so an unconfigured host can
    never run two servers at once. ``timeout_s`` bounds the wait for a busy host (``TimeoutError``);
    None waits as long as the other run serves. Giving the slot back never raises: a failure is
    logged, and the lease runs out within :data:`LEASE_S`.
    """
    name = host_limit_name(host_name)
    log = _logger()
    t0 = time.monotonic()
    lease_id, asked_at = _acquire(name, host_name, timeout_s, log)
    held_at = time.monotonic()
    keeper = _LeaseKeeper(lease_id, asked_at, host_name, log)
    try:
        yield SlotHold(host=host_name, waited_s=held_at - t0)
    finally:
        keeper.stop()
        _release(name, keeper, time.monotonic() - held_at, log)


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except MissingContextError:
        return _LOG


def _holder() -> ConcurrencyLeaseHolder | None:
    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    return ConcurrencyLeaseHolder(type="flow_run", id=run.id) if run is not None else None


def _acquire(name: str, host: str, timeout_s: float | None,
             log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> tuple[UUID, float]:
    """Take the slot (waiting while another run holds it): the lease and when it was asked for."""
    start = time.monotonic()
    waiting = False
    with get_client(sync_client=True) as client:
        while True:
            asked_at = time.monotonic()
            try:
                response = client.increment_concurrency_slots_with_lease(
                    names=[name], slots=SLOTS_PER_HOST, mode="concurrency", lease_duration=LEASE_S, holder=_holder())
            except PrefectHTTPStatusError as exc:
                if exc.response.status_code != 423:  # 423 Locked: another run holds the slot
                    raise ConcurrencySlotAcquisitionError(f"Unable to acquire concurrency slots on {[name]!r}: "
                                                          f"{exc}") from exc
                if not waiting:
                    log.info("host %s serves another run (its serving slot %s is held: one vLLM server per host); "
                             "waiting for that run to finish%s", host, name,
                             f" (at most {timeout_s:g} s)" if timeout_s is not None else "")
                    waiting = True
                pause = min(float(exc.response.headers.get("Retry-After") or WAIT_POLL_MAX_S), WAIT_POLL_MAX_S)
                if timeout_s is not None:
                    left = start + timeout_s - time.monotonic()
                    if left <= 0:
                        raise AcquireConcurrencySlotTimeoutError(
                            f"host {host}'s serving slot is still held by another run after {timeout_s:g} s") from None
                    pause = min(pause, left)
                time.sleep(max(pause, 0.1))
                continue
            granted = ConcurrencyLimitWithLeaseResponse.model_validate(response.json())
            if not granted.limits:
                raise ConcurrencySlotAcquisitionError(f"Concurrency limits {[name]!r} must be created before "
                                                      "acquiring slots")
            if waiting:
                log.info("host %s is free: got its serving slot after waiting %.0f s", host, time.monotonic() - start)
            return granted.lease_id, asked_at


class _LeaseKeeper:
    """Renews the lease every :data:`RENEW_EVERY_S` (every :data:`RETRY_RENEWAL_S` while the server
    cannot be reached) until stopped or until the server refuses it;
    ``state`` says whether it is still held, forgotten by the server, or lapsed (expired)."""

    def __init__(self, lease_id: UUID, renewed_at: float, host: str,
                 log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
        self.lease_id, self.host, self.log = lease_id, host, log
        self.state: LeaseState = "held"
        self._renewed_at = renewed_at
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        context = contextvars.copy_context()  # the run's settings and logger in the thread too
        self._thread = threading.Thread(target=context.run, args=(self._loop,), daemon=True,
                                        name=f"roost-host-slot-{host}")
        self._thread.start()

    def _loop(self) -> None:
        pause = RENEW_EVERY_S
        with get_client(sync_client=True) as client:
            while not self._stopped.wait(pause):
                outcome = self.renew(client)
                if outcome == "gone":
                    return
                pause = RENEW_EVERY_S if outcome == "renewed" else RETRY_RENEWAL_S

    def renew(self, client: SyncPrefectClient) -> Literal["renewed", "failed", "gone"]:
        """Renew once: ``gone`` once the server refuses the lease (``state`` says how); ``failed`` when
        it could not be asked (down, after the client's own retries)."""
        if self.state != "held":
            return "gone"
        asked_at = time.monotonic()
        try:
            client.renew_concurrency_lease(lease_id=self.lease_id, lease_duration=LEASE_S)
        except PrefectHTTPStatusError as exc:
            if exc.response.status_code not in (404, 410):
                self.log.warning("could not renew host %s's serving slot: %s", self.host, exc)
                return "failed"
            self._lost(time.monotonic())
            return "gone"
        except Exception as exc:
            self.log.warning("could not renew host %s's serving slot (is the Prefect server down?): %s", self.host, exc)
            return "failed"
        with self._lock:
            self._renewed_at = max(self._renewed_at, asked_at)
        return "renewed"

    def _lost(self, refused_at: float) -> None:
        with self._lock:
            if self.state != "held":
                return
            since = refused_at - self._renewed_at
            self.state = "forgotten" if lease_forgotten(self._renewed_at, refused_at, LEASE_S) else "lapsed"
        if self.state == "forgotten":
            self.log.warning("the Prefect server no longer knows host %s's serving slot lease (restarted?); the slot "
                             "stays counted, this run goes on and gives it back when it ends", self.host)
        else:
            self.log.error("host %s's serving slot lapsed: not renewed for %.0f s, so the Prefect server gave it back; "
                           "another run may start a server on this host", self.host, since)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)


def _release(name: str, keeper: _LeaseKeeper, held_s: float,
             log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
    """Give the slot back: through its lease, or by count when the server forgot the lease (a renewal
    first, so a lease forgotten since the last one is found); a lapsed slot was given back already."""
    try:
        with get_client(sync_client=True) as client:
            keeper.renew(client)
            if keeper.state == "held":
                client.release_concurrency_slots_with_lease(lease_id=keeper.lease_id)
            elif keeper.state == "forgotten":
                client.release_concurrency_slots(names=[name], slots=SLOTS_PER_HOST, occupancy_seconds=held_s)
                log.info("gave host %s's serving slot back by count (its lease was lost)", keeper.host)
    except Exception as exc:  # the teardown and the report go on; the lease runs out by itself
        log.error("could not give host %s's serving slot back: %s (it frees itself within %d s unless the Prefect "
                  "server lost its lease)", keeper.host, exc, LEASE_S)
