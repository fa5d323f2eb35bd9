"""``roost setup`` against a real Prefect server: what it creates, that a second run changes
nothing (statuses and the server's own ``updated`` stamps), and the nightly schedule's next runs."""

from __future__ import annotations

import datetime as dt
import itertools
import subprocess
import time
from typing import Any

import pytest
from roost_workers import BIN, POOL, REPO, run_setup

pytestmark = pytest.mark.slow

KINDS = {"block-type", "block", "secret", "work-pool", "work-queue", "concurrency-limit", "automation", "deployment"}


def _by_name(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(i["kind"], i["name"]): i for i in report["items"]}


def test_first_run_creates_everything(roost_setup: tuple[dict[str, Any], dict[str, Any]]) -> None:
    first, _ = roost_setup
    items = _by_name(first)
    assert {k for k, _ in items} == KINDS
    for key in [("work-pool", POOL), ("work-queue", f"{POOL}/spark"), ("work-queue", f"{POOL}/cpu"),
                ("concurrency-limit", "roost-serve-spark"), ("concurrency-limit", "roost-serve-cpu"),
                ("automation", "roost-crash-zombie-runs"), ("block-type", "spark-host"), ("block-type", "model-profile"),
                ("block-type", "roost-slack-notifier"),
                ("block", "spark-host/spark"), ("block", "spark-host/cpu"), ("block", "model-profile/local"),
                ("block", "model-profile/ornith-35b"), ("block", "model-profile/ornith-9b"),
                ("block", "model-profile/ornith-1-5-35b-a3b-nvfp4")]:
        assert items[key]["status"] == "created", key
    deployments = sorted(n for k, n in items if k == "deployment")
    assert deployments == sorted(f"{f}/{h}" for f in ("land", "rebenchmark", "audit") for h in ("spark", "cpu"))
    assert first["changed"] == len([i for i in first["items"] if i["status"] in ("created", "updated")]) > 0


def test_second_run_changes_nothing(roost_setup: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, second = roost_setup
    assert second["changed"] == 0
    assert {i["status"] for i in second["items"]} == {"unchanged"}


def _server_stamps() -> dict[str, Any]:
    """What roost setup could write, as the server holds it. Objects the server's own services touch
    (worker polls and the foreman bump pools', queues' and deployments' ``updated``; slots move a
    limit's) are compared by content and id; block documents and automations by ``updated`` too."""
    from prefect.client.orchestration import get_client

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
        stamps["blocks"] = sorted((d.name, str(d.updated)) for slug in ("model-profile", "spark-host")
                                  for d in client.read_block_documents_by_type(slug))
    return stamps


def test_third_run_leaves_the_server_untouched(roost_setup: Any) -> None:
    before = _server_stamps()
    report = run_setup()
    assert report["changed"] == 0
    assert _server_stamps() == before


def test_server_objects(roost_setup: Any) -> None:
    from prefect.client.orchestration import get_client

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


def test_a_run_for_another_host_is_refused(roost_setup: Any) -> None:
    """The host is fixed per deployment, so a run can never land on a machine its queue does not serve."""
    from prefect.deployments import run_deployment

    with pytest.raises(Exception, match="host"):
        run_deployment("land/cpu", parameters={"host": "spark"}, timeout=0)
    with pytest.raises(Exception, match="profile"):
        run_deployment("land/cpu", parameters={"profile": "no-such-profile"}, timeout=0)


def test_nightly_schedule_next_runs_visible(roost_setup: Any) -> None:
    """The scheduler puts the next rebenchmark runs on the calendar at 03:00 UTC, one a day."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

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
    from blocks.hosts import SparkHost
    from blocks.resolve import load_host

    edited = SparkHost.load("spark")
    edited.bandwidth_gb_s = 250.0
    edited.save("spark", overwrite=True)
    try:
        assert load_host("spark").bandwidth_gb_s == 250.0  # the document wins over the built-in
        kept = _by_name(run_setup())[("block", "spark-host/spark")]
        assert kept["status"] == "kept" and "bandwidth_gb_s" in kept["detail"]
        assert load_host("spark").bandwidth_gb_s == 250.0
    finally:
        reset = _by_name(run_setup("--reset-blocks"))[("block", "spark-host/spark")]
    assert reset["status"] == "updated"
    assert load_host("spark").bandwidth_gb_s == 273.0


def _setup_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "roost"), "setup", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=env)


def test_unknown_host_changes_nothing(roost_setup: Any) -> None:
    before = _server_stamps()
    out = _setup_cli("--hosts", "spark,no-such-host")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("roost: error: unknown host 'no-such-host': choose one of cpu, ")
    assert "Traceback" not in out.stderr
    assert _server_stamps() == before
