"""Speculative-decoding counters from /metrics, per draft position included.

The exposition is what vLLM 0.32 on this CPU served with ``--speculative-config
'{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}'`` (``_created`` gauges kept:
they share the name prefix and must not be read as counters)."""

from __future__ import annotations

import pytest

from roost.vllm import server_metrics as P

SCRAPE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 63.0
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7961108457932248e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 120.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="tiny"} 1.7961108457932677e+09
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 99.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 54.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 45.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="tiny",position="0"} 1.79e+09
vllm:generation_tokens_total{engine="0",model_name="tiny"} 192.0
"""


def test_counters_of_one_scrape() -> None:
    c = P.spec_counters(P.parse_text(SCRAPE))
    assert c is not None
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (63.0, 120.0, 99.0)
    assert c.accepted_per_position == [54.0, 45.0]
    assert c.acceptance_rate == pytest.approx(99 / 120)
    assert c.mean_acceptance_length == pytest.approx(1 + 99 / 63)  # vLLM's log said 2.57 for this interval
    assert c.per_position_rates == pytest.approx([54 / 63, 45 / 63])  # the log's 0.857, 0.714


def test_per_position_sums_engines_and_skips_bad_labels() -> None:
    text = SCRAPE + "\n".join([
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="1"} 5.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="x"} 9.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny"} 9.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="2",model_name="tiny",position="3"} NaN',
    ])
    assert P.per_position(P.parse_text(text)) == {0: 54.0, 1: 50.0}


def test_a_gap_in_positions_reads_as_zero() -> None:
    text = SCRAPE.replace('position="1"} 45.0', 'position="2"} 45.0')
    c = P.spec_counters(P.parse_text(text))
    assert c is not None and c.accepted_per_position == [54.0, 0.0, 45.0]


def test_a_server_without_a_draft_has_no_counters() -> None:
    text = 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 192.0\n'
    assert P.spec_counters(P.parse_text(text)) is None


def test_increase_between_two_scrapes() -> None:
    before = P.spec_counters(P.parse_text(SCRAPE))
    after = P.spec_counters(P.parse_text(SCRAPE.replace("} 63.0", "} 163.0").replace("} 120.0", "} 320.0")
                                         .replace("} 99.0", "} 199.0").replace('"0"} 54.0', '"0"} 114.0')
                                         .replace('"1"} 45.0', '"1"} 85.0')))
    assert before is not None and after is not None
    d = after.minus(before)
    assert d is not None
    assert (d.drafts, d.draft_tokens, d.accepted_tokens, d.accepted_per_position) == (100, 200, 100, [60, 40])
    assert d.acceptance_rate == 0.5 and d.per_position_rates == [0.6, 0.4]


def test_a_counter_that_went_down_means_a_restart() -> None:
    before = P.spec_counters(P.parse_text(SCRAPE))
    after = P.spec_counters(P.parse_text(SCRAPE.replace("} 63.0", "} 3.0")))
    assert before is not None and after is not None
    assert after.minus(before) is None


def test_rates_with_nothing_drafted_are_none() -> None:
    c = P.SpecCounters(drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=[0.0])
    assert c.acceptance_rate is None and c.mean_acceptance_length is None and c.per_position_rates == []
