"""The side-by-side arithmetic of ``tests/support/agreement.py``, its coalesced-round guard and its CPU
placement helper."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.agreement import Round, Workload, compare, median_interval, side_by_side, worker_cpus


def _round(tool: str, ttft: float, tpot: float, thr: float, cpu: float = 0.0, chunks: int = 10) -> Round:
    return Round(tool=tool, ttft=[ttft, ttft * 3, ttft * 2], tpot=[tpot] * 3, throughput=thr,  # type: ignore[arg-type]
                 output_lens=[10, 10, 10], chunks=[chunks] * 3, cpu_s=cpu)


def test_paired_ratio_is_the_median_over_pairs_of_round_ratios() -> None:
    pairs = [
        (_round("roost", 1.0, 0.010, 100, cpu=0.003), _round("vllm", 1.0, 0.010, 100, cpu=0.0015)),
        (_round("roost", 2.2, 0.022, 44), _round("vllm", 2.0, 0.020, 40)),  # a slow pair: both moved
        (_round("roost", 1.0, 0.010, 100), _round("vllm", 1.0, 0.010, 100)),
    ]
    a = compare(pairs, prompt_tokens=128, output_tokens=10, users=3)
    rows = {r.key: r for r in a.rows}
    assert rows["ttft"].paired_ratio == pytest.approx(1.0)  # medians 2.0/2.0, 4.4/4.0, 2.0/2.0 -> median 1.0
    assert rows["tpot"].pooled_ratio == pytest.approx(1.0)
    assert rows["throughput"].roost == 100 and rows["throughput"].paired_ratio == pytest.approx(1.0)
    assert a.worst() == pytest.approx(0.0)
    assert a.roost_cpu_us_per_token == pytest.approx(1e6 * 0.003 / 90)
    assert a.vllm_cpu_us_per_token == pytest.approx(1e6 * 0.0015 / 90)
    table = a.table()
    assert "median TPOT (s)" in table and "paired ratio" in table and "3 pairs" in table


def test_a_systematic_difference_shows_in_worst() -> None:
    pairs = [(_round("roost", 1.0, 0.0106, 95), _round("vllm", 1.0, 0.010, 100))] * 4
    a = compare(pairs, prompt_tokens=128, output_tokens=10, users=3)
    assert a.worst() == pytest.approx(0.06)


def test_systematic_counts_what_both_statistics_show() -> None:
    # a real difference in what is measured moves the pooled and the paired ratio alike
    shifted = [(_round("roost", 1.0, 0.0112, 100), _round("vllm", 1.0, 0.010, 100))] * 4
    assert compare(shifted, prompt_tokens=128, output_tokens=10, users=3).systematic() == pytest.approx(0.12)
    # noise between rounds: the median of paired ratios reads 1.15 while the pooled medians agree
    noisy = [
        (_round("roost", 1.0, 0.0115, 100), _round("vllm", 1.0, 0.010, 100)),
        (_round("roost", 1.0, 0.0100, 100), _round("vllm", 1.0, 0.0087, 100)),
        (_round("roost", 1.0, 0.0087, 100), _round("vllm", 1.0, 0.0115, 100)),
        (_round("roost", 1.0, 0.0115, 100), _round("vllm", 1.0, 0.010, 100)),
    ]
    a = compare(noisy, prompt_tokens=128, output_tokens=10, users=3)
    rows = {r.key: r for r in a.rows}
    assert rows["tpot"].paired_ratio == pytest.approx(1.15, abs=0.01) and a.worst() > 0.10
    assert abs(rows["tpot"].pooled_ratio - 1) < 0.10 and a.systematic() < 0.10


def test_pairs_with_coalesced_tokens_are_set_aside() -> None:
    good = (_round("roost", 1.0, 0.010, 100), _round("vllm", 1.0, 0.010, 100))
    # the API server fell behind: 10 tokens in 2 chunks, TPOT collapsed for both tools alike
    bad = (_round("roost", 1.0, 0.0007, 180, chunks=2), _round("vllm", 1.0, 0.0001, 190, chunks=2))
    a = compare([good, bad, good, good], prompt_tokens=128, output_tokens=10, users=3)
    assert a.degenerate() == "" and len(a.set_aside) == 1 and "20% as many chunks" in a.set_aside[0]
    assert a.worst() == pytest.approx(0.0)  # the coalesced pair did not enter the ratios
    b = compare([good, bad, bad, good, bad], prompt_tokens=128, output_tokens=10, users=3)
    assert "3 of 5 pairs had coalesced tokens" in b.degenerate()
    assert b.worst() == pytest.approx(0.0) and b.clean() == 2  # the ratios still leave the coalesced pairs out
    assert b.degenerate(clean=2) == "" and "3 of 5 pairs" in b.degenerate(clean=3)  # a caller's own bound


def test_rounds_whose_tokens_came_in_one_chunk_are_reported_not_raised() -> None:
    one_chunk = Round(tool="roost", ttft=[1.0] * 3, tpot=[], throughput=100, output_lens=[10] * 3, chunks=[1] * 3)
    pairs = [(one_chunk, _round("vllm", 1.0, 0.010, 100))] * 3
    a = compare(pairs, prompt_tokens=128, output_tokens=10, users=3)
    assert "3 of 3 pairs" in a.degenerate() and "10% as many chunks" in a.degenerate()
    assert {r.key: r.roost for r in a.rows}["tpot"] == 0.0


def test_a_tpot_below_resolution_is_coalesced_even_with_many_chunks() -> None:
    r = _round("vllm", 1.0, 0.00005, 100)
    assert "below resolution" in r.coalesced()
    assert _round("vllm", 1.0, 0.004, 100).coalesced() == ""


def test_the_median_interval_is_the_binomial_order_statistics() -> None:
    # n = 8: x(2)..x(7) (each tail 9/256 = 3.5%); n = 10: x(2)..x(9) (x(3) would leave 5.5%); n = 24: x(8)..x(17)
    assert median_interval([float(x) for x in range(8, 0, -1)]) == (2.0, 7.0)
    assert median_interval([float(x) for x in range(1, 11)]) == (2.0, 9.0)
    assert median_interval([float(x) for x in range(1, 25)]) == (8.0, 17.0)
    assert median_interval([1.0, 2.0, 3.0]) == (1.0, 3.0)  # too few for 90%: the whole range


def test_side_by_side_needs_an_even_number_of_pairs(tmp_path: Path) -> None:
    w = Workload(base_url="http://127.0.0.1:9", model="m", tokenizer=tmp_path)
    with pytest.raises(ValueError, match="even"):
        side_by_side(None, w, pairs=3)  # type: ignore[arg-type]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind one")
def test_worker_cpus_finds_threads_bound_to_fewer_than_all_cpus() -> None:
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    free = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert worker_cpus([proc.pid]) == {cpu}
        assert worker_cpus([free.pid]) == set()
    finally:
        for p in (proc, free):
            p.kill()
            p.wait()
