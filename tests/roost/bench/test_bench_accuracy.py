"""Client accuracy against ground truth, from 1 to 256 concurrent streams: what roost recorded of each
stream set against the synthetic server's record of the same stream.

The server writes token ``i`` of each stream at ``t0 + ttft + i / rate`` and records when it
actually read each request and wrote each token (``time.perf_counter``, the same monotonic clock
in both processes on Linux); the comparison (``tests/bench_synthetic.py``: ``disagreements``) is
with that record, not with the nominal schedule, so a server the machine's load makes late is not
a client error. The server starts each step's streams together, once all have arrived (as
continuous batching does). Aggregate chunk rates stay at or below 1,280/s (256 streams at 5 tok/s
each, what a 3B-active MoE serves 256 users on a Spark). How close the decode rates come (within
1% of the server's record) is measured by ``benchmarks/bench_client_overhead.py``.
"""

from __future__ import annotations

import pytest
from bench_synthetic import SPAN_S, Synthetic, disagreements

from roost.bench.sweep import BenchSettings, run_benchmark


@pytest.mark.parametrize(
    ("streams", "rate", "tokens"),
    [(1, 25.0, 128), (16, 25.0, 128), (64, 20.0, 128), (256, 5.0, 64)],
)
def test_every_stream_matches_the_servers_record(synthetic: Synthetic, streams: int, rate: float, tokens: int) -> None:
    synthetic.control(tokens_per_s=rate, ttft_s=0.05, batch=streams, faults=[], reset_stats=True)
    s = BenchSettings(prompt_lengths=[], concurrency=[streams], output_tokens=tokens, repeats=1, warmup=0,
                      concurrency_prompt_tokens=64, metrics_poll_s=0)
    r = run_benchmark(synthetic.base_url, synthetic.model, s, api_key=synthetic.api_key)
    assert r.status == "completed" and r.points[0].errors == 0
    assert len(r.requests) == streams and all(x.ok and x.completion_tokens == tokens for x in r.requests)
    truth = synthetic.record()
    assert disagreements(r.requests, truth) == []
    # the point against the server's own /metrics account of it (as vLLM exports it)
    p = r.points[0]
    assert p.metrics_delta["generation_tokens"] == streams * tokens
    assert p.tpot_s.count == p.metrics_delta["request_tpot_count"] == streams
    assert p.tpot_s.mean is not None
    assert abs(p.tpot_s.mean - p.metrics_delta["request_tpot_s_mean"]) * (tokens - 1) < SPAN_S
