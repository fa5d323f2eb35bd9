"""Hand-built RunRecords for the report tests, with figures from the seeds (Ornith 1.0 9B BF16 on a Spark).

Seed 001: decode 12.65 / 12.61 / 12.50 / 12.00 / 10.34 / 8.86 tok/s at 0.5K / 2K / 8K / 32K / 131K / 250K
prompt tokens, TTFT 0.14 s -> 109 s, ceiling 17.2 tok/s at 273 GB/s, KV 390,070 tokens / 1.49x on a
12 GiB pool, cold load 108 s. The concurrency sweep follows seed 002's shape (peak at the
--max-num-seqs cap, drop past it).
"""

from __future__ import annotations

import datetime as dt

from roost.records import BenchPoint, RunMeta, RunRecord, ServeObservation, StageTiming

PROMPTS = [  # prompt tokens, decode tok/s median, TTFT s median
    (511, 12.65, 0.14),
    (2042, 12.61, 0.46),
    (8206, 12.50, 1.85),
    (32778, 12.00, 7.6),
    (131290, 10.34, 38.2),
    (250223, 8.86, 109.0),
]
CONCURRENCY = [(1, 12.6), (4, 48.1), (8, 88.0), (16, 141.5), (20, 150.2), (24, 131.0)]


def spark_record(
    run_id: str = "20260301T020000Z-0000aaaa",
    started_at: dt.datetime = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC),
    scale: float = 1.0,
    ttft_scale: float = 1.0,
) -> RunRecord:
    """A completed run; ``scale`` multiplies every rate, ``ttft_scale`` every TTFT."""
    meta = RunMeta(
        run_id=run_id,
        started_at=started_at,
        roost_version="0.1.0",
        profile="ornith-9b",
        repo_id="deepreinforce/Ornith-1.0-9B",
        revision="main",
        commit="4f1c2a9e8b7d6c5b4a39281706f5e4d3c2b1a098",
        served_model_name="ornith-9b",
        host="spark",
        backend="docker",
        image="roost/vllm:26.07-xgrammar",
        image_digest="sha256:9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b",
        vllm_version="0.24.0",
        vllm_args=["--max-model-len", "262144", "--kv-cache-memory-bytes", "12884901888", "--max-num-seqs", "20"],
        prefect_flow_run_id="6c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
    )
    points = [
        BenchPoint(
            kind="prompt_length",
            prompt_tokens=p,
            output_tokens=256,
            concurrency=1,
            requests=3,
            ttft_s_median=t * ttft_scale,
            ttft_s_p90=t * ttft_scale * 1.04,
            ttft_s_min=t * ttft_scale * 0.97,
            ttft_s_max=t * ttft_scale * 1.05,
            tpot_s_median=1 / (d * scale),
            itl_s_median=1 / (d * scale),
            decode_tok_s_median=d * scale,
            decode_tok_s_min=d * scale * 0.985,
            decode_tok_s_max=d * scale * 1.01,
            output_tok_s=256 / (t * ttft_scale + 255 / (d * scale)),
        )
        for p, d, t in PROMPTS
    ]
    points += [
        BenchPoint(
            kind="concurrency",
            prompt_tokens=2042,
            output_tokens=512,
            concurrency=c,
            requests=2 * c,
            ttft_s_median=0.46 * ttft_scale * (1 + c / 8),
            ttft_s_p99=0.46 * ttft_scale * (1 + c / 4),
            decode_tok_s_median=agg * scale / c,
            output_tok_s=agg * scale,
            request_rate=agg * scale / 512,
        )
        for c, agg in CONCURRENCY
    ]
    return RunRecord(
        meta=meta,
        stages=[
            StageTiming(stage="download", seconds=0.6, cached=True, note="17.5 GiB already in the Hub cache"),
            StageTiming(stage="audit", seconds=1.4),
            StageTiming(stage="build", seconds=2.1, cached=True),
            StageTiming(stage="serve", seconds=161.3),
            StageTiming(stage="health", seconds=0.9),
            StageTiming(stage="benchmark", seconds=1834.0),
        ],
        audit={
            "findings": [
                {"code": "MTP_ADVERTISED_NOT_SHIPPED", "severity": "warning",
                 "message": "config sets mtp_num_hidden_layers: 1 but no mtp.* tensor is in the index; do not enable MTP speculative decoding."},
                {"code": "VISION_TOWER_PRESENT", "severity": "info",
                 "message": "333 visual.* tensors (0.85 GiB): serve without --language-model-only."},
            ],
            "decode_bytes_gb": 15.87,
            "decode_ceiling_tok_s": 17.2,
            "tensors": 760,
        },
        plan={"kv_cache_memory_bytes": 12884901888, "max_model_len": 262144, "kv_cache_tokens": 390070,
              "max_concurrency": 1.49, "fits_host": True},
        serve=ServeObservation(
            predicted_kv_cache_tokens=390070,
            predicted_max_concurrency=1.49,
            logged_kv_cache_tokens=390070,
            logged_max_concurrency=1.49,
            logged_block_size=528,
            start_to_healthy_s=161.3,
            load_s=108.0,
            compile_s=44.1,
            ready_s=8.7,
            health_detect_delay_s=0.4,
            attempts=[{"attempt": 1, "outcome": "healthy"}],
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
            "failure_class": "KVCacheTooSmall",
            "failure_message": "To serve at least one request with the model's max seq len (262144), 8.02 GiB KV cache is needed, which is larger than the available KV cache memory (4.0 GiB).",
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
