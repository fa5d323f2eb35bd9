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
in the next), and a landing is not measured again. The test checks what holds whatever the load: both
runs measured every point, every decode timing is an exact record (timed, or counted unmeasurable with
its reason: ``check_decode_records``), and each A/B figure is exactly the two runs' own numbers and
their ratio, down to the report's rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.cli import land_saved_local
from support.processes import vllm_processes
from support.samples import check_decode_records

pytestmark = pytest.mark.slow

NGRAM = '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}'


@pytest.fixture(scope="module")
def ab_run(prefect_api: str) -> dict[str, Any]:
    # the demo with a short sweep (two servers are benchmarked): a saved profile, as a user would edit one
    # as few sequences as the top level runs at once, and a pool for them (not the demo's 1 GiB): two servers
    return land_saved_local("local-ab", {
        "max_num_seqs": 4, "kv_cache_memory_bytes": 256 * 1024**2,
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
    """Each A/B point carries exactly the two runs' own rates (the median decode rate at a prompt length,
    None when every decode timing of that run's point was unmeasurable; the median aggregate rate at a
    concurrency level, which every step measures) and their ratio."""
    points = ab_run["mtp_ab"]["points"]
    kinds = {(p["kind"], p["prompt_tokens"] if p["kind"] == "prompt_length" else p["concurrency"]) for p in points}
    assert {("prompt_length", 128), ("prompt_length", 1024), ("concurrency", 1), ("concurrency", 4)} <= kinds
    runs = {"with_spec": ab_run["points"], "without_spec": ab_run["mtp_ab"]["baseline_points"]}
    for measured in runs.values():
        for m in measured:
            check_decode_records(m)  # timed, or counted unmeasurable with the reason (bursts on a busy CPU)
    for p in points:
        assert 0 <= p["acceptance_rate"] <= 1, p
        metric = "decode_tok_s" if p["kind"] == "prompt_length" else "output_tok_s"
        assert p["metric"] == metric, p
        for side, measured in runs.items():
            [m] = [m for m in measured if (m["kind"], m["prompt_tokens_target"] or m["prompt_tokens"], m["concurrency"])
                   == (p["kind"], p["prompt_tokens"], p["concurrency"])]  # paired as roost.bench.mtp pairs them
            assert p[side] == m[metric]["median"], (side, p, m)  # that run's own figure, exactly
        both = p["with_spec"] is not None and p["without_spec"] is not None
        assert p["speedup"] == (pytest.approx(p["with_spec"] / p["without_spec"]) if both else None), p
    assert all(p["speedup"] for p in points if p["kind"] == "concurrency")  # aggregate rates are always measured


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
    # a compared row for every prompt length with a speed-up (the headline's, the one nearest the 2,048-token
    # reference, among them) and none for a prompt length without one (every decode timing of one of its
    # points unmeasurable: a busy CPU bunches tokens)
    rows = set(re.findall(r"\| MTP speed-up @ ([\d,]+)-token prompt \|", text))
    assert rows == {f"{n:,}" for n in paired}, (rows, paired)
    for p in ab_run["mtp_ab"]["points"]:
        if p["kind"] == "concurrency":
            assert f"| {p['concurrency']} | " in text[text.index("## MTP A/B"):]
    assert "| Draft acceptance |" in text
    assert "| MTP speed-up @ 1 concurrent |" in text  # the baseline comparison: a compared metric


def test_no_server_left_running(ab_run: dict[str, Any]) -> None:
    assert vllm_processes() == []
