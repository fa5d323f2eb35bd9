"""The MTP A/B end to end on this CPU: `roost run --mtp-ab` on the embedded demo model, served by a real
vLLM with speculative decoding, then restarted without it and benchmarked again.

vLLM 0.32 on CPU runs speculative decoding: ngram on any model, and MTP on a Qwen3-Next checkpoint with
``mtp.*`` tensors (but only with ``--no-enable-prefix-caching``: the hybrid model's prefix-cache
``align`` mode calls a Triton kernel with no CPU fallback). A random-weight MTP head accepts
nothing, so the A/B here drafts with ngram (``prompt_lookup``): the demo model's greedy output
repeats, and ngram drafts are accepted often enough to exercise every counter. The path is the one an
MTP checkpoint takes: the record's ``--speculative-config`` is switched off, whatever its method.

Two cold loads (with, then without; eager, so no compile warm-up): a few minutes on this machine. The speed-ups themselves are
not asserted: on a shared 2-core machine they move with the load (1.64x at one user in one run, 0.63x
in the next); the test checks that both runs measured every point and the numbers are wired through.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from support.cli import land_saved_local
from support.processes import vllm_processes

pytestmark = pytest.mark.slow

NGRAM = '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}'


@pytest.fixture(scope="module")
def ab_run(prefect_api: str) -> dict[str, Any]:
    # the demo with a short sweep (two servers are benchmarked): a saved profile, as a user would edit one
    return land_saved_local("local-ab", {
        "max_num_seqs": None,
        "bench": {"prompt_lengths": [128, 1024], "output_tokens": 64, "concurrency": [1, 4], "repeats": 1, "warmup": 1},
    }, "--mtp-ab", f"--vllm-arg=--speculative-config={NGRAM}", "--vllm-arg=--enforce-eager")


def test_both_runs_measured_every_point_and_only_one_speculated(ab_run: dict[str, Any]) -> None:
    ab = ab_run["mtp_ab"]
    assert ab["speculative_config"] == NGRAM
    assert not any("--speculative-config" in a for a in ab["baseline_vllm_args"])
    assert f"--speculative-config={NGRAM}" in ab_run["meta"]["vllm_args"]
    assert ab["baseline_start_to_healthy_s"] > 0
    assert len(ab["baseline_points"]) == len(ab_run["points"])
    for p in ab_run["points"]:  # the speculative server drafted during every point
        assert p["errors"] == 0 and p["metrics_delta"]["spec_decode_num_draft_tokens"] > 0, p
    for p in ab["baseline_points"]:  # the baseline server has no draft: no spec_decode counters at all
        assert p["errors"] == 0 and "spec_decode_num_draft_tokens" not in p["metrics_delta"], p
    stages = {s["stage"]: s for s in ab_run["stages"]}
    assert stages["mtp-ab"]["status"] == "completed" and "ngram" in stages["mtp-ab"]["note"]


def test_speedups_per_prompt_length_and_concurrency(ab_run: dict[str, Any]) -> None:
    points = ab_run["mtp_ab"]["points"]
    kinds = {(p["kind"], p["prompt_tokens"] if p["kind"] == "prompt_length" else p["concurrency"]) for p in points}
    assert {("prompt_length", 128), ("prompt_length", 1024), ("concurrency", 1), ("concurrency", 4)} <= kinds
    runs = {"with_spec": ab_run["points"], "without_spec": ab_run["mtp_ab"]["baseline_points"]}
    for p in points:
        assert 0 <= p["acceptance_rate"] <= 1, p
        for side, measured in runs.items():
            if p[side] is None:  # only where that run's every decode timing was unmeasurable (bursts on a busy CPU)
                assert p["kind"] == "prompt_length", p
                [m] = [m for m in measured if m["kind"] == "prompt_length" and m["prompt_tokens_target"] == p["prompt_tokens"]]
                assert m["unmeasurable"] == m["requests"] - m["errors"] > 0, m
        if p["with_spec"] is not None and p["without_spec"] is not None:
            assert p["speedup"] == pytest.approx(p["with_spec"] / p["without_spec"]) and math.isfinite(p["speedup"])
        else:
            assert p["speedup"] is None
    assert all(p["speedup"] for p in points if p["kind"] == "concurrency")  # aggregate rates are always measured
    assert {p["metric"] for p in points if p["kind"] == "prompt_length"} == {"decode_tok_s"}
    assert {p["metric"] for p in points if p["kind"] == "concurrency"} == {"output_tok_s"}


def test_acceptance_overall_and_per_position_from_metrics(ab_run: dict[str, Any]) -> None:
    acc = ab_run["mtp_ab"]["acceptance"]
    assert acc["source"] == "metrics"
    assert acc["drafts"] > 0 and 0 < acc["accepted_tokens"] <= acc["draft_tokens"] <= 2 * acc["drafts"]
    assert acc["rate"] == pytest.approx(acc["accepted_tokens"] / acc["draft_tokens"])
    assert acc["mean_acceptance_length"] == pytest.approx(1 + acc["accepted_tokens"] / acc["drafts"])
    first, second = acc["per_position"]  # two speculative tokens
    assert 0 < second <= first <= 1  # a draft's second token is only accepted after its first
    # the positions add up to the total (each accepted token sits at one position)
    assert (first + second) * acc["drafts"] == pytest.approx(acc["accepted_tokens"])


def test_report_and_headline_carry_the_ab(ab_run: dict[str, Any]) -> None:
    text = Path(ab_run["report_path"]).read_text()
    assert "## MTP A/B" in text and "Per draft position: 1: " in text
    paired = [p["prompt_tokens"] for p in ab_run["mtp_ab"]["points"] if p["speedup"] and p["kind"] == "prompt_length"]
    if paired:  # the measured one nearest the 2,048-token reference
        assert f"| MTP speed-up @ {max(paired):,}-token prompt |" in text
    else:  # both prompt lengths' decode timings unmeasurable in one run (a busy CPU bunches tokens): no row
        assert re.search(r"\| MTP speed-up @ [\d,]+-token prompt \|", text) is None
    for p in ab_run["mtp_ab"]["points"]:
        if p["kind"] == "concurrency":
            assert f"| {p['concurrency']} | " in text[text.index("## MTP A/B"):]
    assert "| Draft acceptance |" in text
    assert "| MTP speed-up @ 1 concurrent |" in text  # the baseline comparison: a compared metric


def test_no_server_left_running(ab_run: dict[str, Any]) -> None:
    assert vllm_processes() == []
