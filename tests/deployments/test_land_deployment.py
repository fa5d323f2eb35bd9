"""``land`` through its deployment, end to end, with a worker that dies mid-run.

All real: ``roost setup`` on the session's Prefect server, ``prefect worker start`` processes, the
local Hub mirror, vLLM on this CPU. The run is triggered with ``run_deployment`` and everything
asserted comes back through the API (states, logs, artifacts) or from roost's own state files.

1. The worker running ``land/cpu`` is killed (with the flow-run process; vLLM, in its own
   session, survives like it would when a worker crashes): the run is marked Crashed (heartbeats
   stop; the automation ``roost setup`` created fires), the orphan vLLM keeps running, and the
   server sends the crash alert to Slack (a local receiver): deployment, host, the stage it died in;
   the host's serving slot, which nobody released, frees itself when its lease runs out.
2. The crashed run is retried (what the UI's Retry does) on a new worker: the serve stage stops
   the orphan first, the run completes, its artifacts are there, and the server is kept serving.
3. ``rebenchmark/cpu`` benchmarks that kept server without starting another one.
4. With nothing serving, ``rebenchmark/cpu`` lands the profile first.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
)
from prefect.deployments import run_deployment
from prefect.states import AwaitingRetry
from pydantic import SecretStr
from roost_workers import run_setup
from support.flow_logs import run_log_text
from support.slack import assert_no_secret
from support.wait import poll, wait_for
from support.workers import Worker, wait_final

from blocks.profiles import ModelProfileBlock
from roost.profiles import LOCAL
from roost.serve.base import ServerInfo
from roost.serve.process import _group_alive, process_servers, reap_stale_servers
from roost.store import load_records
from tasks.host_slot import LEASE_S, host_limit_name

pytestmark = pytest.mark.slow

QUICK = "local-quick"  # the demo model with a short benchmark: a profile that exists only as a block
QUICK_BENCH = {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [2], "repeats": 1, "warmup": 1}
PARAMS = {"profile": QUICK, "keep_serving": True, "notify": False}


@pytest.fixture(scope="module")
def quick_profile(crash_alerts: Any) -> Iterator[str]:
    """The ``local-quick`` profile block, offered by the deployments after ``roost setup`` runs again;
    the ``roost-vllm-api-key`` Secret, so a later run can benchmark the server an earlier one kept.
    Removed at the end, before ``crash_alerts`` (which it is set up after) turns the alerts off with one
    more ``roost setup``: that run also takes local-quick out of the deployments' forms."""
    ModelProfileBlock.from_profile(LOCAL.model_copy(update={
        "name": QUICK, "bench": QUICK_BENCH,
        # no torch.compile warm-up: each cold load 20-45 s shorter (nothing here is about compiling)
        "vllm_overrides": [*LOCAL.vllm_overrides, "--enforce-eager"],
    })).save(QUICK, overwrite=True)
    Secret(value=SecretStr(secrets.token_urlsafe(16))).save("roost-vllm-api-key", overwrite=True)
    report = run_setup()
    updated = {i["name"] for i in report["items"] if i["kind"] == "deployment" and i["status"] == "updated"}
    assert {"land/cpu", "land/spark", "audit/cpu", "rebenchmark/cpu"} <= updated  # the form now lists local-quick
    yield QUICK
    reap_stale_servers("cpu")
    with get_client(sync_client=True) as client:
        for slug, name in (("model-profile", QUICK), ("secret", "roost-vllm-api-key")):
            doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
            assert doc.id is not None
            client.delete_block_document(doc.id)


def _trigger(name: str, parameters: dict[str, Any]) -> Any:
    """``run_deployment`` without waiting: the new flow run."""
    return run_deployment(name, parameters=parameters, timeout=0)


def _wait_for_server(exclude: set[int], timeout_s: float = 900) -> ServerInfo:
    found = wait_for("a vLLM server started on host cpu",
                     lambda: [s for s in process_servers("cpu") if s.pid not in exclude], timeout_s=timeout_s)
    return found[-1]


def _artifact_keys(flow_run_id: Any) -> set[str]:
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key for a in arts if a.key}


def _task_states(flow_run: Any) -> dict[str, str]:
    """Task name -> state type, for the task runs of the flow run's latest attempt.

    (The crashed attempt's task runs stay as its dead process left them, e.g. health-wait RUNNING.)
    """
    with get_client(sync_client=True) as client:
        trs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
    return {tr.name.rsplit("-", 1)[0]: tr.state.type.value for tr in trs
            if tr.state is not None and tr.flow_run_run_count == flow_run.run_count}


@pytest.fixture(scope="module")
def crashed_then_retried(quick_profile: str, start_worker: Callable[[str, str], Worker],
                         crash_alerts: Any) -> dict[str, Any]:
    before = {s.pid for s in process_servers("cpu") if s.pid is not None}
    worker = start_worker("cpu", "worker-cpu-land")
    fr = _trigger("land/cpu", PARAMS)
    orphan = _wait_for_server(before)  # the serve stage has started vLLM
    killed = worker.kill_hard(spare_pgids={orphan.pid or -1})
    slot_at_kill = _slot_count()  # the dead run's slot: still held, by a lease nobody renews
    # the retry's worker starts while the heartbeats are missed (30-60 s): idle until the run is retried
    start_worker("cpu", "worker-cpu-land-2")
    crashed = wait_final(fr.id, 300)
    orphan_alive_after_crash = orphan.pid is not None and _group_alive(orphan.pid)
    alert = crash_alerts.text_mentioning(str(fr.id))  # before the retry relabels the run
    slot_freed = _wait_slot_free(LEASE_S + 60)  # its lease runs out: the server gives the slot back

    with get_client(sync_client=True) as client:
        result: Any = client.set_flow_run_state(fr.id, AwaitingRetry(message="retry after the worker died"))
    assert result.status.value == "ACCEPT", result
    done = wait_final(fr.id, 1500)
    return {"flow_run": done, "crashed": crashed, "orphan": orphan, "killed": killed,
            "orphan_alive_after_crash": orphan_alive_after_crash, "alert": alert,
            "slot_at_kill": slot_at_kill, "slot_freed": slot_freed}


def _slot_count() -> int:
    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(host_limit_name("cpu")).active_slots


def _wait_slot_free(timeout_s: float) -> bool:
    return poll(_slot_count, lambda n: n == 0, timeout_s=timeout_s, every_s=1) == 0


def test_killed_worker_marks_the_run_crashed(crashed_then_retried: dict[str, Any]) -> None:
    crashed = crashed_then_retried["crashed"]
    assert crashed.state.type.value == "CRASHED", crashed.state
    assert "roost: no heartbeat from this run's worker; marked crashed" in (crashed.state.message or "")
    assert len(crashed_then_retried["killed"]) >= 2  # the worker and the flow-run process
    assert crashed_then_retried["orphan_alive_after_crash"]  # what a dead worker leaves behind


def test_the_dead_runs_host_slot_frees_when_its_lease_runs_out(crashed_then_retried: dict[str, Any]) -> None:
    """Nobody releases the slot of a run whose process was killed: it was still held right after the kill,
    and is free again once its lease (``tasks.host_slot.LEASE_S``, no longer renewed) runs out."""
    assert crashed_then_retried["slot_at_kill"] == 1
    assert crashed_then_retried["slot_freed"]


def test_crashed_run_is_alerted_on_slack(crashed_then_retried: dict[str, Any]) -> None:
    """The run's own process (which sends roost's Slack messages) is dead: the server tells Slack."""
    crashed, text = crashed_then_retried["crashed"], crashed_then_retried["alert"]
    lines = text.splitlines()
    assert lines[0] == f"*roost: run {crashed.name} crashed*", text
    # killed once vLLM's process exists: in the serve stage, or just after it, waiting for health
    assert {"last stage: serve", "last stage: health-wait"} & set(lines), text
    for line in ("deployment: land/cpu", "host: cpu",
                 "state: Crashed: roost: no heartbeat from this run's worker; marked crashed",
                 f"run: {crashed.name} http://127.0.0.1:4200/runs/flow-run/{crashed.id}"):
        assert line in lines, (line, text)
    assert_no_secret(text)


def test_retry_cleans_up_and_completes_with_artifacts(crashed_then_retried: dict[str, Any]) -> None:
    fr, orphan = crashed_then_retried["flow_run"], crashed_then_retried["orphan"]
    assert fr.state.is_completed(), fr.state
    assert fr.run_count >= 2
    assert orphan.pid is not None and not _group_alive(orphan.pid)
    assert f"stopped 1 vLLM server(s) a crashed earlier run left on host cpu (pids [{orphan.pid}])" in run_log_text(fr.id)
    keys = _artifact_keys(fr.id)
    assert {f"roost-report-{QUICK}-cpu", f"roost-headline-{QUICK}-cpu",
            f"roost-benchmark-points-{QUICK}-cpu"} <= keys, keys
    states = _task_states(fr)
    for name in ("download", "audit", "plan", "serve", "health-wait", "benchmark", "report"):
        assert states.get(name) == "COMPLETED", (name, states)
    (kept,) = process_servers("cpu")  # keep_serving: the new server stays, the orphan is gone
    assert kept.pid != orphan.pid


def _stored(flow_run_id: Any) -> Any:
    (rec,) = [r for r in load_records(model=LOCAL.repo_id, host="cpu") if r.meta.prefect_flow_run_id == str(flow_run_id)]
    return rec


def test_rebenchmark_measures_the_kept_server(crashed_then_retried: dict[str, Any],
                                              start_worker: Callable[[str, str], Worker]) -> None:

    (kept,) = process_servers("cpu")
    landed = _stored(crashed_then_retried["flow_run"].id)
    fr = wait_final(_trigger("rebenchmark/cpu", {"profile": QUICK, "notify": False}).id, 900)
    assert fr.state.is_completed(), fr.state
    assert [s.pid for s in process_servers("cpu")] == [kept.pid]  # measured in place, nothing restarted
    rec = _stored(fr.id)
    assert rec.meta.commit == landed.meta.commit and rec.meta.vllm_args == landed.meta.vllm_args
    stages = {s.stage: s.status for s in rec.stages}  # stored by the report stage, so up to the benchmark
    assert (stages["serve"], stages["benchmark"]) == ("skipped", "completed")
    assert rec.points and all(p.errors == 0 for p in rec.points)
    assert f"roost-benchmark-points-{QUICK}-cpu" in _artifact_keys(fr.id)


def test_rebenchmark_lands_first_when_nothing_serves(crashed_then_retried: dict[str, Any],
                                                    start_worker: Callable[[str, str], Worker]) -> None:
    reap_stale_servers("cpu")
    assert process_servers("cpu") == []
    fr = wait_final(_trigger("rebenchmark/cpu", {"profile": QUICK, "notify": False}).id, 1500)
    assert fr.state.is_completed(), fr.state
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[fr.id])))
    assert fr.name.startswith(f"rebenchmark · {QUICK} · cpu"), fr.name
    (land_run,) = [c for c in children if c.name.startswith(f"land · {QUICK} · cpu · ")]
    assert land_run.state is not None and land_run.state.is_completed()
    assert land_run.parameters["keep_serving"] is True
    assert len(process_servers("cpu")) == 1  # landed and kept serving for the next night
    assert f"roost-report-{QUICK}-cpu" in _artifact_keys(land_run.id)
