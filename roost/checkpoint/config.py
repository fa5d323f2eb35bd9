"""The model config a checkpoint declares: the few numbers of ``config.json`` the audit and the KV plan need.

``load_config`` reads ``config.json`` (fields at top level or under ``text_config``, as multimodal
configs nest them) and, when ModelOpt ships one, ``hf_quant_config.json``. A missing or malformed
field is a :class:`~roost.errors.UserError` naming it (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from roost.checkpoint.files import CheckpointFiles, LocalFiles
from roost.errors import UserError

LayerType = Literal["full_attention", "linear_attention", "sliding_attention"]


class GdnDims(BaseModel):
    """Gated-delta-net (linear attention) dimensions, as vLLM's state-shape calculator reads them."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int


class ModelConfigInfo(BaseModel):
    """The fields of ``config.json`` that the audit and the KV plan rely on."""

    architecture: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    layer_types: list[LayerType]
    dtype: str = "bfloat16"
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    mtp_num_hidden_layers: int = 0
    mtp_style: Literal["none", "mtp_prefix", "extra_layers"] = "none"
    has_vision_config: bool = False
    vision_depth: int | None = None
    gdn: GdnDims | None = None
    mamba_ssm_dtype: str | None = None
    sliding_window: int | None = None
    quantization: dict[str, Any] | None = None

    @property
    def full_attention_layers(self) -> int:
        return sum(t == "full_attention" for t in self.layer_types)

    @property
    def linear_attention_layers(self) -> int:
        return sum(t == "linear_attention" for t in self.layer_types)


def _first(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def load_config(model_dir: Path) -> ModelConfigInfo:
    """Parse ``model_dir/config.json`` (and ``hf_quant_config.json`` when ModelOpt ships one)."""
    return config_of(LocalFiles(model_dir))


def config_of(files: CheckpointFiles) -> ModelConfigInfo:
    """Parse the checkpoint's ``config.json`` (and ``hf_quant_config.json`` when ModelOpt ships one)."""
    where = files.where("config.json")
    data = files.read_small("config.json")
    if data is None:
        raise UserError(f"{where}: not found; a Hugging Face checkpoint directory needs its config.json")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{where}: not valid JSON ({exc}); re-download config.json") from None
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a JSON object")
    extra_quant: dict[str, Any] | None = None
    quant = files.read_small("hf_quant_config.json")
    if quant is not None:
        try:
            q = json.loads(quant)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{files.where('hf_quant_config.json')}: not valid JSON ({exc})") from None
        if isinstance(q, dict):
            extra_quant = q.get("quantization", q) if isinstance(q.get("quantization", q), dict) else None
    return parse_config(raw, source=where, extra_quant=extra_quant)


def parse_config(raw: Mapping[str, Any], source: str = "config.json", extra_quant: dict[str, Any] | None = None) -> ModelConfigInfo:
    """Build a :class:`ModelConfigInfo` from a config dict; a missing field is a UserError naming it."""
    text = raw.get("text_config")
    text_cfg: Mapping[str, Any] = text if isinstance(text, dict) else {}

    def get(*keys: str) -> Any:
        v = _first(text_cfg, *keys)
        return v if v is not None else _first(raw, *keys)

    def need_int(*keys: str) -> int:
        v = get(*keys)
        if v is None:
            raise UserError(
                f"{source}: missing field {keys[0]!r} (looked at the top level and under text_config); "
                "the checkpoint's config.json is incomplete"
            )
        if type(v) is not int or v <= 0:
            raise UserError(f"{source}: field {keys[0]!r} must be a positive integer, got {v!r}")
        return v

    def opt_int(*keys: str) -> int:
        """An optional count: 0 when absent or null, a UserError naming the field when not a whole number >= 0."""
        v = get(*keys)
        if v is None or v is False:
            return 0
        if type(v) is not int or v < 0:
            raise UserError(f"{source}: field {keys[0]!r} must be a whole number >= 0, got {v!r}")
        return v

    archs = raw.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise UserError(f"{source}: missing field 'architectures' (a list naming the model class)")
    n_layers = need_int("num_hidden_layers", "n_layer", "num_layers")
    hidden = need_int("hidden_size", "n_embd", "d_model")
    heads = need_int("num_attention_heads", "n_head")
    kv_heads_v = get("num_key_value_heads")
    kv_heads = heads if kv_heads_v is None else need_int("num_key_value_heads")
    head_dim_v = get("head_dim")
    head_dim = hidden // heads if head_dim_v is None else need_int("head_dim")
    vocab = need_int("vocab_size")
    max_pos = need_int("max_position_embeddings", "n_positions", "max_seq_len")

    layer_types_raw = get("layer_types")
    interval = get("full_attention_interval")
    layer_types: list[LayerType]
    if layer_types_raw is not None:
        if not isinstance(layer_types_raw, list) or len(layer_types_raw) != n_layers:
            raise UserError(
                f"{source}: layer_types must list one entry per layer ({n_layers}), "
                f"got {len(layer_types_raw) if isinstance(layer_types_raw, list) else type(layer_types_raw).__name__}"
            )
        layer_types = []
        for i, t in enumerate(layer_types_raw):
            if t in ("full_attention", "attention"):
                layer_types.append("full_attention")
            elif t in ("linear_attention", "mamba", "gated_delta_net"):
                layer_types.append("linear_attention")
            elif t in ("sliding_attention", "sliding_window"):
                layer_types.append("sliding_attention")
            else:
                raise UserError(f"{source}: layer_types[{i}] = {t!r} is not a known layer type")
    elif interval is not None:
        if type(interval) is not int or interval <= 0:
            raise UserError(f"{source}: full_attention_interval must be a positive integer, got {interval!r}")
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    else:
        layer_types = ["full_attention"] * n_layers

    gdn: GdnDims | None = None
    if "linear_attention" in layer_types:
        gdn = GdnDims(
            num_k_heads=need_int("linear_num_key_heads"),
            num_v_heads=need_int("linear_num_value_heads"),
            head_k_dim=need_int("linear_key_head_dim"),
            head_v_dim=need_int("linear_value_head_dim"),
            conv_kernel=need_int("linear_conv_kernel_dim"),
        )

    num_experts = opt_int("num_experts", "num_local_experts", "n_routed_experts")
    top_k = opt_int("num_experts_per_tok", "moe_topk", "top_k")
    if num_experts and not top_k:
        raise UserError(f"{source}: MoE config (num_experts={num_experts}) lacks num_experts_per_tok")
    mtp_prefix = opt_int("mtp_num_hidden_layers")
    nextn = opt_int("num_nextn_predict_layers")
    if mtp_prefix:
        mtp_n, mtp_style = mtp_prefix, "mtp_prefix"
    elif nextn:
        mtp_n, mtp_style = nextn, "extra_layers"
    else:
        mtp_n, mtp_style = 0, "none"

    vision = raw.get("vision_config")
    vision_depth = None
    if isinstance(vision, dict):
        d = _first(vision, "depth", "num_hidden_layers")
        vision_depth = d if type(d) is int else None
    dtype = get("torch_dtype", "dtype") or "bfloat16"
    quant = raw.get("quantization_config") or text_cfg.get("quantization_config") or extra_quant
    tie = raw.get("tie_word_embeddings")
    if tie is None:
        tie = text_cfg.get("tie_word_embeddings", False)
    sliding = get("sliding_window") if "sliding_attention" in layer_types or get("use_sliding_window") else None
    return ModelConfigInfo(
        architecture=archs[0],
        model_type=str(raw.get("model_type") or text_cfg.get("model_type") or ""),
        num_hidden_layers=n_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        layer_types=layer_types,
        dtype=str(dtype),
        tie_word_embeddings=bool(tie),
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        mtp_num_hidden_layers=mtp_n,
        mtp_style=mtp_style,  # type: ignore[arg-type]
        has_vision_config=isinstance(vision, dict),
        vision_depth=vision_depth,
        gdn=gdn,
        mamba_ssm_dtype=get("mamba_ssm_dtype"),
        sliding_window=sliding if type(sliding) is int else None,
        quantization=quant if isinstance(quant, dict) else None,
    )


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "float8_e4m3fn": 1}


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name as configs spell it (bfloat16 -> 2)."""
    try:
        return DTYPE_BYTES[name.removeprefix("torch.")]
    except KeyError:
        raise UserError(f"unsupported dtype {name!r}: use bfloat16, float16 or float32") from None
