"""``roost setup`` against a real Prefect server (the ``slow`` tests): what it creates, that a second
run changes nothing (statuses and the server's own ``updated`` stamps), the nightly schedule's next
runs, the migration of host documents an earlier release saved as ``spark-host``, the hosts a
CPU-only box gets, the sweep only with two hosts, the default pool and the legacy ``roost-spark`` one kept
(on a fresh server of their own, with the worker setup names), and crash alerts (made from the Slack
settings, sent by the server). Without a server: which hosts are set up, the notification block and the
crash-alert automation roost builds."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import subprocess
import uuid
from collections.abc import Iterator
from os import environ as os_environ_map
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import BlockDocumentCreate, WorkPoolCreate
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.deployments import run_deployment
from prefect.events.actions import SendNotification
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
from prefect.states import Crashed, Scheduled
from pydantic import SecretStr
from roost_workers import BIN, POOL, REPO, ZOMBIE_AFTER_S, run_setup
from support import workers
from support.cli import roost_exe
from support.legacy_blocks import LegacySparkHost, delete_document
from support.slack import HOOK_SECRET, TOKEN, assert_no_secret, bot, hook
from support.wait import poll

from blocks.hosts import HostBlock
from blocks.resolve import known_host_names, load_host
from blocks.slack import SLACK_BLOCK, SlackNotifier
from deployments.setup import alert_body, crash_alert_automation, select_hosts, skipped_builtin_hosts
from roost.hosts import CPU, SPARK

KINDS = {"block-type", "block", "secret", "work-pool", "work-queue", "concurrency-limit", "automation", "deployment"}


def _saved(block: type[HostBlock], name: str) -> HostBlock:
    """The saved document ``name`` of the block's type (``Block.load``, typed)."""
    return cast(HostBlock, block.load(name))


def _by_name(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(i["kind"], i["name"]): i for i in report["items"]}


@pytest.mark.slow
def test_first_run_creates_everything(roost_setup: tuple[dict[str, Any], dict[str, Any]]) -> None:
    first, _ = roost_setup
    items = _by_name(first)
    assert {k for k, _ in items} == KINDS
    for key in [("work-pool", POOL), ("work-queue", f"{POOL}/spark"), ("work-queue", f"{POOL}/cpu"),
                ("work-queue", f"{POOL}/sweep"), ("block-type", "roost-store-credentials"),
                ("concurrency-limit", "roost-serve-spark"), ("concurrency-limit", "roost-serve-cpu"),
                ("automation", "roost-crash-zombie-runs"), ("block-type", "roost-host"), ("block-type", "model-profile"),
                ("block-type", "roost-slack-notifier"),
                ("block", "roost-host/spark"), ("block", "roost-host/cpu"), ("block", "model-profile/local"),
                ("block", "model-profile/ornith-35b"), ("block", "model-profile/ornith-9b"),
                ("block", "model-profile/ornith-1-5-35b-a3b-nvfp4")]:
        assert items[key]["status"] == "created", key
    deployments = sorted(n for k, n in items if k == "deployment")
    assert deployments == sorted([*(f"{f}/{h}" for f in ("land", "rebenchmark", "audit") for h in ("spark", "cpu")),
                                  f"sweep/{POOL}"])  # one sweep per pool: it fans out over the hosts' queues
    assert first["changed"] == len([i for i in first["items"] if i["status"] in ("created", "updated")]) > 0
    # two hosts: the sweep, taken by the first host's worker; the workers named serve every deployment's queue
    assert first["pool"] == POOL == "roost" and first["pool_note"] == ""
    assert first["sweep"].startswith("sweep on: across spark, cpu")
    worker = f"PREFECT_WORKER_QUERY_SECONDS=1 prefect worker start --pool {POOL}"
    assert first["workers"] == [f"{worker} --work-queue spark --work-queue sweep", f"{worker} --work-queue cpu"]
    assert _deployment_queues(deployments) <= _worker_queues(first["workers"]) == {"spark", "cpu", "sweep"}
    # named hosts only: cpu-docker has no block and is not named, so nothing is made for it
    assert first["hosts"] == ["spark", "cpu"] and list(first["skipped_hosts"]) == ["cpu-docker", "cpu-vllm-0-24"]
    assert not any("cpu-docker" in name or "cpu-vllm-0-24" in name for _, name in items)
    # no Slack settings: no notification block, and the report says how to turn crash alerts on
    off = items[("automation", "roost-crashed-run-alert")]
    assert off["status"] == "skipped" and off["detail"] == first["crash_alerts"]
    assert first["crash_alerts"].startswith("crash alerts off: no Slack settings; to turn them on, save a Roost "
                                            "Slack Notifier block named roost-slack ")
    assert not any(k == "block" and n.startswith("custom-webhook/") for k, n in items)
    # the legacy host type is only read (for the migration), never registered on a server without it
    assert not any("spark-host" in name for _, name in items)
    with get_client(sync_client=True) as client, pytest.raises(ObjectNotFound):
        client.read_block_type_by_slug("spark-host")


@pytest.mark.slow
def test_second_run_changes_nothing(roost_setup: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, second = roost_setup
    assert second["changed"] == 0
    # skipped: the crash alerts (no Slack settings)
    assert [i for i in second["items"] if i["status"] not in ("unchanged", "skipped")] == []
    assert _by_name(second)[("automation", "roost-crashed-run-alert")]["status"] == "skipped"


def _deployment_queues(names: list[str]) -> set[str]:
    """The work queues the server has the deployments ``names`` on."""
    with get_client(sync_client=True) as client:
        return {str(client.read_deployment_by_name(n).work_queue_name) for n in names}


def _worker_queues(commands: list[str]) -> set[str]:
    """The queues the worker commands ``roost setup`` printed serve."""
    queues: set[str] = set()
    for command in commands:
        words = command.split()
        queues |= {q for flag, q in itertools.pairwise(words) if flag == "--work-queue"}
    return queues


def _server_stamps() -> dict[str, Any]:
    """What roost setup could write, as the server holds it. Objects the server's own services touch
    (worker polls and the foreman bump pools', queues' and deployments' ``updated``; slots move a
    limit's) are compared by content and id; block documents and automations by ``updated`` too."""
    with get_client(sync_client=True) as client:
        pool = client.read_work_pool(POOL)
        stamps: dict[str, Any] = {"pool": (pool.id, pool.type, pool.description, pool.base_job_template)}
        for h in ("spark", "cpu"):
            q = client.read_work_queue_by_name(h, work_pool_name=POOL)
            stamps[f"queue/{h}"] = (q.id, q.description, q.priority, q.concurrency_limit)
            lim = client.read_global_concurrency_limit_by_name(f"roost-serve-{h}")
            stamps[f"limit/{h}"] = (lim.id, lim.limit, lim.active)
            for f in ("land", "rebenchmark", "audit"):
                d = client.read_deployment_by_name(f"{f}/{h}")
                stamps[f"{f}/{h}"] = (d.id, d.version, d.parameters, d.parameter_openapi_schema, d.pull_steps,
                                      d.job_variables, d.tags, d.description, d.work_queue_name,
                                      [(s.id, s.schedule, s.active) for s in d.schedules])
        stamps["automation"] = [a.model_dump(mode="json") for a in client.read_automations_by_name("roost-crash-zombie-runs")]
        stamps["blocks"] = sorted((slug, d.name, str(d.updated)) for slug in ("model-profile", "roost-host")
                                  for d in client.read_block_documents_by_type(slug))
    return stamps


@pytest.mark.slow
def test_third_run_leaves_the_server_untouched(roost_setup: Any) -> None:
    before = _server_stamps()
    report = run_setup()
    assert report["changed"] == 0
    assert _server_stamps() == before


@pytest.mark.slow
def test_server_objects(roost_setup: Any) -> None:
    with get_client(sync_client=True) as client:
        pool = client.read_work_pool(POOL)
        assert pool.type == "process"
        command = pool.base_job_template["variables"]["properties"]["command"]["default"]
        assert command.endswith(" -m prefect.engine") and ".venv/bin/python" in command  # no workspace supervisor
        for h in ("spark", "cpu"):
            limit = client.read_global_concurrency_limit_by_name(f"roost-serve-{h}")
            assert (limit.limit, limit.active) == (1, True)
            land = client.read_deployment_by_name(f"land/{h}")
            assert land.work_queue_name == h and land.work_pool_name == POOL
            assert land.entrypoint == "flows/land.py:land"
            assert land.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
            assert land.parameter_openapi_schema is not None
            props = land.parameter_openapi_schema["properties"]
            assert {"profile", "revision", "vllm_overrides", "keep_serving", "host"} <= set(props)
            assert set(props["profile"]["enum"]) >= {"local", "ornith-35b", "ornith-9b", "ornith-1.5-35b-a3b-nvfp4"}
            assert props["host"]["enum"] == [h] and props["host"]["readOnly"] is True
            assert land.parameters["host"] == h
            assert land.enforce_parameter_schema
            assert land.job_variables["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
        assert client.read_deployment_by_name("land/cpu").parameters["profile"] == "local"
        assert client.read_deployment_by_name("land/spark").parameters["profile"] == "ornith-35b"


def _refusal(parameters: dict[str, Any]) -> str:
    """What the server answers when ``land/cpu`` is run with ``parameters`` its schema refuses (409)."""
    with pytest.raises(PrefectHTTPStatusError) as refused:
        run_deployment("land/cpu", parameters=parameters, timeout=0)
    assert refused.value.response.status_code == 409
    detail: str = refused.value.response.json()["detail"]
    return detail


@pytest.mark.slow
def test_a_run_for_another_host_is_refused(roost_setup: Any) -> None:
    """The host is fixed per deployment, so a run can never land on a machine its queue does not serve;
    the profile is one of the known ones. The server refuses both before a flow run exists."""
    assert _refusal({"host": "spark"}) == (
        "Error creating flow run: Validation failed for field 'host'. Failure reason: 'spark' is not one of ['cpu']")
    assert _refusal({"profile": "no-such-profile"}).startswith(
        "Error creating flow run: Validation failed for field 'profile'. "
        "Failure reason: 'no-such-profile' is not one of ['local', ")


@pytest.mark.slow
def test_nightly_schedule_next_runs_visible(roost_setup: Any) -> None:
    """The scheduler puts the next rebenchmark runs on the calendar at 03:00 UTC, one a day."""
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("rebenchmark/cpu")
        assert [(s.schedule.cron, s.schedule.timezone, s.active) for s in dep.schedules] == [  # type: ignore[union-attr]
            ("0 3 * * *", "UTC", True)]
        runs = poll(lambda: client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC), lambda runs: len(runs) >= 3, timeout_s=180, every_s=2)
    assert len(runs) >= 3, "the scheduler did not create the upcoming runs"
    starts = [r.expected_start_time.astimezone(dt.UTC) for r in runs]
    now = dt.datetime.now(dt.UTC)
    assert all((s.hour, s.minute, s.second) == (3, 0, 0) for s in starts)
    assert now < starts[0] <= now + dt.timedelta(days=1)
    assert [(b - a) for a, b in itertools.pairwise(starts)] == [dt.timedelta(days=1)] * (len(starts) - 1)
    assert all(r.parameters.get("host") == "cpu" for r in runs)


@pytest.mark.slow
def test_edited_block_is_kept_unless_reset(roost_setup: Any) -> None:
    edited = _saved(HostBlock, "spark")
    edited.bandwidth_gb_s = 250.0
    edited.save("spark", overwrite=True)
    try:
        assert load_host("spark").bandwidth_gb_s == 250.0  # the document wins over the built-in
        kept = _by_name(run_setup())[("block", "roost-host/spark")]
        assert (kept["status"], kept["detail"]) == ("kept", "edited (bandwidth_gb_s); kept (--reset-blocks reverts it)")
        assert load_host("spark").bandwidth_gb_s == 250.0
    finally:
        reset = _by_name(run_setup("--reset-blocks"))[("block", "roost-host/spark")]
    assert (reset["status"], reset["detail"]) == ("updated", "reset to the built-in")
    assert load_host("spark") == SPARK


def _setup_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return roost_exe("setup", *args, timeout=300, cwd=REPO, env=env)


@pytest.mark.slow
def test_unknown_host_changes_nothing(roost_setup: Any) -> None:
    before = _server_stamps()
    out = _setup_cli("--hosts", "spark,no-such-host")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("roost: error: unknown host 'no-such-host': choose one of cpu, ")
    assert out.stderr.endswith(" (built-ins, or roost-host block documents)\n") and out.stderr.count("\n") == 1
    assert _server_stamps() == before


# --- hosts saved by an earlier release (block type spark-host) ---------------------------------------

OLD_BOX = CPU.model_copy(update={"name": "old-box", "description": "a second CPU box", "bandwidth_gb_s": 42.0})
"""A host the user added with an earlier release (it exists only as a spark-host document)."""


def _next_test_uses(request: pytest.FixtureRequest, fixture: str) -> bool:
    """Whether the test pytest runs after this one takes ``fixture`` too."""
    items = request.session.items
    i = items.index(request.node)
    return i + 1 < len(items) and fixture in getattr(items[i + 1], "fixturenames", ())


def _a_later_test_here_uses(request: pytest.FixtureRequest, fixture: str) -> bool:
    """Whether a test of this module that pytest runs after this one takes ``fixture`` (module-scoped)."""
    items = request.session.items
    return any(fixture in getattr(item, "fixturenames", ()) and getattr(item, "module", None) is request.module
               for item in items[items.index(request.node) + 1:])


@pytest.fixture
def legacy_hosts(roost_setup: Any, request: pytest.FixtureRequest) -> Any:
    """The server as an earlier release left it: ``spark-host/spark`` edited (250 GB/s), ``spark-host/old-box``
    added, no ``roost-host`` document for either. Afterwards: the legacy type gone, the built-in spark back
    (by ``roost setup``, skipped when the next test starts from the legacy state again: it would delete it)."""
    LegacySparkHost.register_type_and_schema()
    # roost setup saved it (or the previous legacy test removed it); an earlier release would not have
    delete_document("roost-host", "spark")
    LegacySparkHost.from_profile(SPARK.model_copy(update={"bandwidth_gb_s": 250.0})).save("spark")
    LegacySparkHost.from_profile(OLD_BOX).save("old-box")
    yield
    for slug, name in (("spark-host", "spark"), ("spark-host", "old-box"), ("spark-host", "old-broken"),
                       ("roost-host", "old-box"), ("roost-host", "spark")):
        delete_document(slug, name)
    with get_client(sync_client=True) as client:
        client.delete_block_type(client.read_block_type_by_slug("spark-host").id)
    if _next_test_uses(request, "legacy_hosts"):
        return
    run_setup()  # the built-in roost-host/spark again
    assert load_host("spark") == SPARK


@pytest.mark.slow
def test_spark_host_documents_are_read_then_migrated_once(legacy_hosts: Any) -> None:
    # before the migration (a worker updated before roost setup ran): the legacy documents are read
    assert load_host("spark").bandwidth_gb_s == 250.0 and load_host("old-box") == OLD_BOX
    assert "old-box" in known_host_names()

    first = run_setup()
    items = _by_name(first)
    assert (items[("block", "roost-host/spark")]["status"], items[("block", "roost-host/spark")]["detail"]) == (
        "migrated", "from spark-host/spark, edits kept (bandwidth_gb_s); spark-host/spark stays for workers not yet "
        "updated")
    assert (items[("block", "roost-host/old-box")]["status"], items[("block", "roost-host/old-box")]["detail"]) == (
        "migrated", "from spark-host/old-box; spark-host/old-box stays for workers not yet updated")
    # the two migrations; old-box, now a saved host, gets its queue, limit and deployments
    assert sorted(i["name"] for i in first["items"] if i["status"] in ("created", "updated", "migrated")) == sorted([
        "roost-host/spark", "roost-host/old-box", f"{POOL}/old-box", "roost-serve-old-box", "land/old-box",
        "rebenchmark/old-box", "audit/old-box"])
    # the user's values are now roost-host documents, which roost reads; the legacy ones are left as they were
    assert _saved(HostBlock, "spark").to_profile() == SPARK.model_copy(update={"bandwidth_gb_s": 250.0})
    assert _saved(HostBlock, "old-box").to_profile() == OLD_BOX
    assert _saved(LegacySparkHost, "old-box").to_profile() == OLD_BOX
    assert load_host("spark").bandwidth_gb_s == 250.0 and load_host("old-box") == OLD_BOX

    before = _server_stamps()
    second = run_setup()
    assert second["changed"] == 0 and _server_stamps() == before
    items = _by_name(second)
    legacy_copy = "is a legacy copy: delete it once every worker runs this version"
    assert (items[("block", "roost-host/spark")]["status"], items[("block", "roost-host/spark")]["detail"]) == (
        "kept", f"edited (bandwidth_gb_s); kept (--reset-blocks reverts it); spark-host/spark {legacy_copy}")
    assert (items[("block", "roost-host/old-box")]["status"], items[("block", "roost-host/old-box")]["detail"]) == (
        "unchanged", f"spark-host/old-box {legacy_copy}")


@pytest.mark.slow
def test_legacy_document_edited_after_the_migration_is_pointed_out(legacy_hosts: Any) -> None:
    run_setup()
    LegacySparkHost.from_profile(OLD_BOX.model_copy(update={"bandwidth_gb_s": 44.0})).save("old-box", overwrite=True)
    item = _by_name(run_setup())[("block", "roost-host/old-box")]
    assert (item["status"], item["detail"]) == (
        "unchanged", "spark-host/old-box differs (bandwidth_gb_s): roost reads this document, edit it here; "
        "delete the legacy one once every worker runs this version")
    assert load_host("old-box") == OLD_BOX  # the roost-host document, not the later legacy edit


@pytest.mark.slow
def test_invalid_legacy_document_is_not_migrated(legacy_hosts: Any) -> None:
    """A legacy document that no longer validates stays as it is, reported with the reason, run after run."""
    with get_client(sync_client=True) as client:
        block_type = client.read_block_type_by_slug("spark-host")
        schema = client.get_most_recent_block_schema_for_block_type(block_type.id)
        assert schema is not None
        client.create_block_document(BlockDocumentCreate(
            name="old-broken", data=OLD_BOX.model_dump(mode="json") | {"usable_bytes": 0},
            block_type_id=block_type.id, block_schema_id=schema.id))
    for _ in range(2):
        report = run_setup()
        item = _by_name(report)[("block", "spark-host/old-broken")]
        assert item["status"] == "kept" and item["detail"].startswith("invalid (usable_bytes: Input should be greater than 0): not migrated; ")
        assert not any(i["name"] == "roost-host/old-broken" for i in report["items"])
    with get_client(sync_client=True) as client, pytest.raises(ObjectNotFound):
        client.read_block_document_by_name(name="old-broken", block_type_slug="roost-host")


@pytest.mark.slow
def test_reset_blocks_saves_the_builtin_instead_of_migrating(legacy_hosts: Any) -> None:
    item = _by_name(run_setup("--reset-blocks"))[("block", "roost-host/spark")]
    assert (item["status"], item["detail"]) == ("created", "spark-host/spark not migrated (--reset-blocks)")
    assert load_host("spark") == SPARK


# --- hosts a box gets --------------------------------------------------------------------------------


def test_hosts_are_the_named_the_saved_and_the_local_ones() -> None:
    assert select_hosts([], []) == ["cpu"]  # a fresh CPU-only box: no spark
    assert select_hosts(["spark"], []) == ["spark", "cpu"]
    assert select_hosts([], ["spark", "spark-2"]) == ["spark", "spark-2", "cpu"]  # a spark block exists
    assert select_hosts(["spark-2", "cpu"], ["spark", "spark-2"]) == ["spark-2", "cpu", "spark"]
    skipped = skipped_builtin_hosts(["cpu"])
    assert list(skipped) == ["spark", "cpu-docker", "cpu-vllm-0-24"]
    assert skipped["spark"] == ("no roost-host block saved and not named: once its worker can run, "
                                "`roost setup --hosts spark`")
    assert skipped_builtin_hosts(["spark", "cpu", "cpu-docker", "cpu-vllm-0-24", "spark-2"]) == {}


@pytest.mark.slow
def test_a_cpu_only_box_gets_no_spark(roost_setup: Any) -> None:
    """Without --hosts and without a spark block, setup touches nothing of spark and says how to add it."""
    assert delete_document("roost-host", "spark")
    try:
        out = _setup_cli("--zombie-after", str(ZOMBIE_AFTER_S))  # the default pool: roost
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert "work pool: roost" in lines and "hosts set up: cpu" in lines
        # one host: the sweep made when there were two is removed, and the one worker serves every deployment
        why = ("sweep off: 1 host set up; a sweep lands variants across hosts, so setup deploys it once 2 are "
               "(`roost sweep` runs on one host without it)")
        assert why in lines
        assert f"{'removed':<10} {'deployment':<18} sweep/{POOL}  ({why})" in lines
        assert f"{'removed':<10} {'work-queue':<18} {POOL}/sweep  ({why})" in lines
        assert lines.count(f"worker on cpu: PREFECT_WORKER_QUERY_SECONDS=1 prefect worker start --pool {POOL} "
                           "--work-queue cpu") == 1 and not any(ln.startswith("worker on spark") for ln in lines)
        with get_client(sync_client=True) as client:
            with pytest.raises(ObjectNotFound):
                client.read_deployment_by_name(f"sweep/{POOL}")
            with pytest.raises(ObjectNotFound):
                client.read_work_queue_by_name("sweep", work_pool_name=POOL)
        assert ("host skipped: spark: no roost-host block saved and not named: once its worker can run, "
                "`roost setup --hosts spark`") in lines
        spark_objects = {"roost-host/spark", f"{POOL}/spark", "roost-serve-spark", "land/spark", "rebenchmark/spark",
                         "audit/spark"}
        assert not [ln for ln in lines if spark_objects & set(ln.split())]
        assert any(ln.startswith("crash alerts off: no Slack settings; to turn them on, ") for ln in lines)
        with pytest.raises(ValueError, match="Unable to find block document named spark"):
            _saved(HostBlock, "spark")
    finally:
        again = run_setup()  # named again: the spark block is back, and with two hosts the sweep
    assert load_host("spark") == SPARK
    assert {(i["kind"], i["name"], i["status"]) for i in again["items"] if "sweep" in i["name"]} == {
        ("work-queue", f"{POOL}/sweep", "created"), ("deployment", f"sweep/{POOL}", "created")}


# --- an earlier release's pool, on a server of its own ------------------------------------------------


@pytest.fixture
def other_server(prefect_api: str, session_dir: Path) -> Iterator[str]:
    """A second Prefect server (its own home, so its own SQLite database) this process's client points at while
    the test runs (and only then); the session's server is left as it was."""
    from support.prefect_server import PrefectServer, using_api

    home = session_dir / "prefect-home-legacy-pool"
    with PrefectServer(session_dir / "prefect-server-legacy-pool.log", env={"PREFECT_HOME": str(home)}) as server, \
            using_api(server.url) as url:
        yield url


@pytest.mark.slow
def test_the_legacy_pool_is_kept_and_its_lone_host_worker_serves_every_deployment(
        other_server: str, session_dir: Path) -> None:
    """An install from before the pool was renamed: ``roost-spark`` holds roost's deployments (and the sweep,
    made when it had two hosts) and its workers poll it. ``roost setup`` without ``--pool`` keeps that pool
    and says so; with one host left, the sweep is removed, and the one worker it names makes every
    deployment it set up Ready."""
    legacy = "roost-spark"
    earlier = run_setup("--pool", legacy)  # spark and cpu, as the earlier release's default pool
    assert earlier["api_url"] == other_server and earlier["pool"] == legacy
    assert ("work-pool", legacy, "created") in {(i["kind"], i["name"], i["status"]) for i in earlier["items"]}
    assert ("deployment", f"sweep/{legacy}", "created") in {(i["kind"], i["name"], i["status"]) for i in earlier["items"]}
    assert delete_document("roost-host", "spark")  # the box serves on its CPU only from now on

    env = {**os_environ_map, "PREFECT_API_URL": other_server}
    out = _setup_cli("--zombie-after", str(ZOMBIE_AFTER_S), "--json", env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["pool"] == legacy and report["hosts"] == ["cpu"]
    assert report["pool_note"] == ("legacy name kept: roost-spark holds roost's deployments and its workers poll it; "
                                   "to move to roost, run roost setup --pool roost and restart the workers with "
                                   "--pool roost")
    pool_item = _by_name(report)[("work-pool", legacy)]
    assert pool_item["status"] == "unchanged" and pool_item["detail"].endswith(report["pool_note"])
    assert {(i["kind"], i["name"]) for i in report["items"] if i["status"] == "removed"} == {
        ("deployment", f"sweep/{legacy}"), ("work-queue", f"{legacy}/sweep")}
    assert report["workers"] == [f"PREFECT_WORKER_QUERY_SECONDS=1 prefect worker start --pool {legacy} --work-queue cpu"]
    with get_client(sync_client=True) as client:
        with pytest.raises(ObjectNotFound):
            client.read_work_pool("roost")  # no second pool the running workers do not poll
        # a worker started with --pool roost creates it, empty: roost's deployments stay where they are
        client.create_work_pool(WorkPoolCreate(name="roost", type="process"))
    # what scripts/install-worker asks when no --pool is given: a new worker joins the same pool
    asked = subprocess.run([str(BIN / "python"), "-m", "deployments.pool"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120, check=False)
    assert (asked.returncode, asked.stdout, asked.stderr) == (0, f"{legacy}\n", f"{report['pool_note']}\n")

    deployments = [i["name"] for i in report["items"] if i["kind"] == "deployment" and i["status"] != "removed"]
    assert sorted(deployments) == ["audit/cpu", "land/cpu", "rebenchmark/cpu"]
    assert _deployment_queues(deployments) <= _worker_queues(report["workers"])
    worker = workers.start_worker("legacy-pool-cpu", sorted(_worker_queues(report["workers"])), pool=legacy,
                                  log=session_dir / "worker-legacy-pool-cpu.log")
    try:
        with get_client(sync_client=True) as client:
            for name in deployments:
                poll(lambda name=name: client.read_deployment_by_name(name).status,
                     lambda status: str(status).endswith("READY") and "NOT" not in str(status), timeout_s=60)
            queue = client.read_work_queue_by_name("cpu", work_pool_name=legacy)
            assert str(queue.status).endswith("READY") and "NOT" not in str(queue.status)
    finally:
        worker.stop()

    again = _setup_cli("--zombie-after", str(ZOMBIE_AFTER_S), env=env)
    lines = again.stdout.splitlines()
    assert again.returncode == 0 and f"work pool: {legacy} ({report['pool_note']})" in lines
    assert report["sweep"] in lines and f"roost setup: nothing to change on {other_server}" in lines


# --- crash alerts ------------------------------------------------------------------------------------


def test_bot_token_becomes_a_webhook_block_with_the_token_secret() -> None:
    notifier = SlackNotifier(bot_token=SecretStr(TOKEN), channel="C0ROOSTALERTS",  # type: ignore[arg-type]
                             base_url="http://127.0.0.1:9/api")
    block = notifier.prefect_notification_block()
    assert isinstance(block, CustomWebhookNotificationBlock)
    plain = block.model_dump(mode="json")  # what the UI shows: the token only as a masked secret
    assert TOKEN not in json.dumps(plain)
    assert plain["headers"] == {"Authorization": "Bearer {{token}}", "Content-Type": "application/json; charset=utf-8"}
    assert plain["json_data"] == {"channel": "C0ROOSTALERTS", "text": "*{{subject}}*\n{{body}}"}
    request = block.model_copy(deep=True)._build_request_args(body="the body", subject="the subject")
    assert (request["method"], request["url"]) == ("POST", "http://127.0.0.1:9/api/chat.postMessage")
    assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert request["json"] == {"channel": "C0ROOSTALERTS", "text": "*the subject*\nthe body"}


def test_webhook_url_becomes_a_webhook_block_with_the_url_secret() -> None:
    url = f"https://hooks.slack.com/services/T0/B0/{HOOK_SECRET}"
    block = SlackNotifier(webhook_url=SecretStr(url)).prefect_notification_block()  # type: ignore[arg-type]
    assert HOOK_SECRET not in json.dumps(block.model_dump(mode="json"))
    request = block.model_copy(deep=True)._build_request_args(body="b", subject="s")
    assert (request["url"], request["json"], request["headers"]) == (url, {"text": "*s*\nb"}, None)


def test_crash_alert_automation_fires_on_crashed_roost_runs() -> None:
    block_id = uuid.uuid4()
    auto = crash_alert_automation(block_id, "http://ui.example:4200/")
    trigger = auto.trigger
    assert isinstance(trigger, EventTrigger)
    assert trigger.expect == {"prefect.flow-run.Crashed"} and trigger.posture == Posture.Reactive
    assert trigger.match_related == ResourceSpecification(
        {"prefect.resource.role": "tag", "prefect.resource.id": "prefect.tag.roost"})
    (action,) = auto.actions
    assert isinstance(action, SendNotification) and action.block_document_id == block_id
    assert action.subject == "roost: run {{ flow_run.name }} crashed"


def _render(template: str, context: dict[str, Any]) -> str:
    """Render like the server does (a sandboxed Jinja environment; the server's own is covered by
    ``test_crash_alert_reaches_slack``)."""
    return ImmutableSandboxedEnvironment().from_string(template).render(**context)


def test_crash_alert_text_names_deployment_host_stage_and_link() -> None:
    run_id = uuid.uuid4()
    flow_run = SimpleNamespace(id=run_id, name="land-local", parameters={"host": "cpu"}, work_queue_name="cpu",
                               labels={"roost.stage": "serve", "prefect.flow.id": "x"},
                               state=SimpleNamespace(name="Crashed", message="roost: no heartbeat"))
    context = {"flow_run": flow_run, "deployment": SimpleNamespace(name="cpu"), "flow": SimpleNamespace(name="land")}
    assert _render(alert_body("http://ui.example:4200/"), context).splitlines()[:5] == [
        "deployment: land/cpu", "host: cpu", "last stage: serve", "state: Crashed: roost: no heartbeat",
        f"run: land-local http://ui.example:4200/runs/flow-run/{run_id}"]
    # a run outside a deployment, before its first stage
    flow_run.labels, flow_run.parameters = None, {}
    text = _render(alert_body("http://ui.example:4200"), context | {"deployment": None})
    assert text.splitlines()[:3] == ["deployment: none", "host: cpu", "last stage: none recorded"]


def _item(report: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return _by_name(report)[(kind, name)]


@pytest.mark.slow
def test_slack_settings_turn_crash_alerts_on(crash_alerts: Any) -> None:
    receiver, report = crash_alerts.receiver, crash_alerts.report
    where = f"Slack channel C0ROOSTALERTS via {receiver.api_url}chat.postMessage"
    block = _item(report, "block", "custom-webhook/roost-crash-alerts")
    auto = _item(report, "automation", "roost-crashed-run-alert")
    assert (block["status"], block["detail"]) == ("created", where)
    assert (auto["status"], auto["detail"]) == ("created", f"Crashed -> {where}")
    assert report["crash_alerts"] == f"crash alerts on: {where}"
    assert_no_secret(json.dumps(report))
    with get_client(sync_client=True) as client:
        doc = client.read_block_document_by_name(name="roost-crash-alerts", block_type_slug="custom-webhook",
                                                 include_secrets=False)
        assert TOKEN not in json.dumps(doc.model_dump(mode="json"))  # a secret field: masked when read back
        (automation,) = client.read_automations_by_name("roost-crashed-run-alert")
        (action,) = automation.actions
        assert isinstance(action, SendNotification) and action.block_document_id == doc.id
    again = run_setup()
    assert again["changed"] == 0
    assert _item(again, "block", "custom-webhook/roost-crash-alerts")["status"] == "unchanged"


@pytest.mark.slow
def test_crash_alert_reaches_slack(crash_alerts: Any) -> None:
    """A land/cpu run set Crashed (as the zombie automation does): the server renders and sends the alert."""
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("land/cpu")
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)  # no worker picks it up meanwhile
        fr = client.create_flow_run_from_deployment(dep.id, state=Scheduled(scheduled_time=later))
        client.update_flow_run_labels(fr.id, {"roost.stage": "health-wait"})
        client.set_flow_run_state(fr.id, Crashed(message="roost: test crash"), force=True)
    text = crash_alerts.text_mentioning(str(fr.id))
    assert text.startswith(f"*roost: run {fr.name} crashed*\n")
    for line in ("deployment: land/cpu", "host: cpu", "last stage: health-wait", "state: Crashed: roost: test crash",
                 f"run: {fr.name} http://127.0.0.1:4200/runs/flow-run/{fr.id}"):
        assert line in text.splitlines(), (line, text)


@pytest.mark.slow
def test_changed_slack_settings_update_the_block_and_removed_ones_turn_alerts_off(
        crash_alerts: Any, request: pytest.FixtureRequest) -> None:
    receiver = crash_alerts.receiver
    try:
        SlackNotifier(bot_token=SecretStr(TOKEN), channel="C0OTHER", base_url=receiver.api_url,
                      prefect_ui_url="http://127.0.0.1:4200").save(  # type: ignore[arg-type]
            SLACK_BLOCK, overwrite=True)
        changed = run_setup()
        assert _item(changed, "block", "custom-webhook/roost-crash-alerts")["status"] == "updated"
        assert _item(changed, "automation", "roost-crashed-run-alert")["status"] == "unchanged"  # same block id
        hook(receiver.webhook_url).save(SLACK_BLOCK, overwrite=True)
        webhook = run_setup()
        item = _item(webhook, "block", "custom-webhook/roost-crash-alerts")
        assert (item["status"], item["detail"]) == ("updated", "Slack incoming webhook")
        assert_no_secret(json.dumps(webhook))
        assert delete_document("roost-slack-notifier", SLACK_BLOCK)
        off = run_setup()
        assert {(i["kind"], i["name"], i["status"]) for i in off["items"] if i["status"] == "removed"} == {
            ("automation", "roost-crashed-run-alert", "removed"), ("block", "custom-webhook/roost-crash-alerts", "removed")}
        assert off["crash_alerts"].startswith("crash alerts off: no Slack settings")
        assert _item(run_setup(), "automation", "roost-crashed-run-alert")["status"] == "skipped"
    finally:
        bot(receiver).save(SLACK_BLOCK, overwrite=True)
        if _a_later_test_here_uses(request, "crash_alerts"):  # else crash_alerts' teardown runs roost setup next
            run_setup()


# --- the parameter forms, in the Prefect UI ----------------------------------------------------------


@pytest.mark.slow
def test_the_ui_shows_every_land_parameters_type_and_renders_the_run_form(
        roost_setup: Any, prefect_api: str, tmp_path: Path) -> None:
    """Headless Chromium on ``land/cpu`` (the UI's Parameters tab and its Run form): every parameter has a
    type except the two tri-state switches (``tests/deployments/test_parameter_forms.py`` says why), and the
    form renders without a script error (a ``type`` the form has no input for throws there)."""
    from support.browser import chromium, prefect_ui

    with get_client(sync_client=True) as client:
        dep_id = client.read_deployment_by_name("land/cpu").id
    errors: list[str] = []
    with prefect_ui(prefect_api, tmp_path / "ui") as ui, chromium(tmp_path / "chromium-profile") as browser:
        page = browser.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if "missing case" in msg.text else None)
        page.goto(f"{ui}/deployments/deployment/{dep_id}?tab=Parameters")
        rows = page.locator(".deployment-parameters-table tbody tr")
        rows.nth(10).wait_for(timeout=60_000)
        types = {cells[0]: cells[-1] for cells in (r.split("\t") for r in rows.all_inner_texts())}
        assert types == {"profile": "string", "revision": "string", "host": "string", "vllm_overrides": "array",
                         "keep_serving": "", "port": "integer", "notify": "boolean", "restart_policy": "string",
                         "replace": "boolean", "mtp_ab": "", "evaluate": "boolean"}
        page.goto(f"{ui}/deployments/deployment/{dep_id}/run")
        page.get_by_text("mtp_ab (Optional)").wait_for(timeout=60_000)
        page.get_by_role("button", name="Submit").wait_for(timeout=10_000)
    assert errors == []
