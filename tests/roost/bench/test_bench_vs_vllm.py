"""roost side by side with ``vllm bench serve`` (``tests/support/agreement.py``), its prompts landing
exactly on the target token counts, and the local profile's benchmark against vLLM's own account.

Agreement is proven twice:

- against the synthetic server, whose record of what it did (when it read each request and wrote
  each token) is the ground truth: both tools must agree with each other and with that record
  (TPOT and throughput within 5%, TTFT within 50 ms, each client's own lateness included): this
  catches any difference in what is measured (a TPOT that includes the first token's wait, a TTFT
  that ends at the last token, a throughput over another window);
- against the real vLLM CPU server, both clients pinned to the CPUs vLLM's worker leaves free
  (``quiet_clients``), judged on the median of paired ratios of interleaved rounds, within bounds a
  different formula or window breaks and two clients sharing a core with the server they measure do
  not (the test's docstring argues them). The 5% target itself is a timing figure of a quiet machine,
  measured by ``benchmarks/bench_vs_vllm.py``. Unpinned, the scheduler sometimes put a client on the
  worker's core, and which one decided a TPOT ratio off by up to 13%. When the machine is so loaded
  that vLLM's API server falls behind and sends tokens in a few large chunks, both tools' TPOT
  collapses towards 0 and their ratio means nothing: such pairs are left out and measured again (more
  interleaved pairs, a bounded number), and the test fails with every pair's figures when too few
  clean pairs can be had (``Agreement.degenerate``); it is never skipped.

The local profile's TPOT is judged against vLLM's own (its engine's token times) on points whose
requests all arrived token by token; a run without enough such points is run again, a bounded number
of times, and the test fails with every run's figures when the points cannot be had.

Both run while no other test does (``quiet``): sharing the two cores with another xdist worker's test
made ``vllm bench serve`` read the synthetic 0.30 s TTFT as 0.37 s on CI, roost as 0.30 s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_synthetic import Synthetic, start_synthetic
from support.agreement import Round, Workload, clean_pairs, median_interval, quiet_clients, side_by_side
from support.reference import VllmBenchServe
from support.samples import check_decode_measured, check_decode_records

from roost.bench.sweep import BenchSettings, run_benchmark
from roost.catalogue import fmt_value
from roost.profiles import LOCAL

pytestmark = pytest.mark.slow

SYNTHETIC_TTFT_S = 0.3
SYNTHETIC_TOK_S = 40.0


@pytest.fixture(scope="module")
def vllm_bench(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmBenchServe]:
    with VllmBenchServe(api_key=vllm_server.api_key, result_dir=tmp_path_factory.mktemp("vllm-bench")) as vb:
        yield vb


@pytest.fixture(scope="module")
def synthetic_same_key(vllm_server: Any) -> Iterator[Synthetic]:
    """A synthetic server that takes the vLLM server's key, so one ``vllm bench serve`` process serves both."""
    server = start_synthetic("--ttft-s", str(SYNTHETIC_TTFT_S), "--tokens-per-s", str(SYNTHETIC_TOK_S),
                             "--max-model-len", "8192", api_key=vllm_server.api_key)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.quiet  # the other xdist worker's load makes either client late
def test_roost_and_vllm_bench_serve_agree_with_each_other_and_the_truth_on_known_timing(
    synthetic_same_key: Synthetic, vllm_bench: VllmBenchServe, tiny_model: Path
) -> None:
    syn = synthetic_same_key
    w = Workload(base_url=syn.base_url, model=syn.model, api_key=syn.api_key, tokenizer=tiny_model,
                 input_len=128, output_len=48, users=8)
    syn.control(reset_stats=True)
    agreement, pairs = side_by_side(vllm_bench, w, pairs=4)
    print("\n" + agreement.table())
    rows = {row.key: row for row in agreement.rows}
    # TPOT and throughput within 5% of each other: another window or formula moves them by more (the
    # TPOT that counts the first token's wait is 23% off, below)
    for key in ("tpot", "throughput"):
        assert abs(rows[key].paired_ratio - 1) < 0.05, agreement.table()
    # TTFT in seconds, not as a ratio: each client's lateness adds to it (vllm bench serve's single event
    # loop spends ~1.5x roost's CPU per token; on a loaded CI machine it read TTFT 16 ms later, 5.2% of
    # 0.3 s), while a TTFT with another end (the last token) would be 1.2 s off
    assert abs(rows["ttft"].roost - rows["ttft"].vllm) < 0.05, agreement.table()
    # the truth: what the server did, by its own record of every request of every round
    done = [t for t in syn.record().values() if t["tokens"] == 48]
    ttft = statistics.median(t["t_first"] - t["t_received"] for t in done)
    tpot = statistics.median((t["t_last"] - t["t_first"]) / 47 for t in done)
    print(f"server's record: median TTFT {ttft:.4f} s, median TPOT {tpot:.5f} s")
    for tool, value in (("roost", rows["tpot"].roost), ("vllm", rows["tpot"].vllm)):
        # over 47 gaps the two ends' delivery delays cancel: 5% is a TPOT that counts the first
        # token's wait ((0.3 + 47 x 0.025) / 48 = +23%) or another window
        assert value == pytest.approx(tpot, rel=0.05), f"{tool} median TPOT: {value} vs {tpot}"
    for tool, value in (("roost", rows["ttft"].roost), ("vllm", rows["ttft"].vllm)):
        # TTFT adds the request's way in and the first token's way out (a busy CPU delays both by
        # tens of ms); a TTFT that ended at the last token would be 1.2 s late. (Medians of different
        # requests: the server's lateness varies by a few ms between rounds.)
        assert -0.01 < value - ttft < 0.1, f"{tool} median TTFT: {value} vs {ttft}"
    # throughput: every round sent users x output tokens; neither tool may count another window
    for r, v in pairs:
        assert r.output_lens == [48] * 8 and v.output_lens == [48] * 8
        ceiling = 8 * 48 / (SYNTHETIC_TTFT_S + 47 / SYNTHETIC_TOK_S)
        assert r.throughput <= ceiling and v.throughput <= ceiling


REAL_PAIRS = 10  # interleaved pairs of rounds (~1 s a pair) measured first on the real server
REAL_CLEAN_PAIRS = 8  # pairs with no coalesced round the verdict is taken over, at least
REAL_MAX_PAIRS = 24  # pairs measured at most (two more at a time) to have them and a settled verdict
REAL_TPOT = (0.85, 1.10)  # roost / vllm bench serve: the median of the paired ratios (the test says why)
REAL_THROUGHPUT = (0.90, 1.15)
REAL_TTFT_S = (-0.035, 0.010)  # roost - vllm bench serve: the median of the paired differences, in seconds


def _paired(pairs: list[tuple[Round, Round]]) -> dict[str, tuple[list[float], tuple[float, float]]]:
    """Per judged figure, its value for each pair (TPOT and throughput: roost / vllm; TTFT: roost - vllm, s)
    and its bounds."""
    return {"tpot": ([r.stat("tpot") / v.stat("tpot") for r, v in pairs], REAL_TPOT),
            "throughput": ([r.throughput / v.throughput for r, v in pairs], REAL_THROUGHPUT),
            "ttft": ([r.stat("ttft") - v.stat("ttft") for r, v in pairs], REAL_TTFT_S)}


def _settled(pairs: list[tuple[Round, Round]]) -> bool:
    """Whether the clean pairs decide every figure: the 90% interval of its median (``median_interval``)
    wholly inside its bounds or wholly outside."""
    for values, (lo, hi) in _paired(pairs).values():
        a, b = median_interval(values)
        if not (lo < a <= b < hi or b <= lo or a >= hi):
            return False
    return True


@pytest.mark.quiet  # the other xdist worker's load makes either client late
def test_roost_and_vllm_bench_serve_measure_the_real_server_alike(
    vllm_server: Any, vllm_bench: VllmBenchServe, tiny_model: Path
) -> None:
    """Both tools on the real vLLM server, 8 users, rounds interleaved ABBA, judged on the median over pairs
    of the ratio of adjacent rounds (a slow stretch of the machine moves both rounds of a pair), or of their
    difference for TTFT.

    A pair with a coalesced round (the server's API process fell behind and sent its tokens in a few
    chunks: the machine's load, not either client) is left out and measured again, and so are pairs while
    a noisy stretch of the machine spreads the paired ratios so wide that the 90% interval of a median
    straddles a bound (``_settled``): two more interleaved pairs at a time, up to ``REAL_MAX_PAIRS``. With
    fewer than ``REAL_CLEAN_PAIRS`` clean pairs the test fails with every pair's figures; otherwise the
    medians are judged, settled or not by then. It is never skipped. A quiet machine settles in the first
    ten pairs.

    The bounds are two-sided and set by what they must catch and what they must not. A difference in what
    is measured: a TPOT that counted the first token's wait reads (TTFT - TPOT) / 64 / TPOT high (+22% here:
    TTFT ~45 ms, TPOT ~3 ms), a throughput over another window (from the first token) +19%, or a few % low
    for a window that takes in a gap; a TTFT that ended at the last token is +0.2 s, one stamped at the
    response headers -40 ms. Not to be caught: the clients share the CPU vLLM's worker leaves free with
    vLLM's API server (``quiet_clients``), so each client's own weight slows the server it measures, more
    for ``vllm bench serve``'s event loop, and a busier machine more; roost then sees the server faster:
    TPOT paired ratio 0.97-0.99 and throughput 1.05 on this machine with eight other sessions' load (single
    pairs 0.75-1.04), 0.82-0.97 and 1.01-1.20 on CI before timing tests ran alone. TTFT (~45 ms) is judged
    in seconds: each client's lateness adds to it, ``vllm bench serve``'s more (10 ms here; 7-34 ms on CI
    then). So TPOT within 0.85-1.10, throughput 0.90-1.15, roost's TTFT 35 ms earlier to 10 ms later.
    The 5% claim is a quiet machine's, measured by ``benchmarks/bench_vs_vllm.py`` (1 and 8 users), and
    held against a known truth by the synthetic test above."""
    w = Workload(base_url=vllm_server.base_url, model=vllm_server.model, api_key=vllm_server.api_key,
                 tokenizer=tiny_model, input_len=128, output_len=64, users=8)
    t0 = time.monotonic()
    with quiet_clients(vllm_server.base_url, [0, vllm_bench.proc.pid]) as pinned:
        agreement, pairs = side_by_side(vllm_bench, w, pairs=REAL_PAIRS, clean=REAL_CLEAN_PAIRS,
                                        max_pairs=REAL_MAX_PAIRS, settled=_settled)
    print(f"\nclients pinned to CPUs {sorted(pinned) if pinned else 'none'}; {agreement.pairs} pairs in "
          f"{time.monotonic() - t0:.0f} s")
    table = agreement.table()
    print("\n" + table)
    for r, v in pairs:
        # exact prompts (as the server counts them) and full outputs on both sides, whatever the load
        assert set(r.input_lens) == {agreement.prompt_tokens} and set(r.output_lens) == {64}
        assert set(v.output_lens) == {64}
    why = agreement.degenerate(clean=REAL_CLEAN_PAIRS)
    assert not why, (f"not judged: fewer than {REAL_CLEAN_PAIRS} clean pairs in {agreement.pairs}: {why}", table)
    good = clean_pairs(pairs)
    verdicts = {key: (statistics.median(values), median_interval(values), bounds)
                for key, (values, bounds) in _paired(good).items()}
    summary = "; ".join(f"{key} median {m:.3f} (90% interval {a:.3f}-{b:.3f}), bounds {lo}-{hi}"
                        for key, (m, (a, b), (lo, hi)) in verdicts.items())
    print(f"{len(good)} clean pairs, {'settled' if _settled(good) else 'not settled'}: {summary}")
    for key, (m, _, (lo, hi)) in verdicts.items():
        assert lo < m < hi, (f"{key}: {summary}", table)


JUDGED_POINTS = 6  # points whose TPOT is judged against vLLM's own before the verdict (a run has up to 4)
AGREEMENT_TRIES = 10  # benchmark runs (~2-5 s each) to find them: a degenerate run is measured again, not excused (a
# full suite here, quiet lock held, once found 4 judged points in 6 runs: bursts come in spells)
LOCAL_TPOT = 0.05  # the median over the judged points of roost's TPOT / vLLM's own, either way: see the test


def _local_profile_run(vllm_server: Any, settings: BenchSettings) -> tuple[list[float], list[str]]:
    """One run of the local profile's benchmark: its records checked exactly, then roost's mean TPOT over
    vLLM's own for each point every request of which arrived token by token (the ratios), and the figures."""
    t0 = time.monotonic()
    r = run_benchmark(vllm_server.base_url, vllm_server.model, settings, api_key=vllm_server.api_key)
    lines = [f"local profile benchmark: {time.monotonic() - t0:.1f} s"]
    for p in r.points:
        lines.append(
            f"  {p.kind:<13} prompt {p.prompt_tokens:>5} users {p.concurrency:>2}: TTFT {fmt_value(p.ttft_s.median, 's')}, "
            f"decode {fmt_value(p.decode_tok_s.median, 'tok/s')}, aggregate {fmt_value(p.output_tok_s.median, 'tok/s')}; "
            f"TPOT mean {fmt_value(p.tpot_s.mean, 's')}, vLLM's own {fmt_value(p.metrics_delta.get('request_tpot_s_mean'), 's')}"
            + (f"; {p.unmeasurable} unmeasurable ({p.unmeasurable_reasons})" if p.unmeasurable else ""))
    print("\n" + "\n".join(lines))
    assert r.status == "completed"
    assert [(p.kind, p.prompt_tokens, p.concurrency) for p in r.points] == [
        ("prompt_length", 128, 1), ("prompt_length", 1024, 1), ("concurrency", 512, 1), ("concurrency", 512, 4)]
    assert r.knee is not None
    measured = [x for x in r.requests if x.phase != "warmup"]
    # exact: the server's own usage reports the target, template tokens included
    assert all(x.prompt_tokens == x.prompt_tokens_target for x in measured)
    assert all(x.completion_tokens == 64 and not x.usage_missing and x.ok for x in measured)
    ratios: list[float] = []
    for i, p in enumerate(r.points):
        assert p.errors == 0 and p.metrics_delta["prefix_cache_hits"] == 0  # the nonce defeats prefix caching
        # vLLM's engine counted every token roost counted, and finished every request roost did
        assert p.metrics_delta["generation_tokens"] == p.requests * 64
        assert p.metrics_delta["request_tpot_count"] == p.requests
        # roost's TPOT (arrival times) against vLLM's own (its engine's token times, the same formula) over
        # the same requests: a request the API server delivered in a few bursts has no arrival-time TPOT, and
        # vLLM's mean (one histogram over the point) cannot leave it out, so such a point is not judged
        check_decode_records(p.model_dump())  # whatever the load: every request timed or counted unmeasurable
        bursts = [x for x in measured if x.point == i and len(set(x.token_times)) < 32]
        if not bursts and not p.unmeasurable:
            check_decode_measured(p.model_dump())  # a judged point: every request's decode timed
            ratios.append(p.tpot_s.mean / p.metrics_delta["request_tpot_s_mean"])
    return ratios, lines


@pytest.mark.quiet  # roost's TPOT judged against vLLM's engine: a loaded machine delays the API server's delivery
def test_prompts_are_exact_and_the_local_profile_agrees_with_vllms_own_account(vllm_server: Any) -> None:
    """Every run's records are exact; the TPOT agreement is judged on ``JUDGED_POINTS`` points whose every
    request's decode was timed token by token (``check_decode_measured``), taken from as many runs as it
    needs up to ``AGREEMENT_TRIES`` (CI, once: every point of a run had a request delivered in bursts), and
    fails with every run's figures when they cannot be had. This is where the local profile's decode timing
    is proven: a landing (``tests/flows/test_land_e2e.py``) is not measured again, so it checks the records.

    The median of the judged points' ratios is within ``LOCAL_TPOT`` (5%) of 1. A different formula misses
    on most points: a TPOT that counted the first token's wait reads (TTFT - TPOT) / 64 / TPOT high, here
    +6% at the 128-token prompt, +21% at 1,024, +11% and +28% at the 512-token concurrency points (TTFT
    10-56 ms, TPOT 2-3 ms); the median stays at +11% or more. A loaded machine moves single points only: an
    API server that sends a first token late and then catches up shortens one point's arrival window (CI:
    1.59 ms against vLLM's 1.98 ms at 1 user, the other points to 1%; this machine with eight other
    sessions' load: judged points 0.97-1.02). What happens at one kind of point only (the streams of 4
    users told apart) is proven against the synthetic server's record above."""
    settings = BenchSettings(**LOCAL.bench)
    ratios: list[float] = []
    figures: list[str] = []
    for _ in range(AGREEMENT_TRIES):
        judged, lines = _local_profile_run(vllm_server, settings)
        ratios += judged
        figures += lines
        if len(ratios) >= JUDGED_POINTS:
            break
    assert len(ratios) >= JUDGED_POINTS, (f"{len(ratios)} points judged in {AGREEMENT_TRIES} runs: the API server "
                                          "delivered in bursts throughout", figures)
    print(f"judged TPOT ratios (roost / vLLM's own): {' '.join(f'{x:.3f}' for x in ratios)}")
    assert abs(statistics.median(ratios) - 1) < LOCAL_TPOT, (ratios, figures)


def test_a_prompt_longer_than_the_window_is_skipped_with_the_servers_reason(vllm_server: Any) -> None:
    s = BenchSettings(prompt_lengths=[128, 3000], output_tokens=16, concurrency=[], repeats=2, warmup=0,
                      max_model_len=8192)  # claim a bigger window than the server's 2048
    r = run_benchmark(vllm_server.base_url, vllm_server.model, s, api_key=vllm_server.api_key)
    assert r.status == "completed"
    ok, rejected = r.points
    assert not ok.skipped and ok.requests == 2
    assert rejected.skipped and rejected.requests == 1 and "2048" in rejected.skip_reason
