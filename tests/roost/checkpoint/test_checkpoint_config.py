"""roost.checkpoint.config: the config fields the audit and the plan read, and a clear error for each bad one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roost.checkpoint.config import dtype_bytes, load_config, parse_config
from roost.errors import UserError

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
    assert cfg.num_experts == 0 and cfg.gdn is None


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


def test_dtype_bytes() -> None:
    assert dtype_bytes("bfloat16") == 2 and dtype_bytes("torch.float32") == 4 and dtype_bytes("fp8") == 1
    with pytest.raises(UserError, match="unsupported dtype 'int3'"):
        dtype_bytes("int3")


def test_load_config_reads_hf_quant_config(tmp_path: Path) -> None:
    """ModelOpt may ship its quantization in hf_quant_config.json instead of config.json."""
    raw = {"architectures": ["X"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 10, "max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert load_config(tmp_path).quantization is None
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}))
    assert load_config(tmp_path).quantization == {"quant_algo": "NVFP4", "group_size": 16}
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(UserError, match=r"config\.json: must be a JSON object"):
        load_config(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(UserError, match=r"config\.json: not found"):
        load_config(tmp_path)
