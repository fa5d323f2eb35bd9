"""What a checkpoint's tensors are: the class of every tensor name and how a module is quantized.

``classify`` puts each tensor name into one class (embedding, lm_head, full/linear attention, MLP,
MoE router/routed/shared experts, norms, vision tower, MTP) with its language-layer index; the last
name component is its role (weight, bias, a quantization scale in ``SCALE_ROLES``). ``quant_kind``
tells NVFP4 (ModelOpt: packed U8 weight + F8_E4M3 ``weight_scale`` + F32 ``weight_scale_2`` +
``input_scale``), FP8 and unquantized modules apart from the on-disk dtypes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, get_args

from roost.checkpoint.safetensors_header import FP8_DTYPES, TensorEntry

TensorClass = Literal[
    "embedding",
    "lm_head",
    "final_norm",
    "norm",
    "attention",
    "linear_attention",
    "mlp",
    "moe_router",
    "moe_experts",
    "moe_shared_experts",
    "vision",
    "mtp",
    "other",
]
TENSOR_CLASSES: tuple[TensorClass, ...] = get_args(TensorClass)
QuantKind = Literal["nvfp4", "fp8", "none"]

# Suffixes that are quantization parameters of the module named by the rest of the tensor name.
SCALE_ROLES = frozenset(
    {
        "weight_scale",
        "weight_scale_2",
        "input_scale",
        "weight_scale_inv",
        "input_scale_inv",
        "k_scale",
        "v_scale",
        "weight_global_scale",
        "input_global_scale",
        "weight_zero_point",
    }
)

_VISION_PREFIXES = (
    "model.visual.",
    "visual.",
    "model.vision_tower.",
    "vision_tower.",
    "model.vision_model.",
    "vision_model.",
    "model.multi_modal_projector.",
    "multi_modal_projector.",
    "model.vision_encoder.",
    "vision_encoder.",
    "model.mm_projector.",
    "mm_projector.",
)
_LAYER_RE = re.compile(r"(?:^|\.)layers\.([0-9]{1,18})\.(.+)$")


def classify(name: str, mtp_layer_start: int | None = None) -> tuple[TensorClass, int | None]:
    """The class of tensor ``name`` and its language-layer index (None outside the layer stack).

    ``mtp_layer_start``: for DeepSeek-style checkpoints the MTP blocks are extra ``layers.N`` entries
    with ``N >= num_hidden_layers``; pass ``num_hidden_layers`` when the config declares such layers.
    """
    if name.startswith(_VISION_PREFIXES):
        return "vision", None
    if name.startswith(("mtp.", "model.mtp.")) or ".mtp." in name:
        return "mtp", None
    m = _LAYER_RE.search(name)
    if m is None:
        if "embed_tokens" in name or name.endswith(("wte.weight", "tok_embeddings.weight")):
            return "embedding", None
        if name.startswith(("lm_head.", "output.")):
            return "lm_head", None
        if "norm" in name:
            return "final_norm", None
        return "other", None
    layer = int(m.group(1))
    if mtp_layer_start is not None and layer >= mtp_layer_start:
        return "mtp", layer
    rest = m.group(2)
    if rest.startswith(("self_attn.", "attention.", "attn.")):
        return "attention", layer
    if rest.startswith(("linear_attn.", "mamba.", "mixer.")):
        return "linear_attention", layer
    if rest.startswith(("mlp.", "block_sparse_moe.", "feed_forward.")):
        sub = rest.split(".", 1)[1] if "." in rest else ""
        if sub.startswith(("gate.", "router.")) or sub in ("gate", "router"):
            return "moe_router", layer
        if sub.startswith(("shared_expert.", "shared_experts.", "shared_expert_gate.")):
            return "moe_shared_experts", layer
        if sub.startswith("experts."):
            return "moe_experts", layer
        return "mlp", layer
    if "norm" in rest:
        return "norm", layer
    return "other", layer


def quant_kind(roles: Mapping[str, TensorEntry]) -> QuantKind:
    """How one module (its tensors keyed by role) is stored on disk."""
    weight = roles.get("weight")
    if weight is None:
        return "none"
    if weight.dtype == "U8" and ("weight_scale" in roles or "weight_scale_2" in roles):
        return "nvfp4"
    if weight.dtype in ("U8", "F4") and roles.get("weight_scale") is not None:
        return "nvfp4"
    if weight.dtype in FP8_DTYPES:
        return "fp8"
    return "none"


def nvfp4_problems(module: str, roles: Mapping[str, TensorEntry], group_size: int = 16) -> list[str]:
    """What is wrong with one NVFP4 module's tensors (empty when it is complete and consistent)."""
    problems: list[str] = []
    weight = roles["weight"]
    for role in ("weight_scale", "weight_scale_2"):
        if role not in roles:
            problems.append(f"{module}: packed U8 weight without {role}")
    scale = roles.get("weight_scale")
    if scale is not None:
        if scale.dtype != "F8_E4M3":
            problems.append(f"{module}.weight_scale is {scale.dtype}, NVFP4 block scales are F8_E4M3")
        if len(weight.shape) >= 1 and len(scale.shape) == len(weight.shape):
            in_features = weight.shape[-1] * 2
            if scale.shape[-1] * group_size != in_features or scale.shape[:-1] != weight.shape[:-1]:
                problems.append(
                    f"{module}.weight_scale shape {list(scale.shape)} does not match packed weight "
                    f"{list(weight.shape)} at group size {group_size}"
                )
    for role in ("weight_scale_2", "input_scale"):
        t = roles.get(role)
        if t is not None and t.dtype != "F32":
            problems.append(f"{module}.{role} is {t.dtype}, expected F32")
    return problems


def expected_vision_tensors(model_type: str, depth: int | None) -> int | None:
    """Tensors a complete Qwen3.5/Qwen3-VL-style vision tower ships (12 per block + 9), when known."""
    if depth is None or not model_type.startswith(("qwen3_5", "qwen3_vl")):
        return None
    return 12 * depth + 9
