"""The /metrics parser and the step deltas, on vLLM's own exposition format."""

from __future__ import annotations

import pytest

from roost.vllm import server_metrics as P

BEFORE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 100.0
vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 200.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 150.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 5.0
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 2.0
vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="tiny"} 0.030
vllm:request_time_per_output_token_seconds_count{engine="0",model_name="tiny"} 3.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 192.0
vllm:weird{label="a \\"quoted\\" value, with {braces}"} 7
vllm:bad_line{engine="0"} not-a-number
vllm:nan_gauge NaN
"""

AFTER = BEFORE.replace("1000.0", "3048.0").replace("} 100.0", "} 100.0").replace(
    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 200.0',
    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 600.0',
).replace(
    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 150.0',
    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 498.0',
).replace('finished_reason="length",model_name="tiny"} 5.0', 'finished_reason="length",model_name="tiny"} 9.0').replace(
    'seconds_sum{engine="0",model_name="tiny"} 0.030', 'seconds_sum{engine="0",model_name="tiny"} 0.050'
).replace('seconds_count{engine="0",model_name="tiny"} 3.0', 'seconds_count{engine="0",model_name="tiny"} 7.0').replace(
    'generation_tokens_total{engine="0",model_name="tiny"} 192.0', 'generation_tokens_total{engine="0",model_name="tiny"} 448.0'
)


def test_parse_text_reads_labels_values_and_skips_garbage() -> None:
    samples = P.parse_text(BEFORE)
    names = [s.name for s in samples]
    assert "vllm:bad_line" not in names
    weird = next(s for s in samples if s.name == "vllm:weird")
    assert weird.labels == {"label": 'a "quoted" value, with {braces}'} and weird.value == 7
    totals = P.totals(samples)
    assert totals["vllm:request_success_total"] == 8.0  # summed over label sets
    assert "vllm:nan_gauge" not in totals


def test_step_delta_counters_rates_and_gauge_peaks() -> None:
    before, after = P.totals(P.parse_text(BEFORE)), P.totals(P.parse_text(AFTER))
    d = P.step_delta(before, after, {"kv_cache_usage_perc": 0.42, "num_requests_running": 4.0})
    assert d["prefix_cache_queries"] == 2048.0
    assert d["prefix_cache_hits"] == 0.0
    assert d["prefix_cache_hit_rate"] == 0.0
    assert d["spec_decode_num_draft_tokens"] == 400.0
    assert d["spec_decode_acceptance_rate"] == pytest.approx(348 / 400)
    assert d["request_success"] == 4.0
    assert d["num_preemptions"] == 0.0
    assert d["generation_tokens"] == 256.0
    # vLLM's own per-request TPOT over the step: 4 requests finished, 0.020 s of TPOT between them
    assert d["request_tpot_count"] == 4.0 and d["request_tpot_s_mean"] == pytest.approx(0.005)
    assert d["kv_cache_usage_perc_max"] == 0.42
    assert d["num_requests_running_max"] == 4.0


def test_step_delta_without_metrics_or_after_a_restart() -> None:
    assert P.step_delta(None, None) == {}
    before = {"vllm:prefix_cache_queries_total": 500.0}
    after = {"vllm:prefix_cache_queries_total": 20.0}  # counter went down: the server restarted
    assert "prefix_cache_queries" not in P.step_delta(before, after)
