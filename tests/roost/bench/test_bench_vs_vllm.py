"""Against the real vLLM CPU server: roost agrees with ``vllm bench serve`` side by side, its prompts
land exactly on the target token counts, and the local profile's benchmark runs well under a minute.

The comparison is built to survive timing noise on 2 shared cores: both tools send the same
workload (chat endpoint, the same prompt length as the server counts it, 64 output tokens,
ignore_eos, greedy, thinking off, 8 requests at once) in interleaved rounds ordered ABBA so that
load drifts hit both alike, after a common warm-up; TTFT and TPOT are pooled over every request
of every round (vLLM's per-request TPOT recomputed from its own saved lists, with its own formula),
throughput is the median of the per-round figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from roost.bench import metrics as M
from roost.bench.reference import VllmBenchServe
from roost.bench.sweep import BenchSettings, run_benchmark
from roost.profiles import LOCAL

pytestmark = pytest.mark.slow

ROUNDS = 6  # ABBA... : V R R V V R R V V R R V
USERS = 8
OUTPUT = 64
THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def vllm_bench(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmBenchServe]:
    with VllmBenchServe(api_key=vllm_server.api_key, result_dir=tmp_path_factory.mktemp("vllm-bench")) as vb:
        yield vb


def _vllm_round(vb: VllmBenchServe, server: Any, tokenizer: Path, seed: int) -> dict[str, Any]:
    argv = vb.chat_args(server.base_url, server.model, tokenizer, input_len=128, output_len=OUTPUT,
                        num_prompts=USERS, max_concurrency=USERS, extra_body=THINKING_OFF, seed=seed)
    r = vb.run(argv)
    assert r.ok and r.result["failed"] == 0, r.error or r.result.get("errors")
    ttfts, lats, outs = r.result["ttfts"], r.result["latencies"], r.result["output_lens"]
    return {
        "ttft": list(ttfts),
        # vllm.benchmarks.serve.calculate_metrics: tpot = (latency - ttft) / (output_len - 1)
        "tpot": [(lat - t) / (n - 1) for t, lat, n in zip(ttfts, lats, outs, strict=True) if n > 1],
        "throughput": r.value("output_throughput"),
        "input_lens": list(r.result["input_lens"]),
        "output_lens": list(outs),
    }


def _roost_round(server: Any, prompt_tokens: int, seed: int) -> dict[str, Any]:
    s = BenchSettings(prompt_lengths=[], concurrency=[USERS], concurrency_prompt_tokens=prompt_tokens,
                      output_tokens=OUTPUT, repeats=1, warmup=0, metrics_poll_s=0, seed=seed)
    r = run_benchmark(server.base_url, server.model, s, api_key=server.api_key)
    assert r.status == "completed" and r.points[0].errors == 0, r.errors
    done = [x for x in r.requests if x.ok]
    assert all(x.prompt_tokens == prompt_tokens and x.completion_tokens == OUTPUT for x in done)
    return {
        "ttft": [M.ttft(x) for x in done],
        "tpot": [M.tpot(x) for x in done],
        "throughput": r.points[0].output_tok_s,
        "usage_missing": sum(x.usage_missing for x in done),
    }


def test_roost_agrees_with_vllm_bench_serve_within_5_percent(
    vllm_server: Any, vllm_bench: VllmBenchServe, tiny_model: Path
) -> None:
    # common warm-up, then learn the prompt size vLLM's random dataset really sends (as the server counts it)
    first = _vllm_round(vllm_bench, vllm_server, tiny_model, seed=100)
    _roost_round(vllm_server, 128, seed=100)
    prompt_tokens = round(statistics.median(first["input_lens"]))
    assert set(first["output_lens"]) == {OUTPUT}

    vllm: list[dict[str, Any]] = []
    roost: list[dict[str, Any]] = []
    order = "VRRV" * (ROUNDS // 2)
    for i, who in enumerate(order):
        if who == "V":
            vllm.append(_vllm_round(vllm_bench, vllm_server, tiny_model, seed=i))
        else:
            roost.append(_roost_round(vllm_server, prompt_tokens, seed=i))

    def pooled(rounds: list[dict[str, Any]], key: str) -> float:
        return statistics.median(v for r in rounds for v in r[key])

    rows = {
        "median TTFT (s)": (pooled(roost, "ttft"), pooled(vllm, "ttft")),
        "median TPOT (s)": (pooled(roost, "tpot"), pooled(vllm, "tpot")),
        "output throughput (tok/s)": (statistics.median(r["throughput"] for r in roost),
                                      statistics.median(r["throughput"] for r in vllm)),
    }
    report = "\n".join(f"{k:<28} roost {a:10.4f}  vllm {b:10.4f}  ratio {a / b:.3f}" for k, (a, b) in rows.items())
    print(f"\nprompt {prompt_tokens} tokens, {OUTPUT} output, {USERS} users, {ROUNDS} rounds each\n{report}")
    for name, (ours, theirs) in rows.items():
        assert abs(ours / theirs - 1) < 0.05, f"{name}: roost {ours:.4f} vs vllm bench serve {theirs:.4f}\n{report}"


def test_prompts_are_exact_and_the_local_profile_runs_in_well_under_a_minute(vllm_server: Any) -> None:
    settings = BenchSettings(**LOCAL.bench)
    t0 = time.monotonic()
    r = run_benchmark(vllm_server.base_url, vllm_server.model, settings, api_key=vllm_server.api_key)
    wall = time.monotonic() - t0
    print(f"\nlocal profile benchmark: {wall:.1f} s")
    for p in r.points:
        print(f"  {p.kind:<13} prompt {p.prompt_tokens:>5} users {p.concurrency:>2}: TTFT {p.ttft_s_median:.3f} s, "
              f"decode {p.decode_tok_s_median:.1f} tok/s, aggregate {p.output_tok_s:.1f} tok/s")
    assert r.status == "completed" and wall < 60
    assert [(p.kind, p.prompt_tokens, p.concurrency) for p in r.points] == [
        ("prompt_length", 128, 1), ("prompt_length", 1024, 1), ("concurrency", 512, 1), ("concurrency", 512, 4)]
    measured = [x for x in r.requests if x.phase != "warmup"]
    # exact: the server's own usage reports the target, template tokens included
    assert all(x.prompt_tokens == x.prompt_tokens_target for x in measured)
    assert all(x.completion_tokens == 64 and not x.usage_missing and x.ok for x in measured)
    for p in r.points:
        assert p.errors == 0 and p.metrics_delta["prefix_cache_hits"] == 0  # the nonce defeats prefix caching
        assert p.metrics_delta["generation_tokens"] == p.requests * 64
    assert r.knee is not None


def test_a_prompt_longer_than_the_window_is_skipped_with_the_servers_reason(vllm_server: Any) -> None:
    s = BenchSettings(prompt_lengths=[128, 3000], output_tokens=16, concurrency=[], repeats=2, warmup=0,
                      max_model_len=8192)  # claim a bigger window than the server's 2048
    r = run_benchmark(vllm_server.base_url, vllm_server.model, s, api_key=vllm_server.api_key)
    assert r.status == "completed"
    ok, rejected = r.points
    assert not ok.skipped and ok.requests == 2
    assert rejected.skipped and rejected.requests == 1 and "2048" in rejected.skip_reason
