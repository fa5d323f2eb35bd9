"""Real workers on real queues: two hosts' runs go in parallel, one host's runs never overlap.

The runs are of the test-only ``roost-test-hold`` flow (``hold_flow.py``), which holds the same
per-host slot (``roost-serve-<host>``, strict) the serve stage takes and leaves marker files that
prove, without comparing clocks, which runs held their slots at the same time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prefect.deployments import run_deployment
from support.workers import Worker, wait_final

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 600  # a guard against a hung test; nothing below is timed


def _result(fr: Any) -> dict[str, Any]:
    value: dict[str, Any] = fr.state.result()
    return value


def _trigger(deployment: str, meet: Path, me: str, until: list[str], linger_s: float = 0.0) -> Any:
    return run_deployment(deployment, timeout=0, parameters={
        "me": me, "meet_dir": str(meet), "until": until, "linger_s": linger_s, "timeout_s": RUN_TIMEOUT_S / 2})


def test_two_workers_on_two_queues_run_at_once(hold_deployments: list[str], tmp_path: Path,
                                               start_worker: Callable[[str, str], Worker]) -> None:
    """Each run keeps its host's slot until it sees the other inside its own: both can only if both
    held their slots at once (a queue or a limit serializing them would leave the first waiting)."""
    spark = start_worker("spark", "worker-spark")
    cpu = start_worker("cpu", "worker-cpu")
    runs = {"spark": _trigger("roost-test-hold/spark", tmp_path, "spark", ["entered-cpu"]),
            "cpu": _trigger("roost-test-hold/cpu", tmp_path, "cpu", ["entered-spark"])}
    done = {h: wait_final(fr.id, RUN_TIMEOUT_S) for h, fr in runs.items()}
    for h, fr in done.items():
        assert fr.state.is_completed(), (h, fr.state)
        assert fr.work_queue_name == h
    results = {h: _result(fr) for h, fr in done.items()}
    assert {h: (r["host"], r["met"], r["clash"]) for h, r in results.items()} == {
        "spark": ("spark", True, None), "cpu": ("cpu", True, None)}
    # each ran in a process started by the worker of its own queue
    assert spark.proc.pid in results["spark"]["ancestors"] and cpu.proc.pid not in results["spark"]["ancestors"]
    assert cpu.proc.pid in results["cpu"]["ancestors"] and spark.proc.pid not in results["cpu"]["ancestors"]
    assert not (tmp_path / "slot-spark").exists() and not (tmp_path / "slot-cpu").exists()  # both released


def test_one_host_never_serves_twice_at_once(hold_deployments: list[str], tmp_path: Path,
                                             start_worker: Callable[[str, str], Worker]) -> None:
    """Two runs for one host, both running at once (two workers poll the cpu queue): the slot serializes them.

    The first to get the slot keeps it until the other has arrived and asked for it, then 3 s more;
    the other finds the slot marker gone when it gets in (it would find it if both held the slot).
    """
    start_worker("cpu", "worker-cpu-2")  # with worker-cpu: two workers poll the cpu queue
    a = _trigger("roost-test-hold/cpu", tmp_path, "a", ["arrived-b"], linger_s=3.0)
    b = _trigger("roost-test-hold/cpu", tmp_path, "b", ["arrived-a"], linger_s=3.0)
    fa, fb = wait_final(a.id, RUN_TIMEOUT_S), wait_final(b.id, RUN_TIMEOUT_S)
    assert fa.state.is_completed() and fb.state.is_completed(), (fa.state, fb.state)
    ra, rb = _result(fa), _result(fb)
    # the first holder saw the other arrive (about to ask for the slot) while it held the slot, so both
    # were running at once and the limit, not the queue, made the later one wait; neither found the
    # other's slot marker when it got in
    assert (ra["met"], ra["clash"], rb["met"], rb["clash"]) == (True, None, True, None)
    assert {p.name for p in tmp_path.iterdir()} == {"arrived-a", "arrived-b", "entered-a", "entered-b"}
