"""Hand-built RunRecords for the task tests: Ornith 1.0 9B BF16 on a Spark, figures from seed 001
(12.61 tok/s at a 2,042-token prompt = 73% of the 17.2 tok/s ceiling, 390,070 KV tokens, 1.49x)."""

from __future__ import annotations

import datetime as dt

from roost.records import BenchPoint, RunMeta, RunRecord, ServeObservation, StageTiming

PROMPTS = [(511, 12.65, 0.14), (2042, 12.61, 0.46), (8206, 12.50, 1.85), (32778, 12.00, 7.6)]
CONCURRENCY = [(1, 12.6), (4, 48.1), (16, 141.5), (20, 150.2), (24, 131.0)]


def spark_run(day: int = 1, scale: float = 1.0, run_id: str | None = None, flow_run_id: str = "") -> RunRecord:
    meta = RunMeta(
        run_id=run_id or f"202603{day:02d}T020000Z-0000{day:04d}",
        started_at=dt.datetime(2026, 3, day, 2, 0, tzinfo=dt.UTC),
        roost_version="0.1.0", profile="ornith-9b", repo_id="deepreinforce/Ornith-1.0-9B", revision="main",
        commit="4f1c2a9e8b7d6c5b4a39281706f5e4d3c2b1a098", served_model_name="ornith-9b", host="spark",
        backend="docker", image_digest="sha256:9a8b7c6d5e4f", vllm_version="0.24.0",
        vllm_args=["--max-model-len", "262144", "--kv-cache-memory-bytes", "12884901888", "--max-num-seqs", "20"],
        prefect_flow_run_id=flow_run_id,
    )
    points = [BenchPoint(kind="prompt_length", prompt_tokens=p, output_tokens=256, concurrency=1, requests=3,
                         decode_tok_s_median=d * scale, decode_tok_s_min=d * scale * 0.99,
                         decode_tok_s_max=d * scale * 1.01, ttft_s_median=t, ttft_s_p90=t * 1.04)
              for p, d, t in PROMPTS]
    points += [BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=c, requests=2 * c,
                          output_tok_s=a * scale, decode_tok_s_median=a * scale / c, ttft_s_median=0.46 * (1 + c / 8))
               for c, a in CONCURRENCY]
    return RunRecord(
        meta=meta, points=points, decode_ceiling_tok_s=17.2,
        stages=[StageTiming(stage="download", seconds=0.6, cached=True), StageTiming(stage="audit", seconds=1.4),
                StageTiming(stage="serve", seconds=161.3), StageTiming(stage="benchmark", seconds=1834.0)],
        audit={"findings": [{"code": "VISION_TOWER_PRESENT", "severity": "info",
                             "message": "333 visual.* tensors (0.85 GiB): serve without --language-model-only."}]},
        serve=ServeObservation(predicted_kv_cache_tokens=390070, predicted_max_concurrency=1.49,
                               logged_kv_cache_tokens=390070, logged_max_concurrency=1.49, start_to_healthy_s=161.3,
                               load_s=108.0, compile_s=44.1, ready_s=8.7),
    )


def failed_run(day: int = 9) -> RunRecord:
    return spark_run(day).model_copy(update={
        "status": "failed", "failed_stage": "serve", "failure_class": "KVCacheTooSmall", "points": [],
        "failure_message": "8.02 GiB KV cache is needed, which is larger than the available KV cache memory (4.0 GiB).",
        "remediation": "Raise --kv-cache-memory-bytes to 12884901888 (12 GiB); do not lower --max-model-len.",
        "serve": ServeObservation(load_s=71.0),
    })


def earlier_runs(n: int = 4) -> list[RunRecord]:
    noise = [1.0, 0.99, 1.01, 0.995, 1.005]
    return [spark_run(day=1 + i, scale=noise[i % 5]) for i in range(n)]
