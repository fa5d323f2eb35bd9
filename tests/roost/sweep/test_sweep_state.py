"""The sweep's dispatch decisions: one landing per host, hosts in parallel, a host lost when its landing
crashes or no worker takes it, a crashed variant missing (not retried), an unclaimed one re-queued."""

from __future__ import annotations

from roost.sweep.grid import parse_grid, variants
from roost.sweep.state import SweepState, VariantState


def state(n: int, hosts: list[str]) -> SweepState:
    vs = variants(parse_grid([f"max-num-seqs={','.join(str(2 ** i) for i in range(n))}"]))
    return SweepState(hosts=hosts, variants=[VariantState(variant=v) for v in vs])


def test_each_host_takes_one_variant_at_a_time_in_grid_order() -> None:
    s = state(5, ["spark", "spark-2"])
    first = s.assignments()
    assert [(v.name, h) for v, h in first] == [("max-num-seqs=1", "spark"), ("max-num-seqs=2", "spark-2")]
    for v, h in first:
        s.start(v, h, f"fr-{h}")
    assert s.assignments() == []  # both hosts busy
    s.finish(first[1][0], "run-2")
    (nxt,) = s.assignments()
    assert (nxt[0].name, nxt[1]) == ("max-num-seqs=4", "spark-2")
    assert s.settle()


def test_a_crashed_landing_loses_its_host_and_its_variant_the_rest_go_on_elsewhere() -> None:
    s = state(4, ["spark", "spark-2"])
    for v, h in s.assignments():
        s.start(v, h, f"fr-{h}")
    a, b = s.running
    s.crash(b, "the landing crashed")
    assert s.lost == {"spark-2": "the landing crashed"} and b.status == "missing"
    s.finish(a, "run-1")
    rest = s.assignments()
    assert [(v.name, h) for v, h in rest] == [("max-num-seqs=4", "spark")]  # only the live host
    s.start(rest[0][0], "spark", "fr-3")
    s.fail(rest[0][0], "vLLM refused --max-num-seqs=4", "engine_init_failed", "run-3")
    (last,) = s.assignments()
    s.start(last[0], "spark", "fr-4")
    s.finish(last[0], "run-4")
    assert not s.settle()
    assert s.counts() == {"done": 2, "missing": 1, "failed": 1}
    assert [v.name for v in s.variants if v.status == "missing"] == ["max-num-seqs=2"]


def test_a_landing_nobody_takes_goes_back_for_another_host() -> None:
    s = state(2, ["spark", "spark-2"])
    for v, h in s.assignments():
        s.start(v, h, f"fr-{h}")
    orphan = s.running_on("spark-2")
    assert orphan is not None
    s.unclaimed(orphan, "no worker took a run from queue spark-2 within 300 s")
    assert orphan.status == "pending" and "spark-2" in s.lost
    assert s.assignments() == []  # spark is still busy
    s.finish(s.running_on("spark") or orphan, "run-1")
    (again,) = s.assignments()
    assert again[0] is orphan and again[1] == "spark"


def test_with_no_host_left_what_is_pending_becomes_missing() -> None:
    s = state(3, ["spark"])
    (first,) = s.assignments()
    s.start(first[0], "spark", "fr-1")
    s.crash(first[0], "the landing crashed")
    assert not s.settle()
    assert [v.status for v in s.variants] == ["missing", "missing", "missing"]
    assert "no host left" in s.variants[1].reason and "spark: the landing crashed" in s.variants[1].reason


def test_a_landing_that_completed_with_nothing_stored_is_missing_and_its_host_goes_on() -> None:
    s = SweepState(hosts=["spark"], variants=[VariantState(variant=v) for v in variants(parse_grid(
        ["max-num-seqs=1,2"]))])
    (first, host), = s.assignments()
    s.start(first, host, "fr-1")
    s.not_stored(first, "completed, but its run is not in the store")
    assert first.status == "missing" and s.lost == {}
    assert [(v.name, h) for v, h in s.assignments()] == [("max-num-seqs=2", "spark")]
