"""roost.checkpoint.layout: tensor classes, config parsing, quantization kinds."""

from __future__ import annotations

from typing import Any

import pytest

from roost.checkpoint.layout import (
    canonical_name,
    classify,
    dtype_bytes,
    expected_vision_tensors,
    nvfp4_problems,
    parse_config,
    quant_kind,
    split_role,
)
from roost.checkpoint.safetensors_header import TensorEntry
from roost.errors import UserError


@pytest.mark.parametrize(
    ("name", "cls", "layer"),
    [
        ("model.language_model.embed_tokens.weight", "embedding", None),
        ("model.embed_tokens.weight", "embedding", None),
        ("lm_head.weight", "lm_head", None),
        ("model.language_model.norm.weight", "final_norm", None),
        ("model.language_model.layers.3.self_attn.q_proj.weight", "attention", 3),
        ("model.language_model.layers.3.self_attn.k_proj.k_scale", "attention", 3),
        ("model.language_model.layers.0.linear_attn.in_proj_qkv.weight", "linear_attention", 0),
        ("model.language_model.layers.0.linear_attn.A_log", "linear_attention", 0),
        ("model.layers.12.mlp.gate_proj.weight", "mlp", 12),
        ("model.layers.12.mlp.gate.weight", "moe_router", 12),
        ("model.layers.12.mlp.experts.7.up_proj.weight", "moe_experts", 12),
        ("model.layers.12.mlp.experts.7.up_proj.weight_scale_2", "moe_experts", 12),
        ("model.layers.12.mlp.experts.gate_up_proj", "moe_experts", 12),
        ("model.layers.12.mlp.shared_expert.down_proj.weight", "moe_shared_experts", 12),
        ("model.layers.12.mlp.shared_expert_gate.weight", "moe_shared_experts", 12),
        ("model.layers.1.block_sparse_moe.gate.weight", "moe_router", 1),
        ("model.layers.1.input_layernorm.weight", "norm", 1),
        ("model.layers.1.post_attention_layernorm.weight", "norm", 1),
        ("model.visual.blocks.26.attn.qkv.weight", "vision", None),
        ("model.visual.merger.linear_fc2.bias", "vision", None),
        ("visual.patch_embed.proj.weight", "vision", None),
        ("mtp.fc.weight", "mtp", None),
        ("mtp.layers.0.mlp.experts.3.down_proj.weight", "mtp", None),
        ("model.layers.0.something_else.weight", "other", 0),
    ],
)
def test_classify(name: str, cls: str, layer: int | None) -> None:
    assert classify(name) == (cls, layer)


def test_extra_layers_are_mtp_when_declared() -> None:
    """DeepSeek-style MTP: layers.N for N >= num_hidden_layers are the draft."""
    assert classify("model.layers.61.eh_proj.weight", mtp_layer_start=61) == ("mtp", 61)
    assert classify("model.layers.60.self_attn.q_proj.weight", mtp_layer_start=61) == ("attention", 60)


def test_split_role_and_canonical_name() -> None:
    assert split_role("a.b.weight_scale_2") == ("a.b", "weight_scale_2")
    assert canonical_name("model.layers.12.mlp.experts.7.up_proj.weight") == "model.layers.N.mlp.experts.E.up_proj.weight"
    assert canonical_name("layers.0.attn.wq.weight") == "layers.N.attn.wq.weight"


def _e(dtype: str, *shape: int) -> TensorEntry:
    return TensorEntry(dtype, shape, 0, 0)


def test_quant_kinds() -> None:
    nvfp4 = {"weight": _e("U8", 512, 1024), "weight_scale": _e("F8_E4M3", 512, 128), "weight_scale_2": _e("F32"), "input_scale": _e("F32")}
    assert quant_kind(nvfp4) == "nvfp4"
    assert nvfp4_problems("m", nvfp4) == []
    assert quant_kind({"weight": _e("F8_E4M3", 8, 8), "weight_scale": _e("F32")}) == "fp8"
    assert quant_kind({"weight": _e("BF16", 8, 8)}) == "none"
    assert quant_kind({"weight_scale": _e("F32")}) == "none"


def test_nvfp4_problems_name_what_is_wrong() -> None:
    missing = {"weight": _e("U8", 512, 1024), "weight_scale": _e("F8_E4M3", 512, 128)}
    assert nvfp4_problems("m", missing) == ["m: packed U8 weight without weight_scale_2"]
    bad_shape = {"weight": _e("U8", 512, 1024), "weight_scale": _e("F8_E4M3", 512, 64), "weight_scale_2": _e("F32")}
    assert "does not match packed weight" in nvfp4_problems("m", bad_shape)[0]
    bad_dtype = {"weight": _e("U8", 4, 8), "weight_scale": _e("BF16", 4, 1), "weight_scale_2": _e("F32")}
    assert nvfp4_problems("m", bad_dtype) == ["m.weight_scale is BF16, NVFP4 block scales are F8_E4M3"]


QWEN35_TEXT: dict[str, Any] = {
    "hidden_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
    "head_dim": 256, "vocab_size": 1000, "max_position_embeddings": 262144, "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1, "mamba_ssm_dtype": "float32",
}


def test_parse_nested_text_config() -> None:
    cfg = parse_config({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                        "text_config": QWEN35_TEXT, "vision_config": {"depth": 27}})
    assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]
    assert (cfg.full_attention_layers, cfg.linear_attention_layers) == (2, 6)
    assert cfg.gdn is not None and cfg.gdn.num_v_heads == 32
    assert cfg.has_vision_config and cfg.vision_depth == 27
    assert cfg.mtp_num_hidden_layers == 1 and cfg.mtp_style == "mtp_prefix"
    assert cfg.mamba_ssm_dtype == "float32"


def test_parse_flat_dense_config_defaults() -> None:
    cfg = parse_config({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "vocab_size": 10, "max_position_embeddings": 128})
    assert cfg.num_key_value_heads == 4 and cfg.head_dim == 16
    assert cfg.layer_types == ["full_attention", "full_attention"]
    assert not cfg.is_moe and cfg.gdn is None


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"num_hidden_layers": None}, r"missing field 'num_hidden_layers'"),
        ({"vocab_size": None}, r"missing field 'vocab_size'"),
        ({"hidden_size": "big"}, r"'hidden_size' must be a positive integer"),
        ({"layer_types": ["full_attention"]}, r"layer_types must list one entry per layer \(8\)"),
        ({"layer_types": ["weird"] * 8}, r"layer_types\[0\] = 'weird'"),
        ({"linear_num_key_heads": None}, r"missing field 'linear_num_key_heads'"),
        ({"mtp_num_hidden_layers": "one"}, r"'mtp_num_hidden_layers' must be a whole number >= 0, got 'one'"),
        ({"num_experts": [1, 2]}, r"'num_experts' must be a whole number >= 0, got \[1, 2\]"),
        ({"num_experts_per_tok": -1}, r"'num_experts_per_tok' must be a whole number >= 0, got -1"),
    ],
)
def test_config_errors_name_the_field(patch: dict[str, Any], match: str) -> None:
    text = {k: v for k, v in (QWEN35_TEXT | patch).items() if v is not None}
    with pytest.raises(UserError, match=match):
        parse_config({"architectures": ["X"], "text_config": text}, source="cfg.json")


def test_config_without_architectures() -> None:
    with pytest.raises(UserError, match="missing field 'architectures'"):
        parse_config({"text_config": QWEN35_TEXT})


def test_moe_without_top_k() -> None:
    with pytest.raises(UserError, match="lacks num_experts_per_tok"):
        parse_config({"architectures": ["X"], "num_experts": 8} | {k: v for k, v in QWEN35_TEXT.items() if "linear" not in k and k != "full_attention_interval"})


def test_dtype_bytes_and_vision_expectation() -> None:
    assert dtype_bytes("bfloat16") == 2 and dtype_bytes("torch.float32") == 4 and dtype_bytes("fp8") == 1
    with pytest.raises(UserError):
        dtype_bytes("int3")
    assert expected_vision_tensors("qwen3_5", 27) == 333
    assert expected_vision_tensors("llama", 27) is None
