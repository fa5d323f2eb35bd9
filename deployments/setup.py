"""``roost setup``: put everything roost needs on a Prefect server, idempotently.

In order: the block types (``spark-host``, ``model-profile``) and one document per built-in host
and profile; the ``process`` work pool; one work queue per host; the per-host global concurrency
limits ``roost-serve-<host>`` (limit 1) the serve stage takes with ``strict=True``; the automation
that marks a roost flow run crashed when its heartbeats stop (a worker or machine that died
mid-run); and the deployments of ``deployments.deploy``.

Each object is read first and written only when missing or different, and reported as
``created``, ``updated`` or ``unchanged``; a second run reports everything ``unchanged`` and writes
nothing. A block document someone edited (in the UI) is ``kept``, not reverted, unless
``reset_blocks``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from deployments.deploy import (
    DEFAULT_CRON,
    DEFAULT_POOL,
    DEFAULT_TIMEZONE,
    apply_deployment,
    build_deployments,
)
from roost.errors import UserError

if TYPE_CHECKING:
    from prefect.automations import Automation
    from prefect.blocks.core import Block
    from prefect.client.orchestration import SyncPrefectClient

ZOMBIE_AUTOMATION = "roost-crash-zombie-runs"
DEFAULT_ZOMBIE_AFTER_S = 90.0
DEFAULT_HOSTS = ("spark", "cpu")

Kind = Literal["block-type", "block", "secret", "work-pool", "work-queue", "concurrency-limit", "automation",
               "deployment"]
Status = Literal["created", "updated", "unchanged", "kept"]


class SetupItem(BaseModel):
    """One object ``roost setup`` manages and what it did to it."""

    kind: Kind
    name: str
    status: Status
    detail: str = ""


class SetupReport(BaseModel):
    api_url: str
    pool: str
    hosts: list[str]
    items: list[SetupItem] = Field(default_factory=list)

    @property
    def changed(self) -> list[SetupItem]:
        """The items this run created or updated (empty on a repeated run)."""
        return [i for i in self.items if i.status in ("created", "updated")]


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise UserError("PREFECT_API_URL is not set: start a server (`prefect server start`) and "
                        "`export PREFECT_API_URL=http://127.0.0.1:4200/api` (or your team's server) first")
    return str(url)


def setup(pool: str = DEFAULT_POOL, hosts: list[str] | None = None, *, source: Path | None = None,
          cron: str | None = DEFAULT_CRON, timezone: str = DEFAULT_TIMEZONE,
          zombie_after_s: float = DEFAULT_ZOMBIE_AFTER_S, reset_blocks: bool = False,
          store_api_key: bool = False) -> SetupReport:
    """Apply roost's blocks, work pool, queues, limits, automation and deployments to the API server."""
    from prefect.client.orchestration import get_client

    from blocks.resolve import all_profiles, load_host

    hosts = list(hosts or DEFAULT_HOSTS)
    if not hosts or any(not h for h in hosts):
        raise UserError("--hosts needs at least one host name, comma-separated (e.g. spark,cpu)")
    if cron is not None:
        _check_cron(cron, timezone)
    if zombie_after_s <= 30:
        raise UserError(f"--zombie-after {zombie_after_s:g} s is too short: heartbeats come every 30 s at best; use > 30")
    report = SetupReport(api_url=_api_url(), pool=pool, hosts=hosts)
    with get_client(sync_client=True) as client:
        if (exc := client.api_healthcheck()) is not None:
            raise UserError(f"the Prefect API at {report.api_url} does not answer ({type(exc).__name__}: {exc}); "
                            "start it with `prefect server start` or fix PREFECT_API_URL")
        host_profiles = [load_host(h) for h in hosts]  # before writing anything: an unknown host changes nothing
        report.items += _block_types(client)
        report.items += _block_documents(client, reset=reset_blocks)
        report.items.append(_api_key_secret(client, store=store_api_key))
        report.items.append(_work_pool(client, pool))
        for h in host_profiles:
            report.items.append(_work_queue(client, pool, h.name))
            report.items.append(_host_limit(client, h.name))
        report.items.append(_zombie_automation(client, zombie_after_s))
    profiles = all_profiles()
    for dep in build_deployments(host_profiles, pool=pool, profiles=profiles, source=source, cron=cron,
                                 timezone=timezone):
        status, changed = apply_deployment(dep)
        report.items.append(SetupItem(kind="deployment", name=dep.full_name, status=status,
                                      detail=("changed: " + ", ".join(changed)) if changed else ""))
    return report


def _check_cron(cron: str, timezone: str) -> None:
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as exc:
        raise UserError(f"--cron {cron!r} --timezone {timezone!r}: {exc.errors()[0]['msg']}") from None


# --- blocks ---------------------------------------------------------------------------------------


def _block_types(client: SyncPrefectClient) -> list[SetupItem]:
    from prefect.exceptions import ObjectNotFound

    from blocks.hosts import SparkHost
    from blocks.profiles import ModelProfileBlock
    from blocks.slack import SlackNotifier

    items: list[SetupItem] = []
    block_cls: type[Block]
    # the Slack block type too, so that the UI offers it (roost saves no Slack document: it holds a token)
    for block_cls in (SparkHost, ModelProfileBlock, SlackNotifier):
        slug = block_cls.get_block_type_slug()
        status: Status = "unchanged"
        try:
            client.read_block_type_by_slug(slug)
        except ObjectNotFound:
            status = "created"
        if status == "unchanged":
            try:
                client.read_block_schema_by_checksum(block_cls._calculate_schema_checksum(),
                                                     version=block_cls.get_block_schema_version())
            except ObjectNotFound:
                status = "updated"
        if status != "unchanged":
            block_cls.register_type_and_schema()
        items.append(SetupItem(kind="block-type", name=slug, status=status,
                               detail="new schema" if status == "updated" else ""))
    return items


def _block_documents(client: SyncPrefectClient, *, reset: bool) -> list[SetupItem]:
    from prefect.exceptions import ObjectNotFound

    from blocks.hosts import builtin_host_documents
    from blocks.profiles import builtin_profile_documents

    items: list[SetupItem] = []
    docs: dict[str, Block] = {**builtin_host_documents(), **builtin_profile_documents()}
    for name, block in docs.items():
        slug = block.get_block_type_slug()
        want = block.model_dump(mode="json", exclude={"block_type_slug"})
        try:
            have = dict(client.read_block_document_by_name(name=name, block_type_slug=slug).data)
        except ObjectNotFound:
            have = None
        label = f"{slug}/{name}"
        if have is None:
            block.save(name)
            items.append(SetupItem(kind="block", name=label, status="created"))
        elif {k: have.get(k) for k in want} == want:
            items.append(SetupItem(kind="block", name=label, status="unchanged"))
        elif reset:
            block.save(name, overwrite=True)
            items.append(SetupItem(kind="block", name=label, status="updated", detail="reset to the built-in"))
        else:
            differ = sorted(k for k in want if have.get(k) != want[k])
            items.append(SetupItem(kind="block", name=label, status="kept",
                                   detail=f"edited ({', '.join(differ)}); kept (--reset-blocks reverts it)"))
    return items


def _api_key_secret(client: SyncPrefectClient, *, store: bool) -> SetupItem:
    """Report the optional ``roost-vllm-api-key`` Secret; with ``store``, save ``VLLM_API_KEY`` into it."""
    import os

    from prefect.blocks.system import Secret
    from prefect.exceptions import ObjectNotFound
    from pydantic import SecretStr

    from blocks.resolve import VLLM_API_KEY_BLOCK

    name = VLLM_API_KEY_BLOCK
    try:
        current = client.read_block_document_by_name(name=name, block_type_slug=Secret.get_block_type_slug()).data
    except ObjectNotFound:
        current = None
    if not store:
        detail = "present" if current is not None else (
            "absent (optional: without it and without VLLM_API_KEY each land run uses a one-off key; "
            "`roost setup --store-vllm-api-key` saves $VLLM_API_KEY)")
        return SetupItem(kind="secret", name=name, status="unchanged", detail=detail)
    key = os.environ.get("VLLM_API_KEY")
    if not key:
        raise UserError("--store-vllm-api-key: VLLM_API_KEY is not set in this shell; export the key first")
    value: Any = current.get("value") if current is not None else None
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value == key:
        return SetupItem(kind="secret", name=name, status="unchanged", detail="holds $VLLM_API_KEY")
    Secret(value=SecretStr(key)).save(name, overwrite=True)
    return SetupItem(kind="secret", name=name, status="created" if current is None else "updated",
                     detail="saved $VLLM_API_KEY")


# --- work pool, queues, limits ---------------------------------------------------------------------


def engine_command() -> str:
    """The flow-run command the pool's workers run: this venv's ``python -m prefect.engine``.

    Set explicitly, a process worker starts the engine directly instead of through Prefect's
    workspace supervisor (a second Python process that imports Prefect first): about 3 s less per
    run (``benchmarks/bench_orchestration.py --via-deployment``). Workers therefore need roost's
    venv at this same path, as they need the checkout at the path the deployments load from.
    """
    import shlex
    import sys

    return f"{shlex.quote(sys.executable)} -m prefect.engine"


def _work_pool(client: SyncPrefectClient, pool: str) -> SetupItem:
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound
    from prefect.workers.process import ProcessWorker

    command = engine_command()
    try:
        existing = client.read_work_pool(pool)
    except ObjectNotFound:
        template = ProcessWorker.get_default_base_job_template()
        template["variables"]["properties"]["command"]["default"] = command
        client.create_work_pool(WorkPoolCreate(
            name=pool, type="process", description="roost: one work queue per serving host (a worker per Spark)",
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


def _work_queue(client: SyncPrefectClient, pool: str, host: str) -> SetupItem:
    from prefect.exceptions import ObjectNotFound

    try:
        client.read_work_queue_by_name(host, work_pool_name=pool)
    except ObjectNotFound:
        client.create_work_queue(name=host, work_pool_name=pool,
                                 description=f"runs for host {host}: start its worker with "
                                             f"`prefect worker start --pool {pool} --work-queue {host}`")
        return SetupItem(kind="work-queue", name=f"{pool}/{host}", status="created")
    return SetupItem(kind="work-queue", name=f"{pool}/{host}", status="unchanged")


def _host_limit(client: SyncPrefectClient, host: str) -> SetupItem:
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    from tasks.serve import host_limit_name

    name = host_limit_name(host)
    try:
        existing = client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1, active=True))
        return SetupItem(kind="concurrency-limit", name=name, status="created", detail="limit 1")
    if existing.limit != 1 or not existing.active:
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=1, active=True))
        return SetupItem(kind="concurrency-limit", name=name, status="updated",
                         detail=f"limit {existing.limit} -> 1" + ("" if existing.active else ", activated"))
    return SetupItem(kind="concurrency-limit", name=name, status="unchanged", detail="limit 1")


# --- zombie runs ---------------------------------------------------------------------------------


def zombie_automation(after_s: float = DEFAULT_ZOMBIE_AFTER_S) -> Automation:
    """Mark a roost flow run Crashed when no heartbeat (nor a final state) follows one within ``after_s``.

    Flow runs of roost deployments send a heartbeat every ``deployments.deploy.HEARTBEAT_S``; a run
    whose worker (or machine) died stops sending them. Only runs tagged ``roost`` are matched.
    """
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    return Automation(
        name=ZOMBIE_AUTOMATION,
        description="roost: a flow run whose heartbeats stopped (its worker or machine died) is marked Crashed.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.role": "tag", "prefect.resource.id": "prefect.tag.roost"}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=dt.timedelta(seconds=after_s),
        ),
        actions=[ChangeFlowRunState(name=None, state=StateType.CRASHED, force=False,
                                    message="roost: no heartbeat from this run's worker; marked crashed")],
    )


def _canon(obj: Any) -> Any:
    """A comparable form of an automation: JSON, without server-assigned ids, sets (lists of strings) sorted."""
    if isinstance(obj, dict):
        return {k: _canon(v) for k, v in obj.items() if k not in ("id", "created", "updated")}
    if isinstance(obj, list):
        items = [_canon(v) for v in obj]
        return sorted(items) if all(isinstance(v, str) for v in items) else items
    return obj


def _zombie_automation(client: SyncPrefectClient, after_s: float) -> SetupItem:
    from prefect.events.schemas.automations import AutomationCore

    want = zombie_automation(after_s)
    core = AutomationCore(**want.model_dump(exclude={"id"}))
    want_c = _canon(core.model_dump(mode="json"))
    existing = client.read_automations_by_name(ZOMBIE_AUTOMATION)
    if not existing:
        client.create_automation(core)
        return SetupItem(kind="automation", name=ZOMBIE_AUTOMATION, status="created", detail=f"after {after_s:g} s")
    first, *extra = existing
    for a in extra:  # two with the same name would fire twice
        client.delete_automation(a.id)
    have_c = _canon(AutomationCore(**first.model_dump(exclude={"id"})).model_dump(mode="json"))
    if have_c == want_c and not extra:
        return SetupItem(kind="automation", name=ZOMBIE_AUTOMATION, status="unchanged", detail=f"after {after_s:g} s")
    # replaced rather than updated: the server's update endpoint refuses the client's owner_resource field
    client.delete_automation(first.id)
    client.create_automation(core)
    return SetupItem(kind="automation", name=ZOMBIE_AUTOMATION, status="updated", detail=f"after {after_s:g} s")
