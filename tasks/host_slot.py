"""The host's serving slot: one vLLM server per host at a time, enforced by Prefect.

Each host has a global concurrency limit ``roost-serve-<host>`` of one slot. ``land`` holds it
from the serve stage to teardown and ``rebenchmark`` while it finds and measures a server, so two
runs aimed at one host wait for each other while different hosts run in parallel. The limit is
created (or repaired) here and nowhere else: ``roost setup`` calls :func:`ensure_host_limit` for
every host it sets up, and a flow calls it before taking the slot, so a host that was never set
up still gets exactly one slot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

HOST_LIMIT_PREFIX = "roost-serve-"
SLOTS_PER_HOST = 1
LEASE_S = 60
"""A held slot's lease, renewed while held: a crashed holder frees the host a minute later."""

LimitStatus = Literal["created", "updated", "unchanged"]


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


@contextlib.contextmanager
def host_slot(host_name: str, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the host's single serving slot for the block (serve -> benchmark -> teardown).

    ``strict=True``: a missing limit is an error (ConcurrencySlotAcquisitionError) instead of the
    warning Prefect gives by default, so an unconfigured host can never run two servers at once.
    ``timeout_s`` bounds the wait for a busy host (TimeoutError); None waits as long as the other
    run serves.
    """
    with concurrency(host_limit_name(host_name), occupy=1, strict=True, timeout_seconds=timeout_s,
                     lease_duration=LEASE_S):
        yield
