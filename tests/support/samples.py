"""Hand-built RunRecords with figures from the Ornith 1.0 9B recipe (BF16 on a DGX Spark).

The recipe's single-stream decode: 12.65 / 12.61 / 12.50 / 12.00 / 10.34 / 8.86 tok/s at 0.5K / 2K /
8K / 32K / 131K / 250K prompt tokens, TTFT 0.14 s -> 109 s, a roofline ceiling of 17.2 tok/s
(273 GB/s over 15.87 GB per token), KV 390,070 tokens / 1.49x on a 12 GiB pool, cold load 108 s.
The concurrency sweep follows the Ornith 1.5 recipe's shape (the peak at the --max-num-seqs cap of
20, a drop past it).

- ``spark_record`` / ``failed_record`` / ``history``: the report tests' full records (six prompt
  lengths, six concurrency levels, audit and plan documents).
- ``spark_run`` / ``failed_run`` / ``earlier_runs``: the task tests' shorter records, one per day.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from roost.bench.validity import KIND_TEXT
from roost.records import BenchPoint, Distribution, RunMeta, RunRecord, ServeObservation, StageTiming

PROMPTS = [  # prompt tokens, decode tok/s median, TTFT s median
    (511, 12.65, 0.14),
    (2042, 12.61, 0.46),
    (8206, 12.50, 1.85),
    (32778, 12.00, 7.6),
    (131290, 10.34, 38.2),
    (250223, 8.86, 109.0),
]
CONCURRENCY = [(1, 12.6), (4, 48.1), (8, 88.0), (16, 141.5), (20, 150.2), (24, 131.0)]

COMMIT = "4f1c2a9e8b7d6c5b4a39281706f5e4d3c2b1a098"
ARGS = ["--max-model-len", "262144", "--kv-cache-memory-bytes", "12884901888", "--max-num-seqs", "20"]


def dist(median: float | None, count: int = 3, **stats: float) -> Distribution:
    """A Distribution with its median and any other statistics given (``p90=...``, ``min=...``)."""
    return Distribution(count=count if median is not None else 0, median=median, **stats)


def prompt_point(tokens: int, decode: float, ttft: float, *, output_tokens: int = 256, requests: int = 3,
                 spread: tuple[float, float] = (0.985, 1.01), ttft_scale: float = 1.0) -> BenchPoint:
    """A single-stream prompt-length point: decode ``decode`` tok/s (min/max ``spread``), TTFT ``ttft`` s."""
    t = ttft * ttft_scale
    return BenchPoint(
        kind="prompt_length", prompt_tokens=tokens, output_tokens=output_tokens, concurrency=1, requests=requests,
        ttft_s=dist(t, requests, p90=t * 1.04, min=t * 0.97, max=t * 1.05),
        tpot_s=dist(1 / decode, requests),
        itl_s=dist(1 / decode, requests * (output_tokens - 1)),
        decode_tok_s=dist(decode, requests, min=decode * spread[0], max=decode * spread[1]),
        output_tok_s=dist(output_tokens / (t + (output_tokens - 1) / decode), requests),
    )


def concurrency_point(concurrency: int, aggregate: float, *, prompt_tokens: int = 2042, output_tokens: int = 512,
                      ttft_scale: float = 1.0) -> BenchPoint:
    """A concurrency point: ``aggregate`` output tok/s over ``concurrency`` users, two requests each."""
    return BenchPoint(
        kind="concurrency", prompt_tokens=prompt_tokens, output_tokens=output_tokens, concurrency=concurrency,
        requests=2 * concurrency,
        ttft_s=dist(0.46 * ttft_scale * (1 + concurrency / 8), 2 * concurrency,
                    p99=0.46 * ttft_scale * (1 + concurrency / 4)),
        decode_tok_s=dist(aggregate / concurrency, 2 * concurrency),
        output_tok_s=dist(aggregate),
        request_rate=dist(aggregate / output_tokens),
    )


def _meta(run_id: str, started_at: dt.datetime, **extra: Any) -> RunMeta:
    fields: dict[str, Any] = {
        "run_id": run_id, "started_at": started_at, "roost_version": "0.1.0", "profile": "ornith-9b",
        "repo_id": "deepreinforce/Ornith-1.0-9B", "revision": "main", "commit": COMMIT,
        "served_model_name": "ornith-9b", "host": "spark", "backend": "docker",
        "image": "roost/vllm:26.07-xgrammar",
        "image_digest": "sha256:9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b",
        "vllm_version": "0.24.0", "vllm_args": list(ARGS),
        "prefect_flow_run_id": "6c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
    }
    return RunMeta(**(fields | extra))


def spark_record(
    run_id: str = "20260301T020000Z-0000aaaa",
    started_at: dt.datetime = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC),
    scale: float = 1.0,
    ttft_scale: float = 1.0,
) -> RunRecord:
    """A completed run; ``scale`` multiplies every rate, ``ttft_scale`` every TTFT."""
    points = [prompt_point(p, d * scale, t, ttft_scale=ttft_scale) for p, d, t in PROMPTS]
    points += [concurrency_point(c, agg * scale, ttft_scale=ttft_scale) for c, agg in CONCURRENCY]
    return RunRecord(
        meta=_meta(run_id, started_at),
        stages=[
            StageTiming(stage="download", seconds=0.6, cached=True, note="17.5 GiB already in the Hub cache"),
            StageTiming(stage="audit", seconds=1.4),
            StageTiming(stage="build", seconds=2.1, cached=True),
            StageTiming(stage="serve", seconds=161.3),
            StageTiming(stage="health-wait", seconds=0.9),
            StageTiming(stage="benchmark", seconds=1834.0),
        ],
        audit={
            "findings": [
                {"code": "MTP_ADVERTISED_NOT_SHIPPED", "severity": "warning",
                 "message": "config sets mtp_num_hidden_layers: 1 but no mtp.* tensor is in the index; do not "
                            "enable MTP speculative decoding."},
                {"code": "VISION_TOWER_PRESENT", "severity": "info",
                 "message": "333 visual.* tensors (0.85 GiB): serve without --language-model-only."},
            ],
            "decode_bytes_per_token": 15_870_000_000,
            "decode_ceiling_tok_s": 17.2,
            "tensor_count": 760,
        },
        plan={"kv_cache_memory_bytes": 12884901888, "max_model_len": 262144, "kv_cache_tokens": 390070,
              "max_concurrency": 1.49, "fits_host": True},
        serve=ServeObservation(
            predicted_kv_cache_tokens=390070, predicted_max_concurrency=1.49,
            logged_kv_cache_tokens=390070, logged_max_concurrency=1.49, logged_block_size=528,
            start_to_healthy_s=161.3, load_s=108.0, compile_s=44.1, ready_s=8.7, health_detect_delay_s=0.4,
            attempts=[{"attempt": 1, "ok": True, "seconds": 161.3}],
        ),
        points=points,
        decode_ceiling_tok_s=17.2,
    )


def failed_record(run_id: str = "20260302T020000Z-0000bbbb") -> RunRecord:
    """A run that died while vLLM was starting: no benchmark points at all."""
    rec = spark_record(run_id=run_id, started_at=dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.UTC))
    return rec.model_copy(
        update={
            "status": "failed",
            "failed_stage": "serve",
            "failure_class": "kv_pool_too_small",
            "failure_message": "To serve at least one request with the model's max seq len (262144), 8.02 GiB KV "
                               "cache is needed, which is larger than the available KV cache memory (4.0 GiB).",
            "remediation": "Raise --kv-cache-memory-bytes to 12884901888 (12 GiB); do not lower --max-model-len.",
            "points": [],
            "stages": [
                StageTiming(stage="download", seconds=0.5, cached=True),
                StageTiming(stage="audit", seconds=1.3),
                StageTiming(stage="build", seconds=2.0, cached=True),
                StageTiming(stage="serve", seconds=74.2, status="failed", note="engine exited with code 1"),
            ],
            "serve": ServeObservation(predicted_kv_cache_tokens=128000, load_s=71.0),
        }
    )


def history(n: int = 5) -> list[RunRecord]:
    """``n`` earlier comparable runs, a day apart, with a little noise."""
    noise = [1.0, 0.99, 1.01, 0.995, 1.005, 0.998, 1.002]
    return [
        spark_record(
            run_id=f"202602{20 + i:02d}T020000Z-0000{i:04d}",
            started_at=dt.datetime(2026, 2, 20 + i, 2, 0, tzinfo=dt.UTC),
            scale=noise[i % len(noise)],
            ttft_scale=2 - noise[i % len(noise)],
        )
        for i in range(n)
    ]


# --- the task tests' shorter runs, one per day of March 2026 -----------------------------------------

TASK_PROMPTS = PROMPTS[:4]
TASK_CONCURRENCY = [(1, 12.6), (4, 48.1), (16, 141.5), (20, 150.2), (24, 131.0)]


def spark_run(day: int = 1, scale: float = 1.0, run_id: str | None = None, flow_run_id: str = "") -> RunRecord:
    """A completed run on day ``day``; ``scale`` multiplies every rate."""
    points = [prompt_point(p, d * scale, t, spread=(0.99, 1.01)) for p, d, t in TASK_PROMPTS]
    points += [concurrency_point(c, a * scale) for c, a in TASK_CONCURRENCY]
    return RunRecord(
        meta=_meta(run_id or f"202603{day:02d}T020000Z-0000{day:04d}", dt.datetime(2026, 3, day, 2, 0, tzinfo=dt.UTC),
                   image="", image_digest="sha256:9a8b7c6d5e4f", prefect_flow_run_id=flow_run_id),
        points=points, decode_ceiling_tok_s=17.2,
        stages=[StageTiming(stage="download", seconds=0.6, cached=True), StageTiming(stage="audit", seconds=1.4),
                StageTiming(stage="serve", seconds=161.3), StageTiming(stage="benchmark", seconds=1834.0)],
        audit={"findings": [{"code": "VISION_TOWER_PRESENT", "severity": "info",
                             "message": "333 visual.* tensors (0.85 GiB): serve without --language-model-only."}]},
        serve=ServeObservation(predicted_kv_cache_tokens=390070, predicted_max_concurrency=1.49,
                               logged_kv_cache_tokens=390070, logged_max_concurrency=1.49, start_to_healthy_s=161.3,
                               load_s=108.0, compile_s=44.1, ready_s=8.7),
    )


def failed_run(day: int = 9) -> RunRecord:
    """A run on day ``day`` that failed at serve with a KV pool too small."""
    return spark_run(day).model_copy(update={
        "status": "failed", "failed_stage": "serve", "failure_class": "kv_pool_too_small", "points": [],
        "failure_message": "8.02 GiB KV cache is needed, which is larger than the available KV cache memory (4.0 GiB).",
        "remediation": "Raise --kv-cache-memory-bytes to 12884901888 (12 GiB); do not lower --max-model-len.",
        "serve": ServeObservation(load_s=71.0),
    })


def earlier_runs(n: int = 4) -> list[RunRecord]:
    """``n`` completed runs on days 1..n with a little noise."""
    noise = [1.0, 0.99, 1.01, 0.995, 1.005]
    return [spark_run(day=1 + i, scale=noise[i % 5]) for i in range(n)]


def check_decode_records(point: dict[str, Any]) -> None:
    """The exact record of a point's decode timings, which holds whatever the machine's load: its decode
    and TPOT distributions hold exactly its measurable requests (``requests - errors - unmeasurable``),
    every unmeasurable request is counted in ``unmeasurable_reasons`` by its reason (e.g. a stream a
    CPU-starved server flushed in a burst), and the distribution is sane when it holds any request.

    It does not claim any decode was timed: on a loaded machine every request of a point can come in a
    burst, and a landing cannot be run again. A test that claims decode timing uses
    :func:`check_decode_measured` on a run it can repeat."""
    d, tpot = point["decode_tok_s"], point["tpot_s"]
    measured = point["requests"] - point["errors"] - point["unmeasurable"]
    assert d["count"] == tpot["count"] == measured >= 0, point
    reasons = point["unmeasurable_reasons"]
    counted = re.findall(rf"(\d+) ({'|'.join(map(re.escape, KIND_TEXT.values()))})(?:, |$)", reasons)
    assert ", ".join(f"{n} {why}" for n, why in counted) == reasons, point  # nothing but counted reasons
    assert sum(int(n) for n, _ in counted) == point["unmeasurable"], point
    if measured:
        assert 0 < d["min"] <= d["median"] <= d["max"] and math.isfinite(d["max"]), point
        assert 0 < tpot["min"] <= tpot["median"] <= tpot["max"] and math.isfinite(tpot["max"]), point
    else:
        assert d["median"] is None and tpot["median"] is None, point


def check_decode_measured(point: dict[str, Any]) -> None:
    """A point whose decode was timed: :func:`check_decode_records`, and every completed request of it has
    a decode timing (none unmeasurable). For runs a test can repeat until it holds (a loaded machine makes
    bursts), never for a single landing."""
    check_decode_records(point)
    assert point["unmeasurable"] == 0 and point["decode_tok_s"]["count"] == point["requests"] - point["errors"] > 0, point
