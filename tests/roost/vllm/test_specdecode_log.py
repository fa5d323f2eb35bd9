"""vLLM's SpecDecoding metrics log lines (the /metrics fallback), as this CPU's vLLM 0.32 printed them."""

from __future__ import annotations

import pytest

from roost.vllm import specdecode_log as S

# Two consecutive intervals of an ngram server (num_speculative_tokens 2); its /metrics after the
# first said drafts 63, draft tokens 120, accepted 99, per position [54, 45].
NGRAM_LOG = """\
(APIServer pid=24108) INFO 12-01 07:41:17 [loggers.py:335] Engine 000: Avg prompt throughput: 9.6 tokens/s, Avg generation throughput: 19.2 tokens/s, Running: 0 reqs
(APIServer pid=24108) INFO 12-01 07:41:17 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.57, Accepted throughput: 3.14 tokens/s, Drafted throughput: 3.81 tokens/s, Accepted: 99 tokens, Drafted: 120 tokens, Per-position acceptance rate: 0.857, 0.714, Avg Draft acceptance rate: 82.5%
INFO:     127.0.0.1:34674 - "POST /v1/completions HTTP/1.1" 200 OK
(APIServer pid=24108) INFO 12-01 07:41:27 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.25, Accepted throughput: 30.10 tokens/s, Drafted throughput: 47.30 tokens/s, Accepted: 301 tokens, Drafted: 473 tokens, Per-position acceptance rate: 0.743, 0.506, Avg Draft acceptance rate: 63.6%
"""

# An MTP server (Qwen3-Next with random weights, one speculative token): nothing accepted.
MTP_LINE = ("(APIServer pid=32647) INFO 12-01 07:45:49 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
            "1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 9.01 tokens/s, Accepted: 0 tokens, "
            "Drafted: 193 tokens, Per-position acceptance rate: 0.000, Avg Draft acceptance rate: 0.0%")


def test_one_line() -> None:
    line = S.parse_lines(NGRAM_LOG)[0]
    assert line.mean_acceptance_length == 2.57
    assert (line.accepted_tokens, line.draft_tokens) == (99, 120)
    assert line.per_position == [0.857, 0.714]
    assert line.acceptance_pct == 82.5
    assert (line.accepted_tok_s, line.drafted_tok_s) == (3.14, 3.81)
    assert line.drafts == 63  # 99 / (2.57 - 1), as /metrics counted


def test_other_lines_are_not_spec_lines() -> None:
    assert S.parse_line('INFO:     127.0.0.1:34674 - "POST /v1/completions HTTP/1.1" 200 OK') is None
    assert S.parse_line("SpecDecoding metrics: Mean acceptance length: oops") is None
    assert len(S.parse_lines(NGRAM_LOG.splitlines())) == 2


def test_intervals_sum_to_counters() -> None:
    c = S.aggregate(S.parse_lines(NGRAM_LOG))
    assert c is not None
    assert (c.draft_tokens, c.accepted_tokens) == (120 + 473, 99 + 301)  # exact
    assert c.drafts == 63 + 241  # 301 / 1.25 = 240.8 -> 241
    # per position: the printed rates times each interval's drafts
    assert c.accepted_per_position == [round(0.857 * 63 + 0.743 * 241), round(0.714 * 63 + 0.506 * 241)]
    assert c.acceptance_rate == pytest.approx(400 / 593)


def test_nothing_accepted_falls_back_to_draft_tokens_per_position() -> None:
    line = S.parse_line(MTP_LINE)
    assert line is not None and line.drafts == 193 and line.per_position == [0.0]
    c = S.aggregate([line])
    assert c is not None and c.acceptance_rate == 0.0 and c.per_position_rates == [0.0]


def test_nothing_drafted_prints_nan() -> None:
    text = MTP_LINE.replace("Drafted: 193", "Drafted: 0").replace("rate: 0.000,", "rate: nan,").replace("0.0%", "nan%")
    line = S.parse_line(text)
    assert line is not None and line.acceptance_pct is None and line.drafts == 0


def test_no_lines_no_counters() -> None:
    assert S.aggregate([]) is None
