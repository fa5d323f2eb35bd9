"""The sweeps against the synthetic server: plan, clipping, skips, faults, a dead server, the knee.

Timing is compared with the server's record of the same streams (``bench_synthetic.disagreements``),
never with its nominal rate: a loaded machine delays the server's writes as well as the client."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from bench_synthetic import SPAN_S, Synthetic, disagreements

from roost.bench.sweep import BenchSettings, make_settings, run_benchmark
from roost.catalogue import find_knee
from roost.errors import UserError
from roost.records import BenchPoint
from roost.store import REQUESTS_SCHEMA

FAST = {"tokens_per_s": 400.0, "ttft_s": 0.01, "faults": []}


def small(**kw: object) -> BenchSettings:
    values: dict[str, object] = {"prompt_lengths": [64], "output_tokens": 16, "concurrency": [], "repeats": 2,
                                 "warmup": 1, "metrics_poll_s": 0.2}
    values.update(kw)
    return BenchSettings.model_validate(values)


# --- the knee (defined in roost.catalogue; the sweep hands it its concurrency points) ----------------


def test_the_sweep_knee_is_the_catalogue_knee_of_its_points() -> None:
    # the Ornith 1.5 35B-A3B NVFP4 recipe's sweep: peak at --max-num-seqs 20, then queueing costs throughput
    k = find_knee([(1, 43.6), (16, 431.0), (20, 490.3), (24, 405.7)])
    assert k is not None and (k.concurrency, k.peak_concurrency, k.saturated) == (20, 20, True)
    # 90% of the peak: 16 users at 480 tok/s already reach 0.9 x 495
    k = find_knee([(1, 40.0), (16, 480.0), (20, 490.0), (24, 495.0)])
    assert k is not None and (k.concurrency, k.peak_concurrency, k.saturated) == (16, 24, True)
    assert k.tolerance == pytest.approx(0.1)


def test_saved_settings_with_the_old_knee_tolerance_still_load() -> None:
    s = BenchSettings.model_validate({"knee_tolerance": 0.05, "repeats": 2})
    assert s.repeats == 2 and "knee_tolerance" not in s.model_dump()


# --- settings -----------------------------------------------------------------------------------


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(UserError, match="repeats"):
        make_settings(repeats=0)
    with pytest.raises(UserError, match="concurrency"):
        make_settings(concurrency=[0])
    with pytest.raises(UserError, match="output_tokens"):
        make_settings(output_tokens=1)


def test_levels_include_max_num_seqs_and_budgets_scale_with_the_prompt() -> None:
    s = BenchSettings(max_num_seqs=20)
    assert s.levels() == [1, 16, 20, 24]
    assert s.prompt_lengths == [512, 2048, 8192, 32768, 131072, 250000, 0]
    short, long = s.budget(512, 1), s.budget(261224, 1)
    # the Ornith 1.0 35B recipe's 261K-token prompt took 122 s to its first token
    assert long.first_token_s > 122 * 10 > short.first_token_s


# --- runs on the synthetic server -----------------------------------------------------------------


def test_prompt_lengths_are_exact_clipped_to_the_window_and_timed(synthetic: Synthetic) -> None:
    synthetic.control(**FAST, reset_stats=True)
    calls: list[tuple[str, float]] = []
    r = run_benchmark(synthetic.base_url, synthetic.model, small(prompt_lengths=[128, 0, 9000], output_tokens=64),
                      api_key=synthetic.api_key, progress=lambda m, f: calls.append((m, f)))
    assert r.status == "completed" and r.max_model_len == 4096
    assert [(p.kind, p.prompt_tokens) for p in r.points] == [("prompt_length", 128), ("prompt_length", 4032)]
    assert any("9000" in n for n in r.notes)
    for p in r.points:
        assert p.requests == 2 and p.errors == 0 and p.repeats == 2
        assert p.ttft_s.count == p.decode_tok_s.count == p.prefill_tok_s.count == 2
        assert p.unmeasurable == 0 and p.unmeasurable_reasons == ""  # a server writing every token as it goes
        assert p.metrics_delta["generation_tokens"] == 2 * 64
        assert p.metrics_delta["prefix_cache_queries"] == 2 * p.prompt_tokens
        assert_point_matches_server(p, 64)
    measured = [x for x in r.requests if x.phase != "warmup"]
    assert disagreements(measured, synthetic.record()) == []
    assert all(x.prompt_tokens == x.prompt_tokens_target for x in measured)
    assert [x.phase for x in r.requests].count("warmup") == 1
    fractions = [f for _, f in calls]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    # tidy rows for the results store
    rows = r.request_rows()
    assert len(rows) == len(r.requests)
    ident = {"store_version", "run_id", "profile", "repo_id", "commit", "host_name", "route"}  # the store's own
    assert set(REQUESTS_SCHEMA.names) - ident <= rows[0].keys()
    assert rows[-1]["ttft_s"] == pytest.approx(rows[-1]["t_first_s"])
    assert rows[-1]["token_chunks"] == 64
    assert rows[-1]["prefill_tok_s"] == pytest.approx(rows[-1]["prompt_tokens"] / rows[-1]["ttft_s"])
    assert {row["unmeasurable_reason"] for row in rows} == {""}


def test_requests_faster_than_the_ceiling_are_kept_but_left_out_of_the_decode_timings(synthetic: Synthetic) -> None:
    synthetic.control(**FAST, reset_stats=True)  # 400 tok/s, against a ceiling of 100
    r = run_benchmark(synthetic.base_url, synthetic.model, small(decode_ceiling_tok_s=100.0), api_key=synthetic.api_key)
    assert r.status == "completed"
    (p,) = r.points
    assert (p.requests, p.errors, p.unmeasurable) == (2, 0, 2)
    assert p.unmeasurable_reasons == "2 above the roofline ceiling"
    assert p.decode_tok_s.count == p.tpot_s.count == p.itl_s.count == 0 and p.decode_tok_s.median is None
    assert p.ttft_s.count == p.e2el_s.count == p.prefill_tok_s.count == 2 and p.output_tok_s.count == 2
    rows = [row for row in r.request_rows() if row["phase"] != "warmup"]
    assert len(rows) == 2
    for row in rows:  # the row keeps what the client saw, and says why it is not a measurement
        assert row["decode_tok_s"] > 100.0 * 1.05 and "the 100 tok/s ceiling" in row["unmeasurable_reason"]


def test_a_length_the_server_rejects_is_skipped_with_its_reason(synthetic: Synthetic) -> None:
    synthetic.control(**FAST)
    # claim a bigger window than the server has: its 400 must become a skipped point
    r = run_benchmark(synthetic.base_url, synthetic.model, small(prompt_lengths=[64, 5000], max_model_len=100_000),
                      api_key=synthetic.api_key)
    assert r.status == "completed"
    ok, rejected = r.points
    assert not ok.skipped and rejected.skipped and rejected.requests == 1
    assert "maximum context length is 4096" in rejected.skip_reason


def test_concurrency_points_and_the_knee(synthetic: Synthetic) -> None:
    synthetic.control(tokens_per_s=50.0, ttft_s=0.02, faults=[], reset_stats=True)
    r = run_benchmark(synthetic.base_url, synthetic.model,
                      small(prompt_lengths=[], concurrency=[1, 4], max_num_seqs=8, output_tokens=32,
                            concurrency_prompt_tokens=100), api_key=synthetic.api_key)
    assert [(p.kind, p.concurrency, p.requests) for p in r.points] == [
        ("concurrency", 1, 2), ("concurrency", 4, 8), ("concurrency", 8, 16)]
    assert disagreements([x for x in r.requests if x.phase != "warmup"], synthetic.record()) == []
    c1, c4, c8 = r.points
    for p in r.points:
        assert p.output_tok_s.count == 2 and p.metrics_delta["generation_tokens"] == p.requests * 32
        assert_point_matches_server(p, 32)
    assert c8.metrics_delta["num_requests_running_max"] >= 4 and c8.peak_running == c8.metrics_delta["num_requests_running_max"]
    assert c8.peak_waiting is None  # the synthetic server exports no waiting gauge
    # a server with no contention: every step lasts ~0.64 s whatever the users, so the aggregate
    # doubles from level to level and the knee (90% of the peak) is the highest level, not saturated.
    # Only a step stretched by more than 80% could move it.
    med = [p.output_tok_s.median or 0.0 for p in (c1, c4, c8)]
    assert med[0] < med[1] < med[2]
    assert r.knee == find_knee([(p.concurrency, p.output_tok_s.median) for p in r.points])
    assert r.knee is not None and r.knee.concurrency == 8 and not r.knee.saturated


def test_bad_server_behaviour_is_recorded_and_the_sweep_goes_on(synthetic: Synthetic) -> None:
    synthetic.control(tokens_per_s=100.0, ttft_s=0.01, faults=["ok", "cut", "error", "no_usage", "500", "hang"],
                      reset_stats=True)
    t0 = time.monotonic()
    s = small(prompt_lengths=[], concurrency=[6, 7], repeats=1, warmup=1, output_tokens=20,
              concurrency_prompt_tokens=50, ttft_timeout_base_s=2.0, min_prefill_tok_s=1e9)
    r = run_benchmark(synthetic.base_url, synthetic.model, s, api_key=synthetic.api_key)
    assert time.monotonic() - t0 < 30
    assert r.status == "completed", r.errors
    assert disagreements(r.requests, synthetic.record()) == []  # the completed ones, the no-usage one included
    c6, c7 = r.points  # levels run ascending: the faults (after the warm-up's "ok") hit c6
    assert (c7.requests, c7.errors) == (7, 0)  # after the faults: healthy again
    # counted from chunks: the cut stream, the error event and the one without usage
    assert (c6.requests, c6.errors, c6.usage_missing) == (6, 4, 3)
    kinds = sorted(str(x.error_kind) for x in r.requests if x.concurrency == 6)
    assert kinds == ["None", "None", "cut", "http", "stream_error", "timeout"]
    assert c6.decode_tok_s.count == 2  # only the 2 completed requests enter the distributions


def test_a_server_that_dies_while_prompts_are_built_stopped_answering(fresh_synthetic: Synthetic) -> None:
    """A death between measured steps (the tokenizer's request cut or refused) is the same failure as one
    inside a step: the server stopped answering, with what was measured kept (CI once had a bare
    "ReadError" here, a kill that landed while the next point's prompts were counted)."""
    srv = fresh_synthetic
    srv.control(tokens_per_s=200.0, ttft_s=0.01)
    s = small(prompt_lengths=[64, 128, 256], repeats=1, warmup=1, ttft_timeout_base_s=5.0)
    whole = run_benchmark(srv.base_url, srv.model, s, api_key=srv.api_key)
    calls = sum(1 for _, path in srv.stats()["log"] if path == "/tokenize")
    assert whole.status == "completed" and calls >= 3, (whole.errors, calls)
    srv.control(tokenize_left=calls // 2)
    r = run_benchmark(srv.base_url, srv.model, s, api_key=srv.api_key)
    assert r.status == "failed" and r.errors[0].startswith("server stopped answering: "), r.errors
    assert len(r.points) < 3 and all(p.errors == 0 for p in r.points)


def test_a_server_that_dies_mid_run_fails_the_run_with_what_was_measured(fresh_synthetic: Synthetic) -> None:
    srv = fresh_synthetic
    srv.control(tokens_per_s=200.0, ttft_s=0.01, faults=["ok", "ok", "ok", "die"])
    s = small(prompt_lengths=[64, 128, 256], repeats=1, warmup=1, ttft_timeout_base_s=5.0)
    t0 = time.monotonic()
    r = run_benchmark(srv.base_url, srv.model, s, api_key=srv.api_key)
    assert time.monotonic() - t0 < 60
    assert r.status == "failed" and "stopped answering" in r.errors[0]
    assert [p.prompt_tokens for p in r.points] == [64, 128, 256]
    assert r.points[0].errors == 0 and r.points[1].errors == 0 and r.points[2].errors == 1
    assert len([x for x in r.requests if x.ok]) == 3  # warm-up and the two points before the crash


def test_wrong_key_and_unknown_model_are_user_errors(synthetic: Synthetic) -> None:
    with pytest.raises(UserError, match="rejected the API key"):
        run_benchmark(synthetic.base_url, synthetic.model, small(), api_key="nope")
    with pytest.raises(UserError, match="serves: synthetic"):
        run_benchmark(synthetic.base_url, "other", small(), api_key=synthetic.api_key)
    with pytest.raises(UserError, match="has no /v1/models"):
        run_benchmark(synthetic.base_url + "/wrong/path", synthetic.model, small(), api_key=synthetic.api_key)


def test_run_benchmark_works_from_inside_a_running_event_loop_and_leaves_no_thread(synthetic: Synthetic) -> None:
    synthetic.control(**FAST)
    before = set(threading.enumerate())
    progress: list[str] = []

    async def caller() -> tuple[str, str]:
        r = run_benchmark(synthetic.base_url, synthetic.model, small(repeats=1, warmup=0),
                          api_key=synthetic.api_key, progress=lambda m, f: progress.append(threading.current_thread().name))
        return r.status, threading.current_thread().name

    status, caller_thread = asyncio.run(caller())
    assert status == "completed" and progress
    # the run went to a helper thread (this one runs a loop) and the progress to worker threads:
    assert caller_thread not in progress
    assert set(threading.enumerate()) == before  # all joined: no helper or worker thread left behind


def assert_point_matches_server(p: BenchPoint, tokens: int) -> None:
    """The point's mean TPOT against the server's own account in ``/metrics`` (vLLM's
    ``request_time_per_output_token_seconds``, which the synthetic server exports from its writes)."""
    assert p.tpot_s.mean is not None and p.metrics_delta["request_tpot_count"] == p.tpot_s.count
    assert abs(p.tpot_s.mean - p.metrics_delta["request_tpot_s_mean"]) * (tokens - 1) < SPAN_S
