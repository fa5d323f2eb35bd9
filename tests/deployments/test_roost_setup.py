"""``roost setup`` against a real Prefect server: what it creates, that a second run changes
nothing (statuses and the server's own ``updated`` stamps), the nightly schedule's next runs, and
the migration of host documents an earlier release saved as ``spark-host``."""

from __future__ import annotations

import datetime as dt
import itertools
import subprocess
import time
from typing import Any, cast

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import BlockDocumentCreate
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
from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
from roost_workers import BIN, POOL, REPO, run_setup
from support.legacy_blocks import LegacySparkHost, delete_document

from blocks.hosts import HostBlock
from blocks.resolve import known_host_names, load_host
from roost.hosts import CPU, SPARK

pytestmark = pytest.mark.slow

KINDS = {"block-type", "block", "secret", "work-pool", "work-queue", "concurrency-limit", "automation", "deployment"}


def _saved(block: type[HostBlock], name: str) -> HostBlock:
    """The saved document ``name`` of the block's type (``Block.load``, typed)."""
    return cast(HostBlock, block.load(name))


def _by_name(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(i["kind"], i["name"]): i for i in report["items"]}


def test_first_run_creates_everything(roost_setup: tuple[dict[str, Any], dict[str, Any]]) -> None:
    first, _ = roost_setup
    items = _by_name(first)
    assert {k for k, _ in items} == KINDS
    for key in [("work-pool", POOL), ("work-queue", f"{POOL}/spark"), ("work-queue", f"{POOL}/cpu"),
                ("concurrency-limit", "roost-serve-spark"), ("concurrency-limit", "roost-serve-cpu"),
                ("automation", "roost-crash-zombie-runs"), ("block-type", "roost-host"), ("block-type", "model-profile"),
                ("block-type", "roost-slack-notifier"),
                ("block", "roost-host/spark"), ("block", "roost-host/cpu"), ("block", "model-profile/local"),
                ("block", "model-profile/ornith-35b"), ("block", "model-profile/ornith-9b"),
                ("block", "model-profile/ornith-1-5-35b-a3b-nvfp4")]:
        assert items[key]["status"] == "created", key
    deployments = sorted(n for k, n in items if k == "deployment")
    assert deployments == sorted(f"{f}/{h}" for f in ("land", "rebenchmark", "audit") for h in ("spark", "cpu"))
    assert first["changed"] == len([i for i in first["items"] if i["status"] in ("created", "updated")]) > 0
    # the legacy host type is only read (for the migration), never registered on a server without it
    assert not any("spark-host" in name for _, name in items)
    with get_client(sync_client=True) as client, pytest.raises(ObjectNotFound):
        client.read_block_type_by_slug("spark-host")


def test_second_run_changes_nothing(roost_setup: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, second = roost_setup
    assert second["changed"] == 0
    assert {i["status"] for i in second["items"]} == {"unchanged"}


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


def test_third_run_leaves_the_server_untouched(roost_setup: Any) -> None:
    before = _server_stamps()
    report = run_setup()
    assert report["changed"] == 0
    assert _server_stamps() == before


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


def test_a_run_for_another_host_is_refused(roost_setup: Any) -> None:
    """The host is fixed per deployment, so a run can never land on a machine its queue does not serve;
    the profile is one of the known ones. The server refuses both before a flow run exists."""
    assert _refusal({"host": "spark"}) == (
        "Error creating flow run: Validation failed for field 'host'. Failure reason: 'spark' is not one of ['cpu']")
    assert _refusal({"profile": "no-such-profile"}).startswith(
        "Error creating flow run: Validation failed for field 'profile'. "
        "Failure reason: 'no-such-profile' is not one of ['local', ")


def test_nightly_schedule_next_runs_visible(roost_setup: Any) -> None:
    """The scheduler puts the next rebenchmark runs on the calendar at 03:00 UTC, one a day."""
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("rebenchmark/cpu")
        assert [(s.schedule.cron, s.schedule.timezone, s.active) for s in dep.schedules] == [  # type: ignore[union-attr]
            ("0 3 * * *", "UTC", True)]
        deadline = time.monotonic() + 180
        runs: list[Any] = []
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
                sort=FlowRunSort.EXPECTED_START_TIME_ASC)
            if len(runs) >= 3:
                break
            time.sleep(2)
    assert len(runs) >= 3, "the scheduler did not create the upcoming runs"
    starts = [r.expected_start_time.astimezone(dt.UTC) for r in runs]
    now = dt.datetime.now(dt.UTC)
    assert all((s.hour, s.minute, s.second) == (3, 0, 0) for s in starts)
    assert now < starts[0] <= now + dt.timedelta(days=1)
    assert [(b - a) for a, b in itertools.pairwise(starts)] == [dt.timedelta(days=1)] * (len(starts) - 1)
    assert all(r.parameters.get("host") == "cpu" for r in runs)


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
    return subprocess.run([str(BIN / "roost"), "setup", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=env)


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


@pytest.fixture
def legacy_hosts(roost_setup: Any) -> Any:
    """The server as an earlier release left it: ``spark-host/spark`` edited (250 GB/s), ``spark-host/old-box``
    added, no ``roost-host`` document for either. Afterwards: the legacy type gone, the built-in spark back."""
    LegacySparkHost.register_type_and_schema()
    assert delete_document("roost-host", "spark")  # roost setup saved it; an earlier release would not have
    LegacySparkHost.from_profile(SPARK.model_copy(update={"bandwidth_gb_s": 250.0})).save("spark")
    LegacySparkHost.from_profile(OLD_BOX).save("old-box")
    yield
    for slug, name in (("spark-host", "spark"), ("spark-host", "old-box"), ("spark-host", "old-broken"),
                       ("roost-host", "old-box"), ("roost-host", "spark")):
        delete_document(slug, name)
    with get_client(sync_client=True) as client:
        client.delete_block_type(client.read_block_type_by_slug("spark-host").id)
    run_setup()  # the built-in roost-host/spark again
    assert load_host("spark") == SPARK


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
    assert first["changed"] == 2  # the two migrations, nothing else
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


def test_legacy_document_edited_after_the_migration_is_pointed_out(legacy_hosts: Any) -> None:
    run_setup()
    LegacySparkHost.from_profile(OLD_BOX.model_copy(update={"bandwidth_gb_s": 44.0})).save("old-box", overwrite=True)
    item = _by_name(run_setup())[("block", "roost-host/old-box")]
    assert (item["status"], item["detail"]) == (
        "unchanged", "spark-host/old-box differs (bandwidth_gb_s): roost reads this document, edit it here; "
        "delete the legacy one once every worker runs this version")
    assert load_host("old-box") == OLD_BOX  # the roost-host document, not the later legacy edit


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


def test_reset_blocks_saves_the_builtin_instead_of_migrating(legacy_hosts: Any) -> None:
    item = _by_name(run_setup("--reset-blocks"))[("block", "roost-host/spark")]
    assert (item["status"], item["detail"]) == ("created", "spark-host/spark not migrated (--reset-blocks)")
    assert load_host("spark") == SPARK
