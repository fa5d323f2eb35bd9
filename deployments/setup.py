"""``roost setup``: put everything roost needs on a Prefect server, idempotently.

In order: the block types (``roost-host``, ``model-profile``, ``roost-slack-notifier``) and one
document per built-in host and profile; the ``process`` work pool (``roost``, or the legacy
``roost-spark`` an earlier release made, which its workers poll: ``deployments.pool``); one work queue per host; the
per-host global concurrency limits ``roost-serve-<host>`` (one slot, created by
``tasks.host_slot.ensure_host_limit``) the serve stage takes with ``strict=True``; the automation
that marks a roost flow run crashed when its heartbeats stop (a worker or machine that died
mid-run); the crash alert (a Prefect notification block made from the ``roost-slack`` Slack settings,
and the automation that sends it when a roost run enters Crashed: the run's own process, which
sends roost's other Slack messages, is gone); and the deployments of ``deployments.deploy``. The
sweep's queue and deployment exist only with two hosts or more; the report names the worker to start
on each host, which together serve every queue a deployment is on.

The hosts set up are those that exist or are named: every saved host document (``roost-host``, or
the legacy ``spark-host``), the hosts named with ``--hosts``, and this machine's CPU host ``cpu``.
A built-in host that is none of these (``spark`` on a CPU-only box) is skipped, and the report says
so: its deployments would sit Not Ready, their nightly runs queued for a worker that does not exist.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.automations import Automation
from prefect.blocks.core import Block
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.blocks.system import Secret
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.schedules import CronSchedule
from prefect.events.actions import ChangeFlowRunState, SendNotification
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL
from pydantic import SecretStr, ValidationError

from blocks.hosts import LEGACY_HOST_SLUG, HostBlock, builtin_host_documents, host_fields
from blocks.profiles import ModelProfileBlock, builtin_profile_documents
from blocks.resolve import VLLM_API_KEY_BLOCK, all_profiles, load_host, read_documents, validation_problems
from blocks.slack import SLACK_BLOCK, STAGE_LABEL, SlackNotifier
from blocks.store import StoreCredentialsBlock
from deployments._prefect_compat import block_schema_checksum
from deployments.deploy import (
    DEFAULT_CRON,
    DEFAULT_TIMEZONE,
    HEARTBEAT_S,
    SWEEP_QUEUE,
    apply_deployment,
    build_deployments,
    build_sweep_deployment,
)
from deployments.pool import (
    engine_command,
    remove_sweep,
    resolve_pool,
    sweep_wanted,
    work_pool,
    work_queue,
    worker_commands,
)
from deployments.report import CHANGED, Kind, SetupItem, SetupReport, Status
from roost.errors import UserError
from roost.hosts import HOSTS, HostProfile
from roost.settings import environment
from tasks.host_slot import SLOTS_PER_HOST, ensure_host_limit, host_limit_name

ZOMBIE_AUTOMATION = "roost-crash-zombie-runs"
DEFAULT_ZOMBIE_AFTER_S = 90.0
CRASH_ALERT_AUTOMATION = "roost-crashed-run-alert"
CRASH_ALERT_BLOCK = "roost-crash-alerts"
"""The ``custom-webhook`` notification block the crash alert is sent through (made from ``roost-slack``)."""
LOCAL_HOSTS = ("cpu",)
"""The hosts this machine serves on without any setup: always set up."""

__all__ = ["CHANGED", "Kind", "SetupItem", "SetupReport", "Status", "engine_command", "setup"]
_work_pool = work_pool  # its earlier name (tests/deployments/test_warm_fork.py, benchmarks/bench_orchestration.py)


def _api_url() -> str:
    url = PREFECT_API_URL.value()
    if not url:
        raise UserError("PREFECT_API_URL is not set: start a server (`prefect server start`) and "
                        "`export PREFECT_API_URL=http://127.0.0.1:4200/api` (or your team's server) first")
    return str(url)


def setup(pool: str | None = None, hosts: list[str] | None = None, *, source: Path | None = None,
          cron: str | None = DEFAULT_CRON, timezone: str = DEFAULT_TIMEZONE,
          zombie_after_s: float = DEFAULT_ZOMBIE_AFTER_S, reset_blocks: bool = False,
          store_api_key: bool = False, warm_fork: bool = False) -> SetupReport:
    """Apply roost's blocks, work pool, queues, limits, automations and deployments to the API server.

    ``hosts`` are set up besides the ones that exist (saved host documents, and ``LOCAL_HOSTS``).
    ``pool``: None is ``roost``, or the legacy pool that holds roost's deployments (``resolve_pool``).
    """
    named = list(hosts or [])
    if any(not h for h in named):
        raise UserError("--hosts: a host name is empty; name hosts comma-separated (e.g. spark,cpu)")
    if cron is not None:
        _check_cron(cron, timezone)
    if zombie_after_s <= HEARTBEAT_S:
        raise UserError(f"--zombie-after {zombie_after_s:g} s is too short: heartbeats come every {HEARTBEAT_S} s at "
                        f"best; use > {HEARTBEAT_S}")
    if any(h == SWEEP_QUEUE for h in named):
        raise UserError(f"--hosts: {SWEEP_QUEUE!r} is the sweep's work queue; name the host otherwise")
    report = SetupReport(api_url=_api_url(), pool=pool or "", hosts=[])
    with get_client(sync_client=True) as client:
        if (exc := client.api_healthcheck()) is not None:
            raise UserError(f"the Prefect API at {report.api_url} does not answer ({type(exc).__name__}: {exc}); "
                            "start it with `prefect server start` or fix PREFECT_API_URL")
        # before writing anything: an unknown host changes nothing (a legacy spark-host document counts)
        host_profiles, report.skipped_hosts = _resolve_hosts(client, named)
        report.hosts = [h.name for h in host_profiles]
        report.pool, report.pool_note = resolve_pool(client, pool)
        sweep, report.sweep = sweep_wanted(report.hosts)
        report.items += _block_types(client)
        report.items += _host_documents(client, reset=reset_blocks, hosts=report.hosts)
        report.items += [_builtin_document(client, name, block, reset=reset_blocks)
                         for name, block in builtin_profile_documents().items()]
        report.items.append(_api_key_secret(client, store=store_api_key))
        pool_item = work_pool(client, report.pool, engine_command(warm_fork, source))
        pool_item.detail = _join(pool_item.detail, report.pool_note)
        report.items.append(pool_item)
        for h in host_profiles:
            report.items.append(work_queue(client, report.pool, h.name))
            report.items.append(_host_limit(client, h.name))
        report.items += ([work_queue(client, report.pool, SWEEP_QUEUE)] if sweep
                         else remove_sweep(client, report.pool, report.sweep))
        report.items.append(_automation(client, zombie_automation(zombie_after_s), f"after {zombie_after_s:g} s"))
        alert_items, report.crash_alerts = _crash_alerts(client)
        report.items += alert_items
    report.workers = worker_commands(report.pool, report.hosts, sweep=sweep)
    profiles = all_profiles()
    deployments = build_deployments(host_profiles, pool=report.pool, profiles=profiles, source=source, cron=cron,
                                    timezone=timezone)
    if sweep:
        deployments.append(build_sweep_deployment(report.pool, host_profiles, profiles=profiles, source=source))
    for dep in deployments:
        status, changed = apply_deployment(dep)
        report.items.append(SetupItem(kind="deployment", name=dep.full_name, status=status,
                                      detail=("changed: " + ", ".join(changed)) if changed else ""))
    return report


def _check_cron(cron: str, timezone: str) -> None:
    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as exc:
        raise UserError(f"--cron {cron!r} --timezone {timezone!r}: {exc.errors()[0]['msg']}") from None


# --- hosts ----------------------------------------------------------------------------------------


def select_hosts(named: Sequence[str], saved: Sequence[str], local: Sequence[str] = LOCAL_HOSTS) -> list[str]:
    """The hosts ``roost setup`` sets up: the named ones, then the saved ones, then the local ones, each once."""
    return list(dict.fromkeys([*named, *saved, *local]))


def skipped_builtin_hosts(selected: Sequence[str]) -> dict[str, str]:
    """The built-in hosts left out of ``selected``, each with why and how to add it."""
    return {h: f"no roost-host block saved and not named: once its worker can run, `roost setup --hosts {h}`"
            for h in HOSTS if h not in selected}


def _resolve_hosts(client: SyncPrefectClient, named: list[str]) -> tuple[list[HostProfile], dict[str, str]]:
    """The profiles of the hosts to set up, and the hosts skipped (name -> why).

    A named host that is unknown or invalid is a UserError; a saved document that does not validate
    is skipped (the migration item, or ``roost run --host``, says what is wrong with it).
    """
    saved = sorted(set(read_documents(HostBlock.get_block_type_slug(), client))
                   | set(read_documents(LEGACY_HOST_SLUG, client)))
    profiles = [load_host(h) for h in named]
    skipped: dict[str, str] = {}
    for h in select_hosts(named, saved)[len(set(named)):]:
        try:
            profiles.append(load_host(h))
        except UserError as exc:
            skipped[h] = f"not set up: {exc}"
    selected = [p.name for p in profiles]
    return profiles, skipped_builtin_hosts(selected) | skipped


# --- blocks ---------------------------------------------------------------------------------------


def _block_types(client: SyncPrefectClient) -> list[SetupItem]:
    items: list[SetupItem] = []
    block_cls: type[Block]
    # the Slack block type too, so that the UI offers it (roost saves no Slack document: it holds a token)
    for block_cls in (HostBlock, ModelProfileBlock, SlackNotifier, StoreCredentialsBlock):
        slug = block_cls.get_block_type_slug()
        status: Status = "unchanged"
        try:
            client.read_block_type_by_slug(slug)
        except ObjectNotFound:
            status = "created"
        if status == "unchanged":
            try:
                client.read_block_schema_by_checksum(block_schema_checksum(block_cls),
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
    # a field the saved document lacks (saved by an older roost) reads as its default: not an edit
    if {k: have.get(k, want[k]) for k in want} == want:
        return SetupItem(kind="block", name=label, status="unchanged", detail=note)
    if reset:
        block.save(name, overwrite=True)
        return SetupItem(kind="block", name=label, status="updated", detail=_join("reset to the built-in", note))
    differ = sorted(k for k in want if have.get(k, want[k]) != want[k])
    return SetupItem(kind="block", name=label, status="kept",
                     detail=_join(f"edited ({', '.join(differ)}); kept (--reset-blocks reverts it)", note))


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _differing_fields(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The ``HostProfile`` fields whose values differ between two host documents' data."""
    return sorted(k for k in HostProfile.model_fields if k != "name" and a.get(k) != b.get(k))


def _host_documents(client: SyncPrefectClient, *, reset: bool, hosts: Sequence[str]) -> list[SetupItem]:
    """The built-in host documents of ``hosts``, and the migration of every legacy ``spark-host`` document.

    A legacy document whose name has no ``roost-host`` document yet is migrated (its edits kept),
    except a built-in's with ``reset``, which gets the built-in. Where both exist, roost reads the
    ``roost-host`` one and the detail says whether the legacy copy still matches it. A built-in host
    not set up gets no document (a saved document is what makes a host part of the default set).
    """
    slug = HostBlock.get_block_type_slug()
    builtins = builtin_host_documents()
    legacy = read_documents(LEGACY_HOST_SLUG, client)
    items: list[SetupItem] = []
    for name in [*(b for b in builtins if b in hosts or b in legacy), *(n for n in legacy if n not in builtins)]:
        old = legacy.get(name)
        have = _read_data(client, slug, name) if old is not None else None
        if old is not None and have is None and not (reset and name in builtins):
            items.append(_migrate(name, old, builtins.get(name)))
            continue
        note = _legacy_note(name, old, have)
        if name in builtins and name in hosts:
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
    key = environment().vllm_api_key
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


def _automation(client: SyncPrefectClient, want: Automation, detail: str) -> SetupItem:
    """Create the automation ``want`` when missing, replace it when it differs."""
    name = want.name
    core = AutomationCore(**want.model_dump(exclude={"id"}))
    want_c = _canon(core.model_dump(mode="json"))
    existing = client.read_automations_by_name(name)
    if not existing:
        client.create_automation(core)
        return SetupItem(kind="automation", name=name, status="created", detail=detail)
    first, *extra = existing
    for a in extra:  # two with the same name would fire twice
        client.delete_automation(a.id)
    have_c = _canon(AutomationCore(**first.model_dump(exclude={"id"})).model_dump(mode="json"))
    if have_c == want_c and not extra:
        return SetupItem(kind="automation", name=name, status="unchanged", detail=detail)
    # replaced rather than updated: the server's update endpoint refuses the client's owner_resource field
    client.delete_automation(first.id)
    client.create_automation(core)
    return SetupItem(kind="automation", name=name, status="updated", detail=detail)


# --- crash alerts ----------------------------------------------------------------------------------

ALERT_SUBJECT = "roost: run {{ flow_run.name }} crashed"


def alert_body(ui_url: str = "") -> str:
    """The crash alert's text (a Jinja template the server renders): deployment, host, last stage, why, link.

    ``ui_url`` is the Prefect UI the link points at; empty, the server's own ``PREFECT_UI_URL``.
    """
    link = f"{ui_url.rstrip('/')}/runs/flow-run/{{{{ flow_run.id }}}}" if ui_url else "{{ flow_run|ui_url or flow_run.id }}"
    return "\n".join([
        "deployment: {% if deployment %}{{ flow.name }}/{{ deployment.name }}{% else %}none{% endif %}",
        "host: {{ flow_run.parameters.get('host') or flow_run.work_queue_name or 'unknown' }}",
        f"last stage: {{{{ (flow_run.labels or {{}}).get('{STAGE_LABEL}') or 'none recorded' }}}}",
        "state: {{ flow_run.state.name }}: {{ flow_run.state.message or 'no message' }}",
        f"run: {{{{ flow_run.name }}}} {link}",
        "The run's worker or machine died, or its process was killed: the server is alive, the run is not. "
        "Retry it from the UI once the host is back.",
    ])


def crash_alert_automation(block_document_id: UUID, ui_url: str = "") -> Automation:
    """Send the crash alert through the notification block when a roost flow run enters Crashed.

    Covers both a run the zombie automation marked Crashed (its heartbeats stopped) and one whose
    worker reported its process crashed. Only runs tagged ``roost`` are matched.
    """
    return Automation(
        name=CRASH_ALERT_AUTOMATION,
        description="roost: tell Slack when a roost flow run crashes (its own process, which would, is gone).",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.role": "tag", "prefect.resource.id": "prefect.tag.roost"}),
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=1,
            within=dt.timedelta(0),
        ),
        actions=[SendNotification(block_document_id=block_document_id, subject=ALERT_SUBJECT, body=alert_body(ui_url))],
    )


def _slack_settings(client: SyncPrefectClient) -> tuple[SlackNotifier | None, str]:
    """The ``roost-slack`` SlackNotifier, or None and why (missing, or invalid with the fields named)."""
    data = _read_data(client, SlackNotifier.get_block_type_slug(), SLACK_BLOCK)
    if data is None:
        return None, "missing"
    try:
        return SlackNotifier.model_validate({k: v for k, v in data.items() if k in SlackNotifier.model_fields}), ""
    except ValidationError as exc:
        return None, f"invalid ({validation_problems(exc)})"


def _destination(notifier: SlackNotifier) -> str:
    """Where the alerts go, without a secret: the channel and API for a bot token; just "webhook" otherwise."""
    if notifier.transport == "bot":
        return f"Slack channel {notifier.channel.strip()} via {notifier.base_url.rstrip('/')}/chat.postMessage"
    return "Slack incoming webhook"


def _crash_alerts(client: SyncPrefectClient) -> tuple[list[SetupItem], str]:
    """The crash-alert notification block and automation from ``roost-slack``; their items and a summary.

    Without Slack settings, alerts are off: the block and automation an earlier run made are removed.
    With invalid settings, whatever exists is kept as it is.
    """
    notifier, why = _slack_settings(client)
    how = (f"save a Roost Slack Notifier block named {SLACK_BLOCK} (bot token + channel, or webhook URL) "
           "in the Prefect UI (Blocks), then run roost setup again")
    if notifier is None and why != "missing":
        note = f"crash alerts not updated: the {SLACK_BLOCK} block is {why}; fix it in the Prefect UI (Blocks)"
        return [SetupItem(kind="automation", name=CRASH_ALERT_AUTOMATION, status="kept", detail=note)], note
    if notifier is None:
        items = _remove_crash_alerts(client)
        note = f"crash alerts off: no Slack settings; to turn them on, {how}"
        return items or [SetupItem(kind="automation", name=CRASH_ALERT_AUTOMATION, status="skipped", detail=note)], note
    where = _destination(notifier)
    block_item, block_id = _notification_block(client, notifier.prefect_notification_block(), where)
    ui = notifier.prefect_ui_url or PREFECT_UI_URL.value() or ""
    auto_item = _automation(client, crash_alert_automation(block_id, ui), f"Crashed -> {where}")
    return [block_item, auto_item], f"crash alerts on: {where}"


def _notification_block(client: SyncPrefectClient, want: CustomWebhookNotificationBlock,
                        where: str) -> tuple[SetupItem, UUID]:
    """Save ``want`` as ``custom-webhook/roost-crash-alerts`` when missing or different; its item and id."""
    slug = want.get_block_type_slug()
    label = f"{slug}/{CRASH_ALERT_BLOCK}"
    want_data = want.model_dump(mode="json", exclude={"block_type_slug"}, context={"include_secrets": True})
    try:
        doc = client.read_block_document_by_name(name=CRASH_ALERT_BLOCK, block_type_slug=slug, include_secrets=True)
    except ObjectNotFound:
        doc = None
    if doc is not None and doc.id is not None:
        have = _plain(dict(doc.data))
        if {k: have.get(k) for k in want_data} == want_data:
            return SetupItem(kind="block", name=label, status="unchanged", detail=where), doc.id
    block_id: UUID = want.save(CRASH_ALERT_BLOCK, overwrite=True)  # type: ignore[assignment]  # sync call
    return SetupItem(kind="block", name=label, status="created" if doc is None else "updated", detail=where), block_id


def _plain(obj: Any) -> Any:
    """Data read back from the server with the secret values revealed (``SecretStr`` and nested)."""
    if isinstance(obj, SecretStr):
        return obj.get_secret_value()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _remove_crash_alerts(client: SyncPrefectClient) -> list[SetupItem]:
    """Delete the crash-alert automation and notification block an earlier run made (Slack was removed)."""
    items: list[SetupItem] = []
    why = f"no {SLACK_BLOCK} block any more"
    for a in client.read_automations_by_name(CRASH_ALERT_AUTOMATION):
        client.delete_automation(a.id)
        items.append(SetupItem(kind="automation", name=CRASH_ALERT_AUTOMATION, status="removed", detail=why))
    slug = CustomWebhookNotificationBlock.get_block_type_slug()
    try:
        doc = client.read_block_document_by_name(name=CRASH_ALERT_BLOCK, block_type_slug=slug, include_secrets=False)
    except ObjectNotFound:
        return items
    if doc.id is not None:
        client.delete_block_document(doc.id)
        items.append(SetupItem(kind="block", name=f"{slug}/{CRASH_ALERT_BLOCK}", status="removed", detail=why))
    return items
