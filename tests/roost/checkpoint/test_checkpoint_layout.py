"""roost.checkpoint.layout: tensor classes and quantization kinds."""

from __future__ import annotations

import pytest

from roost.checkpoint.layout import (
    TENSOR_CLASSES,
    classify,
    expected_vision_tensors,
    nvfp4_problems,
    quant_kind,
)
from roost.checkpoint.safetensors_header import TensorEntry


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


def test_classes_are_listed_once() -> None:
    assert TENSOR_CLASSES == ("embedding", "lm_head", "final_norm", "norm", "attention", "linear_attention", "mlp",
                              "moe_router", "moe_experts", "moe_shared_experts", "vision", "mtp", "other")


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


def test_vision_expectation() -> None:
    assert expected_vision_tensors("qwen3_5", 27) == 333
    assert expected_vision_tensors("qwen3_vl_moe", 2) == 33
    assert expected_vision_tensors("qwen3_5", None) is None
    assert expected_vision_tensors("llama", 27) is None
