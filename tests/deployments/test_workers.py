"""Real workers on real queues: two hosts' runs go in parallel, one host's runs never overlap.

The runs are of the test-only ``roost-test-hold`` flow, which holds the same per-host slot
(``roost-serve-<host>``, strict) the serve stage takes; every time below comes from the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from roost_workers import Worker, wait_final

pytestmark = pytest.mark.slow


def _hold_window(flow_run_id: Any) -> tuple[Any, Any]:
    """(start, end) of the run's hold-slot task: when it held the host's slot."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        TaskRunFilter,
        TaskRunFilterName,
    )

    with get_client(sync_client=True) as client:
        (tr,) = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                                      task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_="hold-slot")))
    assert tr.start_time is not None and tr.end_time is not None
    return tr.start_time, tr.end_time


def _result(fr: Any) -> dict[str, Any]:
    value: dict[str, Any] = fr.state.result()
    return value


def _trigger(deployment: str, seconds: float) -> Any:
    from prefect.deployments import run_deployment

    return run_deployment(deployment, parameters={"seconds": seconds}, timeout=0)


def test_two_workers_on_two_queues_run_at_once(hold_deployments: list[str],
                                               start_worker: Callable[[str, str], Worker]) -> None:
    spark = start_worker("spark", "worker-spark")
    cpu = start_worker("cpu", "worker-cpu")
    runs = {"spark": _trigger("roost-test-hold/spark", 20), "cpu": _trigger("roost-test-hold/cpu", 20)}
    done = {h: wait_final(fr.id, 300) for h, fr in runs.items()}
    for h, fr in done.items():
        assert fr.state.is_completed(), (h, fr.state)
        assert fr.work_queue_name == h
    # each ran in a process started by the worker of its own queue
    assert spark.proc.pid in _result(done["spark"])["ancestors"]
    assert cpu.proc.pid in _result(done["cpu"])["ancestors"]
    (s0, s1), (c0, c1) = _hold_window(done["spark"].id), _hold_window(done["cpu"].id)
    overlap = (min(s1, c1) - max(s0, c0)).total_seconds()
    assert overlap > 10, f"the two hosts' runs overlapped only {overlap:.1f} s of 20"


def test_one_host_never_serves_twice_at_once(hold_deployments: list[str],
                                             start_worker: Callable[[str, str], Worker]) -> None:
    """Two runs for one host, taken by two different workers, both running at once: the slot serializes them."""
    start_worker("cpu", "worker-cpu-2")  # with worker-cpu: two workers poll the cpu queue
    a, b = _trigger("roost-test-hold/cpu", 10), _trigger("roost-test-hold/cpu", 10)
    fa, fb = wait_final(a.id, 300), wait_final(b.id, 300)
    assert fa.state.is_completed() and fb.state.is_completed()
    (a0, a1), (b0, b1) = sorted([_hold_window(fa.id), _hold_window(fb.id)])
    assert b0 >= a1, f"the host's slot was held twice at once: {a0}..{a1} and {b0}..{b1}"
    # both flow runs were running before the first released the slot: the limit, not the queue, made them wait
    assert max(fa.start_time, fb.start_time) < a1
