"""One test per metric of roost/bench/metrics.py, on hand-computed records."""

from __future__ import annotations

import numpy as np
import pytest

from roost.bench import metrics as M
from roost.bench.metrics import Step
from roost.bench.validity import Kind
from roost.vllm.stream import RequestRecord


def rec(
    t_sent: float = 100.0,
    token_times: list[float] | None = None,
    completion_tokens: int | None = None,
    error: str = "",
    usage_missing: bool = False,
) -> RequestRecord:
    ts = token_times if token_times is not None else [100.5, 100.6, 100.7, 100.8, 100.9]
    return RequestRecord(
        request_id="r",
        t_sent=t_sent,
        t_first=ts[0] if ts else None,
        t_last=ts[-1] if ts else None,
        token_times=ts,
        completion_tokens=completion_tokens if completion_tokens is not None else (len(ts) if ts else None),
        usage_missing=usage_missing,
        error=error,
        error_kind="cut" if error else None,
    )


def test_ttft_is_send_to_first_token_chunk() -> None:
    assert M.ttft(rec()) == pytest.approx(0.5)
    assert M.ttft(rec(token_times=[])) is None


def test_e2el_is_send_to_last_token_chunk() -> None:
    assert M.e2el(rec()) == pytest.approx(0.9)


def test_output_tokens_prefers_usage_and_falls_back_to_chunks() -> None:
    # usage says 9 tokens in 5 chunks (vLLM merged some): usage wins
    assert M.output_tokens(rec(completion_tokens=9)) == 9
    no_usage = rec()
    no_usage.completion_tokens = None
    assert M.output_tokens(no_usage) == 5


def test_tpot_excludes_the_first_token() -> None:
    # 0.4 s between first and last token, 9 tokens -> 8 intervals
    assert M.tpot(rec(completion_tokens=9)) == pytest.approx(0.4 / 8)
    assert M.tpot(rec(token_times=[100.5], completion_tokens=1)) is None


def test_decode_tok_s_is_tokens_after_the_first_over_their_span() -> None:
    # (completion_tokens - 1) / (t_last - t_first), with usage tokens, not chunks
    assert M.decode_tok_s(rec(completion_tokens=9)) == pytest.approx(8 / 0.4)
    assert M.decode_tok_s(rec()) == pytest.approx(4 / 0.4)
    assert M.decode_tok_s(rec(completion_tokens=9)) == pytest.approx(1 / M.tpot(rec(completion_tokens=9)))  # type: ignore[operator]


def test_itl_is_every_gap_between_token_chunks() -> None:
    assert M.itl(rec(token_times=[1.0, 1.1, 1.35])) == pytest.approx([0.1, 0.25])
    assert M.itl(rec(token_times=[1.0])) == []


def test_output_throughput_counts_completed_requests_over_the_step_wall_time() -> None:
    ok1, ok2 = rec(completion_tokens=64), rec(completion_tokens=64)
    failed = rec(completion_tokens=30, error="cut")
    assert M.output_throughput([ok1, ok2, failed], wall_s=2.0) == pytest.approx(64.0)
    assert M.output_throughput([failed], wall_s=2.0) is None
    assert M.output_throughput([ok1], wall_s=0.0) is None


def test_request_throughput_is_completed_requests_per_second() -> None:
    assert M.request_throughput([rec(), rec(), rec(error="x")], wall_s=4.0) == pytest.approx(0.5)


@pytest.mark.parametrize("p", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(p: float) -> None:
    xs = [0.31, 0.54, 1.65, 7.1, 42.9, 114.0, 122.0, 3.3]
    assert M.percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)))
    assert M.percentile([], p) is None


def test_median_is_p50() -> None:
    assert M.median([3.0, 1.0, 2.0, 10.0]) == pytest.approx(2.5)


def test_summarize_ignores_missing_values() -> None:
    d = M.summarize([1.0, None, 3.0, 2.0])
    assert (d.count, d.min, d.median, d.max, d.mean) == (3, 1.0, 2.0, 3.0, 2.0)
    assert d.p10 == pytest.approx(1.2) and d.p90 == pytest.approx(2.8)
    assert M.summarize([]).median is None


def test_point_stats_pools_requests_and_takes_throughput_per_step() -> None:
    s1 = Step(records=[rec(completion_tokens=9), rec(completion_tokens=9, error="cut")], wall_s=1.0)
    s2 = Step(records=[rec(t_sent=100.3, completion_tokens=9)], wall_s=3.0)
    st = M.point_stats([s1, s2])
    assert (st.requests, st.errors) == (3, 1)
    assert st.ttft.count == 2 and st.ttft.median == pytest.approx((0.5 + 0.2) / 2)
    assert st.decode_tok_s.median == pytest.approx(20.0)
    # per step: 9 tok / 1 s and 9 tok / 3 s -> median of the two repeats
    assert st.output_throughput.min == pytest.approx(3.0) and st.output_throughput.max == pytest.approx(9.0)
    assert st.output_throughput.median == pytest.approx(6.0)
    assert st.itl.count == 8


def test_usage_missing_is_counted() -> None:
    st = M.point_stats([Step(records=[rec(usage_missing=True), rec()], wall_s=1.0)])
    assert st.usage_missing == 1


def test_prefill_tok_s_is_prompt_tokens_over_ttft() -> None:
    # the 9B recipe at an 8,206-token prompt: TTFT 1.85 s -> 4,436 tok/s (the recipe quotes ~4,430)
    r = rec(t_sent=100.0, token_times=[101.85, 101.93])
    r.prompt_tokens = 8206
    assert M.prefill_tok_s(r) == pytest.approx(8206 / 1.85)
    r.prompt_tokens = None
    assert M.prefill_tok_s(r) is None
    assert M.prefill_tok_s(rec(token_times=[])) is None


def _local_128(token_times: list[float], tokens: int = 64) -> RequestRecord:
    """A request of the local profile's 128-token point, sent at 0, its chunks at ``token_times``."""
    return RequestRecord(request_id="r", t_sent=0.0, t_first=token_times[0], t_last=token_times[-1],
                         token_times=token_times, completion_tokens=tokens, prompt_tokens=128)


def test_point_stats_keeps_unmeasurable_requests_out_of_the_decode_timings() -> None:
    # the local profile through Docker: repeat 1 decoded "8,970 tok/s" (63 tokens in 7 ms after a 68 ms
    # first token), repeat 2 got all 64 tokens at one instant; repeat 3 is a normal 200 tok/s stream
    burst_8970 = _local_128([0.068 + (63 / 8970) * i / 63 for i in range(64)])
    one_instant = _local_128([0.068] * 64)
    normal = _local_128([0.030 + i / 200 for i in range(64)])
    steps = [Step(records=[r], wall_s=r.t_last or 0.0) for r in (burst_8970, one_instant, normal)]
    st = M.point_stats(steps, ceiling_tok_s=3464.5)
    assert (st.requests, st.errors, st.unmeasurable) == (3, 0, 2)
    assert st.unmeasurable_kinds == [Kind.ABOVE_CEILING, Kind.BURST]
    # decode timings: only the normal stream
    assert st.decode_tok_s.count == st.tpot.count == 1 and st.decode_tok_s.median == pytest.approx(200.0)
    assert st.itl.count == 63 and st.itl.max == pytest.approx(0.005)
    # what stays true of every completed request: TTFT, end-to-end latency, prefill, the throughputs
    assert st.ttft.count == st.e2el.count == st.prefill_tok_s.count == 3
    assert st.prefill_tok_s.max == pytest.approx(128 / 0.030)
    assert st.output_throughput.count == 3 and st.output_tokens.count == 3
    # without a ceiling only the stream evidence counts: an evenly spaced 8,970 tok/s stream passes
    st = M.point_stats(steps)
    assert (st.unmeasurable, st.unmeasurable_kinds) == (1, [Kind.BURST])
    assert st.decode_tok_s.count == 2 and st.decode_tok_s.max == pytest.approx(8970.0)


def test_a_repeat_that_measured_nothing_contributes_nothing() -> None:
    # repeat 1 measured: 9 tokens in 1 s; repeat 2: every request failed; repeat 3: it "completed" with no
    # token (usage 0) -> no 0 tok/s in the per-repeat throughput; a one-token request has no
    # decode and adds no inter-token gap
    good = Step(records=[rec(completion_tokens=9)], wall_s=1.0)
    failed = Step(records=[rec(error="cut")], wall_s=2.0)
    empty = Step(records=[rec(token_times=[], completion_tokens=0)], wall_s=2.0)
    one = Step(records=[rec(token_times=[100.5, 100.5004], completion_tokens=1)], wall_s=1.0)
    st = M.point_stats([good, failed, empty, one])
    assert M.output_throughput(empty.records, 2.0) is None
    assert st.output_throughput.count == 2 and st.output_throughput.min == pytest.approx(1.0)  # good 9/1, one 1/1
    assert st.itl.count == 4 and st.itl.min == pytest.approx(0.1)  # the good request's 4 gaps only
    assert st.decode_tok_s.count == st.tpot.count == 1
