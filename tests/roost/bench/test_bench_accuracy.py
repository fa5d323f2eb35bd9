"""Client accuracy against ground truth: decode tok/s within 1% of what the synthetic server emitted,
from 1 to 256 concurrent streams.

The synthetic server writes token ``i`` of each stream at ``t0 + ttft + i / rate`` and records,
per request, when it actually wrote the first and the last token (``time.perf_counter``, the same
monotonic clock in both processes on Linux). Truth for a request is
``(tokens - 1) / (server t_last - server t_first)``; roost's measurement is the same formula over
the client's arrival times. The server starts each step's streams together, once all have
arrived (as continuous batching does), so the truth does not depend on how fast the client sends.
Aggregate chunk rates stay at or below 1,280/s (256 streams at 5 tok/s each, what a 3B-active MoE
serves 256 users on a Spark): the client needs ~50-130 µs of CPU per chunk
(``benchmarks/bench_client_overhead.py``), and these 2-core machines are shared.
"""

from __future__ import annotations

import statistics

import pytest
from bench_synthetic import Synthetic

from roost.bench import metrics as M
from roost.bench.sweep import BenchSettings, run_benchmark


@pytest.mark.parametrize(
    ("streams", "rate", "tokens"),
    [(1, 25.0, 128), (16, 25.0, 128), (64, 20.0, 128), (256, 5.0, 64)],
)
def test_decode_rate_within_one_percent_of_truth(synthetic: Synthetic, streams: int, rate: float, tokens: int) -> None:
    synthetic.control(tokens_per_s=rate, ttft_s=0.05, batch=streams, faults=[], reset_stats=True)
    s = BenchSettings(prompt_lengths=[], concurrency=[streams], output_tokens=tokens, repeats=1, warmup=0,
                      concurrency_prompt_tokens=64, metrics_poll_s=0)
    r = run_benchmark(synthetic.base_url, synthetic.model, s, api_key=synthetic.api_key)
    assert r.status == "completed" and r.points[0].errors == 0
    sent = synthetic.stats()["requests"]
    errors = []
    for rec in r.requests:
        truth = sent[rec.request_id]
        true_rate = (truth["tokens"] - 1) / (truth["t_last"] - truth["t_first"])
        measured = M.decode_tok_s(rec)
        assert measured is not None and rec.completion_tokens == tokens
        errors.append(abs(measured / true_rate - 1))
        # the client never sees a token before the server wrote it
        assert rec.t_first >= truth["t_first"]  # type: ignore[operator]
    assert max(errors) < 0.01, f"{streams} streams: worst request off by {100 * max(errors):.2f}%"
    assert statistics.median(M.decode_tok_s(x) or 0 for x in r.requests) == pytest.approx(rate, rel=0.01)
