"""``roost setup``: put everything roost needs on a Prefect server, idempotently.

In order: the block types (``roost-host``, ``model-profile``, ``roost-slack-notifier``) and one
document per built-in host and profile; the ``process`` work pool; one work queue per host; the
per-host global concurrency limits ``roost-serve-<host>`` (one slot, created by
``tasks.host_slot.ensure_host_limit``) the serve stage takes with ``strict=True``; the automation
that marks a roost flow run crashed when its heartbeats stop (a worker or machine that died
mid-run); and the deployments of ``deployments.deploy``.

Each object is read first and written only when missing or different, and reported as
``created``, ``updated`` or ``unchanged``; a second run reports everything ``unchanged`` and writes
nothing. A block document someone edited (in the UI) is ``kept``, not reverted, unless
``reset_blocks``.

Host documents saved by earlier releases (block type ``spark-host``) are ``migrated``: each is
copied, edits included, into a ``roost-host`` document of the same name when that name has none
yet (before the built-in would be saved under it). The ``spark-host`` document is left in place
for workers not yet updated, and later runs say whether it still matches; one that no longer
validates is not migrated (``kept``, with the reason) and the built-in is not saved over its name.
The ``spark-host`` block type is not registered on a server that never had it.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Literal

from prefect.automations import Automation
from prefect.blocks.core import Block
from prefect.blocks.system import Secret
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.schedules import CronSchedule
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL
from prefect.workers.process import ProcessWorker
from pydantic import BaseModel, Field, SecretStr, ValidationError

from blocks.hosts import LEGACY_HOST_SLUG, HostBlock, builtin_host_documents, host_fields
from blocks.profiles import ModelProfileBlock, builtin_profile_documents
from blocks.resolve import VLLM_API_KEY_BLOCK, all_profiles, load_host, read_documents, validation_problems
from blocks.slack import SlackNotifier
from deployments.deploy import (
    DEFAULT_CRON,
    DEFAULT_POOL,
    DEFAULT_TIMEZONE,
    apply_deployment,
    build_deployments,
)
from roost.errors import UserError
from roost.hosts import HostProfile
from tasks.host_slot import SLOTS_PER_HOST, ensure_host_limit, host_limit_name

ZOMBIE_AUTOMATION = "roost-crash-zombie-runs"
DEFAULT_ZOMBIE_AFTER_S = 90.0
DEFAULT_HOSTS = ("spark", "cpu")

Kind = Literal["block-type", "block", "secret", "work-pool", "work-queue", "concurrency-limit", "automation",
               "deployment"]
Status = Literal["created", "updated", "migrated", "unchanged", "kept"]
CHANGED: tuple[Status, ...] = ("created", "updated", "migrated")
"""The statuses of an object this run wrote."""


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
        """The items this run created, updated or migrated (empty on a repeated run)."""
        return [i for i in self.items if i.status in CHANGED]


def _api_url() -> str:
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
        # before writing anything: an unknown host changes nothing (a legacy spark-host document counts)
        host_profiles = [load_host(h) for h in hosts]
        report.items += _block_types(client)
        report.items += _host_documents(client, reset=reset_blocks)
        report.items += [_builtin_document(client, name, block, reset=reset_blocks)
                         for name, block in builtin_profile_documents().items()]
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
    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as exc:
        raise UserError(f"--cron {cron!r} --timezone {timezone!r}: {exc.errors()[0]['msg']}") from None


# --- blocks ---------------------------------------------------------------------------------------


def _block_types(client: SyncPrefectClient) -> list[SetupItem]:
    items: list[SetupItem] = []
    block_cls: type[Block]
    # the Slack block type too, so that the UI offers it (roost saves no Slack document: it holds a token)
    for block_cls in (HostBlock, ModelProfileBlock, SlackNotifier):
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


def _read_data(client: SyncPrefectClient, slug: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.read_block_document_by_name(name=name, block_type_slug=slug).data)
    except ObjectNotFound:
        return None


def _builtin_document(client: SyncPrefectClient, name: str, block: Block, *, reset: bool,
                      note: str = "") -> SetupItem:
    """Save the built-in document ``name`` when missing; report an edited one ``kept`` (reverted with ``reset``)."""
    slug = block.get_block_type_slug()
    want = block.model_dump(mode="json", exclude={"block_type_slug"})
    have = _read_data(client, slug, name)
    label = f"{slug}/{name}"
    if have is None:
        block.save(name)
        return SetupItem(kind="block", name=label, status="created", detail=note)
    if {k: have.get(k) for k in want} == want:
        return SetupItem(kind="block", name=label, status="unchanged", detail=note)
    if reset:
        block.save(name, overwrite=True)
        return SetupItem(kind="block", name=label, status="updated", detail=_join("reset to the built-in", note))
    differ = sorted(k for k in want if have.get(k) != want[k])
    return SetupItem(kind="block", name=label, status="kept",
                     detail=_join(f"edited ({', '.join(differ)}); kept (--reset-blocks reverts it)", note))


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _differing_fields(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The ``HostProfile`` fields whose values differ between two host documents' data."""
    return sorted(k for k in HostProfile.model_fields if k != "name" and a.get(k) != b.get(k))


def _host_documents(client: SyncPrefectClient, *, reset: bool) -> list[SetupItem]:
    """The built-in host documents, and the migration of every legacy ``spark-host`` document.

    A legacy document whose name has no ``roost-host`` document yet is migrated (its edits kept),
    except a built-in's with ``reset``, which gets the built-in. Where both exist, roost reads the
    ``roost-host`` one and the detail says whether the legacy copy still matches it.
    """
    slug = HostBlock.get_block_type_slug()
    builtins = builtin_host_documents()
    legacy = read_documents(LEGACY_HOST_SLUG, client)
    items: list[SetupItem] = []
    for name in [*builtins, *(n for n in legacy if n not in builtins)]:
        old = legacy.get(name)
        have = _read_data(client, slug, name) if old is not None else None
        if old is not None and have is None and not (reset and name in builtins):
            items.append(_migrate(name, old, builtins.get(name)))
            continue
        note = _legacy_note(name, old, have)
        if name in builtins:
            items.append(_builtin_document(client, name, builtins[name], reset=reset, note=note))
        else:
            items.append(SetupItem(kind="block", name=f"{slug}/{name}", status="unchanged", detail=note))
    return items


def _migrate(name: str, old: dict[str, Any], builtin: HostBlock | None) -> SetupItem:
    """Copy the legacy document ``spark-host/<name>`` into ``roost-host/<name>``, values unchanged."""
    try:
        block = HostBlock(**host_fields(old, name))
    except ValidationError as exc:
        return SetupItem(kind="block", name=f"{LEGACY_HOST_SLUG}/{name}", status="kept",
                         detail=f"invalid ({validation_problems(exc)}): not migrated; fix it in the Prefect UI "
                                "(Blocks) and run roost setup again, or delete it")
    block.save(name)
    detail = f"from {LEGACY_HOST_SLUG}/{name}"
    if builtin is not None and (edited := _differing_fields(old, builtin.model_dump(mode="json"))):
        detail += f", edits kept ({', '.join(edited)})"
    return SetupItem(kind="block", name=f"{block.get_block_type_slug()}/{name}", status="migrated",
                     detail=f"{detail}; {LEGACY_HOST_SLUG}/{name} stays for workers not yet updated")


def _legacy_note(name: str, old: dict[str, Any] | None, have: dict[str, Any] | None) -> str:
    """What to tell about the legacy document ``spark-host/<name>`` next to its ``roost-host`` one."""
    if old is None:
        return ""
    legacy = f"{LEGACY_HOST_SLUG}/{name}"
    if have is None:
        return f"{legacy} not migrated (--reset-blocks)"
    if differ := _differing_fields(old, have):
        return (f"{legacy} differs ({', '.join(differ)}): roost reads this document, edit it here; "
                "delete the legacy one once every worker runs this version")
    return f"{legacy} is a legacy copy: delete it once every worker runs this version"


def _api_key_secret(client: SyncPrefectClient, *, store: bool) -> SetupItem:
    """Report the optional ``roost-vllm-api-key`` Secret; with ``store``, save ``VLLM_API_KEY`` into it."""
    name = VLLM_API_KEY_BLOCK
    current = _read_data(client, Secret.get_block_type_slug(), name)
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
    return f"{shlex.quote(sys.executable)} -m prefect.engine"


def _work_pool(client: SyncPrefectClient, pool: str) -> SetupItem:
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
    try:
        client.read_work_queue_by_name(host, work_pool_name=pool)
    except ObjectNotFound:
        client.create_work_queue(name=host, work_pool_name=pool,
                                 description=f"runs for host {host}: start its worker with "
                                             f"`prefect worker start --pool {pool} --work-queue {host}`")
        return SetupItem(kind="work-queue", name=f"{pool}/{host}", status="created")
    return SetupItem(kind="work-queue", name=f"{pool}/{host}", status="unchanged")


def _host_limit(client: SyncPrefectClient, host: str) -> SetupItem:
    """The host's serving limit, created or repaired by ``tasks.host_slot`` (its one definition)."""
    status = ensure_host_limit(host, client=client)
    detail = f"limit {SLOTS_PER_HOST}" + (", active (repaired)" if status == "updated" else "")
    return SetupItem(kind="concurrency-limit", name=host_limit_name(host), status=status, detail=detail)


# --- zombie runs ---------------------------------------------------------------------------------


def zombie_automation(after_s: float = DEFAULT_ZOMBIE_AFTER_S) -> Automation:
    """Mark a roost flow run Crashed when no heartbeat (nor a final state) follows one within ``after_s``.

    Flow runs of roost deployments send a heartbeat every ``deployments.deploy.HEARTBEAT_S``; a run
    whose worker (or machine) died stops sending them. Only runs tagged ``roost`` are matched.
    """
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
