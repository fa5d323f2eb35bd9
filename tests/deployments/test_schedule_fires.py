"""The nightly rebenchmark fires from its schedule, end to end, with nothing started by hand.

All real: the session's Prefect server (its scheduler service), ``roost setup``'s work pool, a
``prefect worker start`` on the host's queue, the session's vLLM CPU server. The deployment is
``rebenchmark/<host>`` as ``roost setup`` builds it (``deployments.deploy.build_deployment``, every
default kept), its nightly cron moved to the next minute: ``roost setup --cron "M H * * *"`` as a user
would write it. The test never creates a flow run: Prefect's scheduler puts the run on the calendar, the
worker takes it at its time, the flow benchmarks what the host serves, and the run lands in roost's
history (``roost results``) under the id of the flow run the scheduler created.

The host is ``test-session`` (the session's ``vllm_server`` records its state under it) and exists only
as a ``roost-host`` block; its profile (the demo model with a short benchmark, no evaluations) only as a
``model-profile`` block. Nothing here is timed: the deadlines only guard against a hung test.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.exceptions import ObjectNotFound
from roost_workers import POOL
from support.cli import run_roost
from support.flow_logs import run_logs
from support.workers import Worker, wait_final

from blocks.hosts import HostBlock
from blocks.profiles import ModelProfileBlock
from blocks.resolve import all_profiles, load_host
from deployments.deploy import DEFAULT_TIMEZONE, apply_deployment, build_deployment
from roost.hosts import CPU
from roost.profiles import LOCAL

pytestmark = pytest.mark.slow

HOST = "test-session"  # the host name the session's vllm_server fixture records its state under
PROFILE = "nightly-tiny"
QUICK_BENCH = {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [2], "repeats": 1, "warmup": 1}
LEAD_S = 15
"""The slot is the first whole minute at least this far out: the deployment is applied and the scheduler
(its recent-deployments loop runs every 5 s) has put the run on the calendar before it is due."""
SCHEDULED_WITHIN_S = 60  # guards, not timings: a hung scheduler, worker or run fails instead of hanging
RUN_TIMEOUT_S = 600


@pytest.fixture
def nightly_host(roost_setup: Any, vllm_server: Any) -> Iterator[None]:
    """The ``test-session`` host and its profile as block documents (after ``roost setup`` ran, so its
    later runs in this session do not find them), removed afterwards with the deployment and its queue."""
    HostBlock.from_profile(CPU.model_copy(update={"name": HOST})).save(HOST, overwrite=True)
    ModelProfileBlock.from_profile(LOCAL.model_copy(update={"name": PROFILE, "host": HOST, "bench": QUICK_BENCH,
                                                           "evals": []})).save(PROFILE, overwrite=True)
    yield
    with get_client(sync_client=True) as client:
        with contextlib.suppress(ObjectNotFound):  # with its scheduled runs (the next nights')
            client.delete_deployment(client.read_deployment_by_name(f"rebenchmark/{HOST}").id)
        with contextlib.suppress(ObjectNotFound):
            client.delete_work_queue_by_id(client.read_work_queue_by_name(HOST, work_pool_name=POOL).id)
        for slug, name in (("roost-host", HOST), ("model-profile", PROFILE)):
            doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
            assert doc.id is not None
            client.delete_block_document(doc.id)


def _next_slot(lead_s: float = LEAD_S) -> dt.datetime:
    """The first whole minute (UTC) at least ``lead_s`` from now."""
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lead_s)
    return at.replace(second=0, microsecond=0) + dt.timedelta(minutes=1) if at.second or at.microsecond else at


def _first_run(deployment_id: Any, timeout_s: float) -> Any:
    """The deployment's earliest flow run, once the scheduler has created one."""
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                         sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=1)
            if runs:
                return runs[0]
            time.sleep(1)
    raise AssertionError(f"the scheduler put no run of rebenchmark/{HOST} on the calendar within {timeout_s} s")


def test_scheduled_rebenchmark_fires_and_lands_in_history(
        nightly_host: None, vllm_server: Any, start_worker: Callable[[str, str], Worker],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    slot = _next_slot()
    cron = f"{slot.minute} {slot.hour} * * *"  # nightly at the next minute, as `roost setup --cron` takes it
    dep = build_deployment("rebenchmark", load_host(HOST), pool=POOL, profiles=all_profiles(), cron=cron,
                           timezone=DEFAULT_TIMEZONE)
    assert apply_deployment(dep)[0] == "created"
    # the host's worker, as the docs start one; it finds the key where an operator puts it (VLLM_API_KEY)
    monkeypatch.setenv("VLLM_API_KEY", vllm_server.api_key)
    worker = start_worker(HOST, "nightly-worker")

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(f"rebenchmark/{HOST}")
        assert [(s.schedule.cron, s.schedule.timezone, s.active) for s in deployment.schedules] == [  # type: ignore[union-attr]
            (cron, "UTC", True)]
        schedule_id = deployment.schedules[0].id
    assert deployment.parameters == {"host": HOST, "profile": PROFILE}  # the nightly defaults, nothing added

    run = _first_run(deployment.id, SCHEDULED_WITHIN_S)
    # made by the scheduler from the deployment's schedule, for the slot: not by this test
    assert run.auto_scheduled is True and "auto-scheduled" in run.tags
    assert run.created_by is not None and (run.created_by.type, run.created_by.id) == ("SCHEDULE", schedule_id)
    assert run.idempotency_key.startswith(f"scheduled {deployment.id} {schedule_id} ")
    assert run.expected_start_time == slot
    assert run.parameters == {"host": HOST, "profile": PROFILE}

    done = wait_final(run.id, timeout_s=(slot - dt.datetime.now(dt.UTC)).total_seconds() + RUN_TIMEOUT_S)
    if not done.state.is_completed():
        logs = "\n".join(line.message for line in run_logs(run.id)[-40:])
        pytest.fail(f"the scheduled run ended {done.state.name}: {done.state.message}\nits last log lines:\n{logs}\n"
                    f"worker log:\n{worker.log.read_text(errors='replace')[-3000:]}")
    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(run.id)
        first = states[0]
        assert (first.type.value, first.name, first.state_details.scheduled_time) == ("SCHEDULED", "Scheduled", slot)
        # taken by the host's worker at its time, not when it was put on the calendar: the server holds a run
        # submitted early until then (WaitForScheduledTime, which rounds the wait to whole seconds)
        assert done.work_queue_name == HOST and done.start_time >= slot - dt.timedelta(seconds=1)
        # named for profile, host, the served commit (when known) and the run's start in UTC
        assert re.fullmatch(rf"rebenchmark · {PROFILE} · {HOST}(?: · [0-9a-f]{{7}})? · \d\d-\d\d \d\d:\d\d:\d\d UTC",
                            done.name), done.name
        # every run of the deployment came from its schedule; the next nights' are still on the calendar
        others = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
                                       sort=FlowRunSort.EXPECTED_START_TIME_ASC)
    assert others[0].id == run.id
    assert all(r.auto_scheduled and r.created_by is not None and r.created_by.type == "SCHEDULE" for r in others)
    assert [(r.state_type, r.expected_start_time) for r in others[1:]] == [
        (StateType.SCHEDULED, slot + dt.timedelta(days=n)) for n in range(1, len(others))]

    # the run is in roost's history, under the flow run the scheduler created: what the host serves, measured
    code, out, err = run_roost(capsys, monkeypatch, "results", "--json", "--host", HOST)
    assert code == 0, err
    rows = [r for r in json.loads(out) if r["prefect_flow_run_id"] == str(run.id)]
    assert len(rows) == 1, out[-3000:]
    row = rows[0]
    assert (row["status"], row["profile"], row["host_name"], row["served_model_name"]) == (
        "completed", PROFILE, HOST, "tiny")
    stages = {s["stage"]: s for s in json.loads(row["stages"])}
    assert stages["serve"]["status"] == "skipped" and "already serving" in stages["serve"]["note"]
    assert stages["benchmark"]["status"] == "completed"
    assert row["points"] >= 1 and row["requests"] >= 2 and row["error_requests"] == 0
