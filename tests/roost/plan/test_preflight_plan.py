"""roost.plan.preflight: the plan for a checkpoint directory, as ``roost plan --json`` reports it."""

from __future__ import annotations

from pathlib import Path

from roost.hosts import CPU, SPARK
from roost.plan.kv import GiB
from roost.plan.preflight import plan_checkpoint


def test_9b_plan_at_12_gib(plan_9b_dir: Path) -> None:
    p = plan_checkpoint(plan_9b_dir, SPARK, 12884901888)
    assert (p.kv_cache_tokens, f"{p.max_concurrency:.2f}", p.block_size) == (390_070, "1.49", 528)
    assert p.fits_one_request and p.fits_host and f"{p.decode_ceiling_tok_s:.1f}" == "17.2"
    assert p.vllm_args[p.vllm_args.index("--kv-cache-memory-bytes") + 1] == "12884901888"
    assert 8 * GiB < p.min_kv_cache_bytes < 9 * GiB


def test_35b_plan_at_8_and_4_gib(plan_35b_dir: Path) -> None:
    p8 = plan_checkpoint(plan_35b_dir, SPARK, 8 * GiB)
    assert (p8.kv_cache_tokens, f"{p8.max_concurrency:.2f}", p8.block_size) == (412_980, "1.58", 1056)
    p4 = plan_checkpoint(plan_35b_dir, SPARK, 4 * GiB)
    assert not p4.fits_one_request and f"{p4.min_kv_cache_bytes / GiB:.2f}".startswith("5.")
    assert any("GiB KV cache is needed" in line for line in p4.predicted_log_lines)


def test_default_pool_is_smallest_for_target(plan_35b_dir: Path) -> None:
    p = plan_checkpoint(plan_35b_dir, SPARK, None, target_concurrency=1.5)
    assert p.max_concurrency >= 1.5
    smaller = plan_checkpoint(plan_35b_dir, SPARK, p.kv_cache_memory_bytes - p.kv.bytes_per_block)
    assert smaller.max_concurrency < 1.5


def test_overrides_win(plan_9b_dir: Path) -> None:
    """A profile's vLLM overrides are appended last; the plan follows them."""
    p = plan_checkpoint(plan_9b_dir, SPARK, 12 * GiB, vllm_overrides=["--max-model-len", "131072", "--no-enable-prefix-caching"])
    assert p.max_model_len == 131072
    q = plan_checkpoint(plan_9b_dir, SPARK, 12 * GiB, vllm_overrides=["--kv-cache-memory-bytes", str(16 * GiB)])
    assert q.kv_cache_memory_bytes == 16 * GiB
    r = plan_checkpoint(plan_9b_dir, SPARK, 12 * GiB, vllm_overrides=["--kv-cache-dtype", "fp8"])
    assert r.kv_bytes_per_token == 16 * 1024


def test_cpu_env_pool(plan_9b_dir: Path) -> None:
    """On the CPU backend VLLM_CPU_KVCACHE_SPACE replaces the flag; the plan reports the pool vLLM will use."""
    p = plan_checkpoint(plan_9b_dir, CPU, 12 * GiB, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert p.kv_cache_memory_bytes == GiB and not p.fits_one_request
    assert p.rules == "vllm-cpu-0.32" and "(1.0 GiB)" not in p.predicted_log_lines[-1]  # null block kept back
    q = plan_checkpoint(plan_9b_dir, CPU, 12 * GiB, max_model_len=16384, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert q.fits_one_request and q.predicted_log_lines[-2].startswith("CPU KV cache size: ")
    assert not p.fits_host  # 17.5 GiB of weights on an 8 GiB budget
