"""The work pool ``roost setup`` uses, its queues, the sweep's queue and deployment, and the workers to start.

The pool is named for the site (``roost``), not for a machine. A server set up by an earlier release
holds roost's deployments in the pool ``roost-spark``, which its workers poll: without ``--pool``,
setup keeps using that pool (and says so) until the user moves with ``--pool roost``, so the running
workers keep getting runs.

The sweep (``sweep/<pool>`` on the queue ``sweep``) compares variants across hosts: it is deployed
only when at least two hosts are set up. With one host, what an earlier run made for it is removed,
so no deployment sits Not Ready waiting for a worker nobody was told to start. The workers setup
tells the user to start serve every queue that has a deployment: one per host, the first also
taking the sweeps.

Run ``python -m deployments.pool`` to print the pool a worker should poll (``scripts/install-worker``
does, when no ``--pool`` is given).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterTags,
    WorkPoolFilter,
    WorkPoolFilterName,
    WorkQueueFilter,
    WorkQueueFilterName,
)
from prefect.exceptions import ObjectNotFound
from prefect.workers.process import ProcessWorker

from deployments.deploy import DEFAULT_POOL, LEGACY_POOL, SWEEP_QUEUE, repo_root
from deployments.report import SetupItem
from roost.errors import UserError

MIN_SWEEP_HOSTS = 2
"""A sweep lands variants across hosts: below this many hosts set up, no sweep queue or deployment."""
WORKER_ENV = "PREFECT_WORKER_QUERY_SECONDS=1"
"""Workers ask for runs every second instead of every 10 s (docs/deployments.md, 3. A worker per host)."""


# --- the pool's name ---------------------------------------------------------------------------------


def resolve_pool(client: SyncPrefectClient, requested: str | None, *, default: str = DEFAULT_POOL,
                 legacy: str = LEGACY_POOL) -> tuple[str, str]:
    """The pool to set up and a note when it is not the one asked for: ``requested``, else ``default``.

    Without ``requested``: when ``legacy`` holds roost's deployments (tag ``roost``) and ``default`` none,
    ``legacy``, which the running workers poll. Whether ``default`` exists does not matter: a worker
    started with ``--pool roost`` creates it, and an empty pool is no reason to move the deployments.
    """
    if requested:
        return requested, ""
    if _holds_roost_deployments(client, legacy) and not _holds_roost_deployments(client, default):
        return legacy, (f"legacy name kept: {legacy} holds roost's deployments and its workers poll it; to move to "
                        f"{default}, run roost setup --pool {default} and restart the workers with --pool {default}")
    return default, ""


def _holds_roost_deployments(client: SyncPrefectClient, pool: str) -> bool:
    return bool(client.read_deployments(
        work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])),
        deployment_filter=DeploymentFilter(tags=DeploymentFilterTags(all_=["roost"])), limit=1))


# --- the pool and its queues -------------------------------------------------------------------------


def engine_command(warm_fork: bool = False, source: Path | None = None) -> str:
    """The flow-run command the pool's workers run: this venv's ``python -m prefect.engine``.

    Set explicitly, a process worker starts the engine directly instead of through Prefect's
    workspace supervisor (a second Python process that imports Prefect first): about 3 s less per
    run (``benchmarks/bench_orchestration.py --via-deployment``). Workers therefore need roost's
    venv at this same path, as they need the checkout at the path the deployments load from.
    ``warm_fork``: the client of the checkout's (``source``'s) ``scripts/warm_fork.py`` instead, which
    has the host's warm fork server fork the run, and runs the command above where there is none.
    """
    if warm_fork:
        client = (source or repo_root()) / "scripts" / "warm_fork.py"
        return f"{shlex.quote(sys.executable)} -S {shlex.quote(str(client))} client"
    return f"{shlex.quote(sys.executable)} -m prefect.engine"


def work_pool(client: SyncPrefectClient, pool: str, command: str) -> SetupItem:
    """The ``process`` pool ``pool`` with ``command`` as its job command, created or repaired."""
    try:
        existing = client.read_work_pool(pool)
    except ObjectNotFound:
        template = ProcessWorker.get_default_base_job_template()
        template["variables"]["properties"]["command"]["default"] = command
        client.create_work_pool(WorkPoolCreate(
            name=pool, type="process", description="roost: one work queue per serving host, a worker on each",
            base_job_template=template))
        return SetupItem(kind="work-pool", name=pool, status="created", detail=f"process; {command}")
    if existing.type != "process":
        raise UserError(f"work pool {pool} exists with type {existing.type!r}; roost needs a 'process' pool: "
                        "pass --pool with another name or delete that pool")
    template = existing.base_job_template
    props = template.get("variables", {}).get("properties", {})
    if "command" in props and props["command"].get("default") != command:
        props["command"]["default"] = command
        client.update_work_pool(pool, WorkPoolUpdate(base_job_template=template))
        return SetupItem(kind="work-pool", name=pool, status="updated", detail=f"command: {command}")
    return SetupItem(kind="work-pool", name=pool, status="unchanged", detail=f"process; {command}")


def work_queue(client: SyncPrefectClient, pool: str, queue: str) -> SetupItem:
    """The work queue ``queue`` of ``pool``, created when missing: from the pool's own ``default`` queue while
    nothing uses it (a fresh pool's: no worker ever polled it, no deployment is in it), which Prefect creates with
    every pool and will not delete; left as it is, no worker would poll it and the UI would show it Not Ready."""
    try:
        client.read_work_queue_by_name(queue, work_pool_name=pool)
    except ObjectNotFound:
        description = (f"runs for {queue}: start its worker with "
                       f"`{WORKER_ENV} prefect worker start --pool {pool} --work-queue {queue}`")
        unused = _unused_default_queue(client, pool)
        if unused is not None:
            client.update_work_queue(unused, name=queue, description=description)
            return SetupItem(kind="work-queue", name=f"{pool}/{queue}", status="created",
                             detail="the pool's unused default queue, renamed")
        client.create_work_queue(name=queue, work_pool_name=pool, description=description)
        return SetupItem(kind="work-queue", name=f"{pool}/{queue}", status="created")
    return SetupItem(kind="work-queue", name=f"{pool}/{queue}", status="unchanged")


def _unused_default_queue(client: SyncPrefectClient, pool: str) -> UUID | None:
    """The id of ``pool``'s queue ``default`` when it is the pool's default queue, no worker ever polled it and
    no deployment is in it; else None."""
    try:
        default = client.read_work_queue_by_name("default", work_pool_name=pool)
        pool_default = client.read_work_pool(pool).default_queue_id
    except ObjectNotFound:
        return None
    if default.id != pool_default or default.last_polled is not None:
        return None
    used = client.read_deployments(work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])),
                                   work_queue_filter=WorkQueueFilter(name=WorkQueueFilterName(any_=["default"])),
                                   limit=1)
    return None if used else default.id


# --- the sweep and the workers -------------------------------------------------------------------------


def sweep_wanted(hosts: Sequence[str]) -> tuple[bool, str]:
    """Whether ``sweep/<pool>`` is deployed for ``hosts``, and the report's line on it."""
    if len(hosts) >= MIN_SWEEP_HOSTS:
        return True, f"sweep on: across {', '.join(hosts)} (queue {SWEEP_QUEUE}, taken by the first worker)"
    return False, (f"sweep off: {len(hosts)} host set up; a sweep lands variants across hosts, so setup deploys "
                   f"it once {MIN_SWEEP_HOSTS} are (`roost sweep` runs on one host without it)")


def remove_sweep(client: SyncPrefectClient, pool: str, why: str) -> list[SetupItem]:
    """Delete ``sweep/<pool>`` and the pool's ``sweep`` queue that an earlier run made; a ``skipped`` item when none."""
    items: list[SetupItem] = []
    name = f"sweep/{pool}"
    try:
        dep = client.read_deployment_by_name(name)
    except ObjectNotFound:
        dep = None
    if dep is not None and dep.work_pool_name == pool:
        client.delete_deployment(dep.id)
        items.append(SetupItem(kind="deployment", name=name, status="removed", detail=why))
    try:
        queue = client.read_work_queue_by_name(SWEEP_QUEUE, work_pool_name=pool)
    except ObjectNotFound:
        queue = None
    if queue is not None:
        client.delete_work_queue_by_id(queue.id)
        items.append(SetupItem(kind="work-queue", name=f"{pool}/{SWEEP_QUEUE}", status="removed", detail=why))
    return items or [SetupItem(kind="deployment", name=name, status="skipped", detail=why)]


def worker_commands(pool: str, hosts: Sequence[str], *, sweep: bool) -> list[str]:
    """The worker to start on each host (its queue); with ``sweep``, the first host's also takes the sweeps."""
    base = f"{WORKER_ENV} prefect worker start --pool {shlex.quote(pool)}"
    return [f"{base} --work-queue {h}" + (f" --work-queue {SWEEP_QUEUE}" if sweep and i == 0 else "")
            for i, h in enumerate(hosts)]


def main() -> None:  # pragma: no cover (scripts/install-worker's; tests/scripts covers it through the script)
    """Print the pool a worker should poll: the one roost's deployments use (``resolve_pool`` without ``--pool``)."""
    with get_client(sync_client=True) as client:
        if (exc := client.api_healthcheck()) is not None:
            print(f"the Prefect API does not answer ({type(exc).__name__}: {exc})", file=sys.stderr)
            raise SystemExit(1)
        pool, note = resolve_pool(client, None)
    if note:
        print(note, file=sys.stderr)
    print(pool)


if __name__ == "__main__":  # pragma: no cover
    main()
