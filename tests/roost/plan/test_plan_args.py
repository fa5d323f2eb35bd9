"""roost.plan.args: which vLLM flags a checkpoint needs (the Ornith 1.0 9B recipe's config)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from roost.checkpoint.config import ModelConfigInfo, parse_config
from roost.errors import UserError
from roost.plan.args import derive_vllm_args, kv_cache_dtype_for, parse_overrides
from roost.plan.kv import SPARK_RULES
from roost.units import GiB

TEXT: dict[str, Any] = {
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 4,
    "head_dim": 256, "vocab_size": 248320, "max_position_embeddings": 262144, "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1, "mamba_ssm_dtype": "float32",
}


# A 9B pool block holds a 528-token page for each of 8 layers (4 KV heads x 256 x 2 bytes x K and V);
# one 262,144-token request needs 497 of them plus 3 mamba blocks.
BLOCK = 8 * 528 * 2 * 4 * 256 * 2
TWO_FULL_REQUESTS = 2 * 500 * BLOCK


def cfg(vision: bool = True, quant: dict[str, Any] | None = None) -> ModelConfigInfo:
    raw: dict[str, Any] = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": TEXT}
    if vision:
        raw["vision_config"] = {"depth": 27}
    if quant:
        raw["quantization_config"] = quant
    return parse_config(raw)


def flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            out[a] = nxt
    return out


def test_ornith_9b_recipe_args() -> None:
    a = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="ornith9b")
    f = flags(a.to_argv())
    assert f["--served-model-name"] == "ornith9b" and f["--max-model-len"] == "262144"
    assert "--language-model-only" not in f and "--speculative-config" not in f and "--kv-cache-dtype" not in f
    # the smallest pool for one full-length request: just over 8 GiB ("8.xx GiB" in the recipe's error)
    assert a.kv_cache_memory_bytes == 500 * BLOCK == 8_650_752_000


def test_language_model_only_only_without_tower() -> None:
    a = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=0, mtp_tensor_count=0, served_model_name="x")
    assert a.language_model_only and "--language-model-only" in a.to_argv()
    b = derive_vllm_args(cfg(vision=False), SPARK_RULES, visual_tensor_count=0, mtp_tensor_count=0, served_model_name="x")
    assert not b.language_model_only


def test_speculative_config_only_with_mtp_tensors() -> None:
    a = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=15, served_model_name="x")
    argv = a.to_argv()
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 1}
    # the draft's attention layer and the widened conv state need a larger pool
    plain = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="x")
    assert a.kv_cache_memory_bytes > plain.kv_cache_memory_bytes


def test_fp8_kv_cache_when_calibrated() -> None:
    c = cfg(quant={"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8"})
    assert kv_cache_dtype_for(c) == "fp8"
    a = derive_vllm_args(c, SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="x")
    assert flags(a.to_argv())["--kv-cache-dtype"] == "fp8"
    assert kv_cache_dtype_for(cfg()) == "auto"


def test_target_concurrency_and_explicit_pool() -> None:
    one = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="x")
    two = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="x",
                           target_concurrency=2.0)
    assert (one.kv_cache_memory_bytes, two.kv_cache_memory_bytes) == (8_650_752_000, TWO_FULL_REQUESTS)
    pinned = derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="x",
                              kv_cache_memory_bytes=12 * GiB)
    assert pinned.kv_cache_memory_bytes == 12 * GiB
    with pytest.raises(UserError, match=r"cannot hold one 262,144-token request; vLLM needs at least"):
        derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=333, mtp_tensor_count=0, served_model_name="x",
                         kv_cache_memory_bytes=4 * GiB)


def test_window_and_name_checks() -> None:
    with pytest.raises(UserError, match="exceeds the model's native window"):
        derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=0, mtp_tensor_count=0, served_model_name="x",
                         max_model_len=300_000)
    with pytest.raises(UserError, match="must not be empty"):
        derive_vllm_args(cfg(), SPARK_RULES, visual_tensor_count=0, mtp_tensor_count=0, served_model_name=" ")


def test_parse_overrides() -> None:
    ov = parse_overrides(["--dtype", "bfloat16", "--max-model-len=4096", "--kv-cache-memory-bytes", "1_000",
                          "--no-enable-prefix-caching", "--max-num-seqs", "8", "--block-size", "64"])
    assert (ov.dtype, ov.max_model_len, ov.kv_cache_memory_bytes, ov.enable_prefix_caching, ov.block_size) == (
        "bfloat16", 4096, 1000, False, 64)
    assert parse_overrides(["--enable-prefix-caching"]).enable_prefix_caching is True
    with pytest.raises(UserError, match="has no value"):
        parse_overrides(["--max-model-len"])
    with pytest.raises(UserError, match="not a whole number"):
        parse_overrides(["--max-model-len", "big"])
    # vLLM's parser reads `_` as `-` and one argument holding a space as flag and value: so does the plan
    assert parse_overrides(["--max_model_len=2048"]).max_model_len == 2048
    assert parse_overrides(["--kv-cache-memory-bytes 4096"]).kv_cache_memory_bytes == 4096
    for bad in (["--max-model-len=0"], ["--kv-cache-memory-bytes=-1"], ["--max-num-seqs", "1e3"],
                ["--block-size", "9" * 30], ["--max-model-len", str(2**53 + 1)]):
        with pytest.raises(UserError, match="from 1 to 2\\*\\*53"):
            parse_overrides(bad)


def test_parse_overrides_reads_the_argv_as_vllm_does() -> None:
    # roost.vllm.argv.VllmArgv: an abbreviation vLLM expands, the --no- form, a flag left without its value
    assert parse_overrides(["--max-m", "4096"]).max_model_len == 4096
    assert parse_overrides(["--enforce-eager", "--no-enforce-eager"]).enforce_eager is False
    with pytest.raises(UserError, match="--dtype has no value"):
        parse_overrides(["--dtype", "--max-model-len", "5"])  # argparse: "expected one argument"
