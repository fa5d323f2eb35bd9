"""Header-exact replicas of real checkpoints, for tests and benchmarks (test-only: not shipped).

A replica has the real tensor names, shapes and dtypes, a real ``config.json`` and
``model.safetensors.index.json``, and shards whose headers are byte-for-byte what an export would
write (written by :mod:`roost.checkpoint.writer`, the one safetensors writer). The data section is a
sparse file (``truncate``), so a 70 GB checkpoint costs a few MB of disk; with ``fill="random"`` it
is real random data instead (small models that vLLM can serve).

Builders (each returns a :class:`ReplicaSpec`; ``write_replica`` puts it on disk):

- ``ornith_9b``: Ornith 1.0 9B = Qwen3.5 dense (32 layers, 24 gated-delta + 8 full attention),
  27-block vision tower (333 tensors), config advertising MTP but no ``mtp.*`` tensors. 760 tensors.
- ``ornith_35b_a3b``: Ornith 1.0 35B-A3B = Qwen3.5 MoE, 256 per-expert experts top-8, vision tower,
  no MTP: 31,666 tensors in 14 shards.
- ``llama_dense``: Llama-3.1-8B-shaped dense model (291 tensors).
- ``qwen3_moe``: Qwen3-30B-A3B-shaped MoE (128 experts top-8, 18,867 tensors).
- ``nvfp4_moe_mtp``: a ModelOpt mixed-precision Qwen3.5 MoE (Ornith 1.5 NVFP4-like): NVFP4 routed and
  shared experts (packed U8 weight + F8_E4M3 weight_scale + F32 weight_scale_2 + input_scale), FP8
  full attention with FP8 KV scales, BF16 gated-delta layers, vision tower and a BF16 MTP layer.
- ``tiny_qwen3`` / ``tiny_qwen3_next``: small servable models (dense / hybrid gated-delta MoE) for
  checking the KV planner against a real vLLM CPU server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from roost.checkpoint.safetensors_header import tensor_nbytes
from roost.checkpoint.writer import TensorData, TensorSpec, to_bf16_bytes, write_shards

Fill = Literal["sparse", "random"]


@dataclass
class ReplicaSpec:
    """A checkpoint's shape: its tensors in export order, its config, how many shards."""

    name: str
    config: dict[str, Any]
    tensors: list[TensorSpec]
    num_shards: int = 1


# ----------------------------------------------------------------------------------------------------
# writing


def _split(tensors: list[TensorSpec], num_shards: int) -> list[list[TensorSpec]]:
    """Contiguous runs of roughly equal bytes, like save_pretrained's max_shard_size splitting."""
    if num_shards <= 1:
        return [tensors]
    total = sum(tensor_nbytes(d, s) for _, d, s in tensors)
    target = total / num_shards
    shards: list[list[TensorSpec]] = [[]]
    acc = 0
    for t in tensors:
        n = tensor_nbytes(t[1], t[2])
        if shards[-1] and acc + n / 2 > target * len(shards) and len(shards) < num_shards:
            shards.append([])
        shards[-1].append(t)
        acc += n
    while len(shards) < num_shards:  # degenerate tiny models: split the longest shard
        longest = max(range(len(shards)), key=lambda i: len(shards[i]))
        s = shards[longest]
        if len(s) < 2:
            break
        shards[longest : longest + 1] = [s[: len(s) // 2], s[len(s) // 2 :]]
    return shards


def _random_fill(seed: int) -> TensorData:
    """Plausible random weights, drawn in tensor order: norms ~1, A_log/dt_bias/biases small, matrices N(0, 0.02)."""
    rng = np.random.default_rng(seed)

    def data(name: str, dtype: str, shape: tuple[int, ...]) -> bytes:
        n = 1
        for d in shape:
            n *= d
        if name.endswith("norm.weight"):
            values = np.ones(n, dtype=np.float32) + rng.normal(0, 0.01, n).astype(np.float32)
        elif name.endswith(("A_log", "dt_bias")) or name.endswith(".bias"):
            values = rng.normal(0, 0.1, n).astype(np.float32)
        else:
            values = rng.normal(0, 0.02, n).astype(np.float32)
        if dtype == "BF16":
            return to_bf16_bytes(values)
        if dtype == "F32":
            return values.tobytes()
        if dtype == "F16":
            return values.astype(np.float16).tobytes()
        if dtype in ("U8", "F8_E4M3", "F8_E5M2", "I8"):
            return rng.integers(0, 0x70, n, dtype=np.uint8).tobytes()
        raise ValueError(f"{name}: no random fill for {dtype}")

    return data


def write_replica(spec: ReplicaSpec, out_dir: Path, *, fill: Fill = "sparse", seed: int = 0) -> Path:
    """Write ``spec`` under ``out_dir`` (created): shards, the index (when sharded) and config.json."""
    write_shards(out_dir, _split(spec.tensors, spec.num_shards), _random_fill(seed) if fill == "random" else None)
    (out_dir / "config.json").write_text(json.dumps(spec.config, indent=2))
    return out_dir


def sparse_disk_bytes(path: Path) -> int:
    """Bytes actually allocated on disk under ``path`` (a sparse replica's real footprint)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


# ----------------------------------------------------------------------------------------------------
# Qwen3.5 family (Ornith 1.0 / 1.5)


def _qwen35_text_config(
    *,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    intermediate: int | None = None,
    experts: int = 0,
    top_k: int = 0,
    moe_intermediate: int = 0,
    shared_intermediate: int = 0,
    lin_k_heads: int = 16,
    lin_v_heads: int = 32,
    lin_k_dim: int = 128,
    lin_v_dim: int = 128,
    conv: int = 4,
    interval: int = 4,
    mtp_layers: int = 1,
    max_pos: int = 262144,
) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model_type": "qwen3_5_moe_text" if experts else "qwen3_5_text",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "full_attention_interval": interval,
        "layer_types": ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)],
        "linear_num_key_heads": lin_k_heads,
        "linear_num_value_heads": lin_v_heads,
        "linear_key_head_dim": lin_k_dim,
        "linear_value_head_dim": lin_v_dim,
        "linear_conv_kernel_dim": conv,
        "attn_output_gate": True,
        "mtp_num_hidden_layers": mtp_layers,
        "mamba_ssm_dtype": "float32",
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    if experts:
        cfg |= {
            "num_experts": experts,
            "num_experts_per_tok": top_k,
            "moe_intermediate_size": moe_intermediate,
            "shared_expert_intermediate_size": shared_intermediate,
            "norm_topk_prob": True,
        }
    else:
        cfg["intermediate_size"] = intermediate
    return cfg


def _vision_config(depth: int, out_hidden: int) -> dict[str, Any]:
    return {
        "model_type": "qwen3_5_vision",
        "depth": depth,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "in_channels": 3,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": out_hidden,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [],
    }


def _vision_tensors(depth: int, out_hidden: int, vh: int = 1152, vi: int = 4304) -> list[TensorSpec]:
    p = "model.visual."
    t: list[TensorSpec] = [
        (p + "patch_embed.proj.weight", "BF16", (vh, 3, 2, 16, 16)),
        (p + "patch_embed.proj.bias", "BF16", (vh,)),
        (p + "pos_embed.weight", "BF16", (2304, vh)),
    ]
    for b in range(depth):
        q = f"{p}blocks.{b}."
        t += [
            (q + "norm1.weight", "BF16", (vh,)),
            (q + "norm1.bias", "BF16", (vh,)),
            (q + "norm2.weight", "BF16", (vh,)),
            (q + "norm2.bias", "BF16", (vh,)),
            (q + "attn.qkv.weight", "BF16", (3 * vh, vh)),
            (q + "attn.qkv.bias", "BF16", (3 * vh,)),
            (q + "attn.proj.weight", "BF16", (vh, vh)),
            (q + "attn.proj.bias", "BF16", (vh,)),
            (q + "mlp.linear_fc1.weight", "BF16", (vi, vh)),
            (q + "mlp.linear_fc1.bias", "BF16", (vi,)),
            (q + "mlp.linear_fc2.weight", "BF16", (vh, vi)),
            (q + "mlp.linear_fc2.bias", "BF16", (vh,)),
        ]
    m = p + "merger."
    t += [
        (m + "norm.weight", "BF16", (vh,)),
        (m + "norm.bias", "BF16", (vh,)),
        (m + "linear_fc1.weight", "BF16", (4 * vh, 4 * vh)),
        (m + "linear_fc1.bias", "BF16", (4 * vh,)),
        (m + "linear_fc2.weight", "BF16", (out_hidden, 4 * vh)),
        (m + "linear_fc2.bias", "BF16", (out_hidden,)),
    ]
    return t


Quant = Literal["bf16", "nvfp4", "fp8"]


def _linear(name: str, out_f: int, in_f: int, quant: Quant = "bf16", kv_scale: str | None = None) -> list[TensorSpec]:
    """A linear layer's weight, with ModelOpt's scale tensors when quantized."""
    if quant == "nvfp4":
        return [
            (name + ".weight", "U8", (out_f, in_f // 2)),
            (name + ".weight_scale", "F8_E4M3", (out_f, in_f // 16)),
            (name + ".weight_scale_2", "F32", ()),
            (name + ".input_scale", "F32", ()),
        ]
    if quant == "fp8":
        t: list[TensorSpec] = [
            (name + ".weight", "F8_E4M3", (out_f, in_f)),
            (name + ".weight_scale", "F32", ()),
            (name + ".input_scale", "F32", ()),
        ]
        if kv_scale:
            t.append((f"{name}.{kv_scale}", "F32", ()))
        return t
    return [(name + ".weight", "BF16", (out_f, in_f))]


def _qwen35_attention(p: str, H: int, heads: int, kv: int, D: int, quant: Quant = "bf16") -> list[TensorSpec]:
    a = p + "self_attn."
    return [
        *_linear(a + "q_proj", 2 * heads * D, H, quant),
        *_linear(a + "k_proj", kv * D, H, quant, "k_scale" if quant == "fp8" else None),
        *_linear(a + "v_proj", kv * D, H, quant, "v_scale" if quant == "fp8" else None),
        *_linear(a + "o_proj", H, heads * D, quant),
        (a + "q_norm.weight", "BF16", (D,)),
        (a + "k_norm.weight", "BF16", (D,)),
    ]


def _qwen35_linear_attention(p: str, H: int, hk: int, hv: int, dk: int, dv: int, K: int) -> list[TensorSpec]:
    a = p + "linear_attn."
    kw, vw = hk * dk, hv * dv
    cw = 2 * kw + vw
    return [
        (a + "in_proj_qkv.weight", "BF16", (cw, H)),
        (a + "in_proj_z.weight", "BF16", (vw, H)),
        (a + "in_proj_b.weight", "BF16", (hv, H)),
        (a + "in_proj_a.weight", "BF16", (hv, H)),
        (a + "conv1d.weight", "BF16", (cw, 1, K)),
        (a + "A_log", "F32", (hv,)),
        (a + "dt_bias", "BF16", (hv,)),
        (a + "norm.weight", "F32", (dv,)),
        (a + "out_proj.weight", "BF16", (H, vw)),
    ]


def _moe(p: str, H: int, experts: int, mi: int, si: int, quant: Quant = "bf16", fused: bool = False) -> list[TensorSpec]:
    m = p + "mlp."
    t: list[TensorSpec] = [(m + "gate.weight", "BF16", (experts, H))]
    if fused:
        t += [(m + "experts.gate_up_proj", "BF16", (experts, 2 * mi, H)), (m + "experts.down_proj", "BF16", (experts, H, mi))]
    else:
        for e in range(experts):
            x = f"{m}experts.{e}."
            t += [*_linear(x + "gate_proj", mi, H, quant), *_linear(x + "up_proj", mi, H, quant), *_linear(x + "down_proj", H, mi, quant)]
    s = m + "shared_expert."
    t += [*_linear(s + "gate_proj", si, H, quant), *_linear(s + "up_proj", si, H, quant), *_linear(s + "down_proj", H, si, quant)]
    t.append((m + "shared_expert_gate.weight", "BF16", (1, H)))
    return t


def _dense_mlp(p: str, H: int, inter: int, quant: Quant = "bf16") -> list[TensorSpec]:
    m = p + "mlp."
    return [*_linear(m + "gate_proj", inter, H, quant), *_linear(m + "up_proj", inter, H, quant), *_linear(m + "down_proj", H, inter, quant)]


def _qwen35_text_tensors(
    tc: dict[str, Any],
    prefix: str,
    *,
    expert_quant: Quant = "bf16",
    attn_quant: Quant = "bf16",
    fused_experts: bool = False,
    with_mtp: bool = False,
) -> list[TensorSpec]:
    H, V = tc["hidden_size"], tc["vocab_size"]
    heads, kv, D = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    hk, hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv, K = tc["linear_key_head_dim"], tc["linear_value_head_dim"], tc["linear_conv_kernel_dim"]
    E = tc.get("num_experts", 0)
    t: list[TensorSpec] = [(prefix + "embed_tokens.weight", "BF16", (V, H))]

    def mlp(p: str, quant: Quant) -> list[TensorSpec]:
        if E:
            return _moe(p, H, E, tc["moe_intermediate_size"], tc["shared_expert_intermediate_size"], quant, fused_experts)
        return _dense_mlp(p, H, tc["intermediate_size"], quant)

    for i, kind in enumerate(tc["layer_types"]):
        p = f"{prefix}layers.{i}."
        t += [(p + "input_layernorm.weight", "BF16", (H,)), (p + "post_attention_layernorm.weight", "BF16", (H,))]
        if kind == "full_attention":
            t += _qwen35_attention(p, H, heads, kv, D, attn_quant)
        else:
            t += _qwen35_linear_attention(p, H, hk, hv, dk, dv, K)
        t += mlp(p, expert_quant)
    t.append((prefix + "norm.weight", "BF16", (H,)))
    t.append(("lm_head.weight", "BF16", (V, H)))
    if with_mtp:
        t += [
            ("mtp.fc.weight", "BF16", (H, 2 * H)),
            ("mtp.norm.weight", "BF16", (H,)),
            ("mtp.pre_fc_norm_embedding.weight", "BF16", (H,)),
            ("mtp.pre_fc_norm_hidden.weight", "BF16", (H,)),
        ]
        p = "mtp.layers.0."
        t += [(p + "input_layernorm.weight", "BF16", (H,)), (p + "post_attention_layernorm.weight", "BF16", (H,))]
        t += _qwen35_attention(p, H, heads, kv, D)
        t += mlp(p, "bf16") if not E else _moe(p, H, E, tc["moe_intermediate_size"], tc["shared_expert_intermediate_size"])
    return t


def _qwen35_config(arch: str, model_type: str, tc: dict[str, Any], vision_depth: int) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": model_type,
        "text_config": tc,
        "vision_config": _vision_config(vision_depth, tc["hidden_size"]),
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "transformers_version": "5.19.0",
    }


def ornith_9b(*, num_shards: int = 4, vision: bool = True, mtp: bool = False) -> ReplicaSpec:
    """Ornith 1.0 9B (Qwen3.5 dense): 427 text + 333 visual = 760 tensors, MTP advertised but not shipped."""
    tc = _qwen35_text_config(hidden=4096, layers=32, heads=16, kv_heads=4, head_dim=256, vocab=248320, intermediate=12288)
    tensors = _qwen35_text_tensors(tc, "model.language_model.", with_mtp=mtp)
    if vision:
        tensors += _vision_tensors(27, 4096)
    cfg = _qwen35_config("Qwen3_5ForConditionalGeneration", "qwen3_5", tc, 27)
    return ReplicaSpec("ornith-1.0-9b", cfg, tensors, num_shards)


def ornith_35b_a3b(*, num_shards: int = 14, vision: bool = True, fused_experts: bool = False) -> ReplicaSpec:
    """Ornith 1.0 35B-A3B (Qwen3.5 MoE, per-expert): 31,333 text + 333 visual = 31,666 tensors."""
    tc = _qwen35_text_config(
        hidden=2048, layers=40, heads=16, kv_heads=2, head_dim=256, vocab=248320,
        experts=256, top_k=8, moe_intermediate=512, shared_intermediate=512,
    )
    tensors = _qwen35_text_tensors(tc, "model.language_model.", fused_experts=fused_experts)
    if vision:
        tensors += _vision_tensors(27, 2048)
    cfg = _qwen35_config("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", tc, 27)
    return ReplicaSpec("ornith-1.0-35b-a3b", cfg, tensors, num_shards)


def nvfp4_moe_mtp(*, layers: int = 40, experts: int = 256, num_shards: int = 5) -> ReplicaSpec:
    """ModelOpt MIXED_PRECISION Qwen3.5 MoE with MTP (Ornith 1.5 NVFP4-like).

    NVFP4 routed + shared experts, FP8 full attention + FP8 KV scales, BF16 gated-delta layers,
    BF16 vision tower and MTP layer. ``layers``/``experts`` shrink it for fast tests.
    """
    tc = _qwen35_text_config(
        hidden=2048, layers=layers, heads=16, kv_heads=2, head_dim=256, vocab=248320,
        experts=experts, top_k=8, moe_intermediate=512, shared_intermediate=512,
    )
    quant = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "producer": {"name": "modelopt", "version": "0.39.0"},
        "exclude_modules": ["lm_head", "model.visual*", "mtp*", "*linear_attn*", "*mlp.gate", "*shared_expert_gate"],
    }
    tc["quantization_config"] = quant
    tensors = _qwen35_text_tensors(tc, "model.language_model.", expert_quant="nvfp4", attn_quant="fp8", with_mtp=True)
    tensors += _vision_tensors(27, 2048)
    cfg = _qwen35_config("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", tc, 27)
    cfg["quantization_config"] = quant
    return ReplicaSpec("ornith-1.5-35b-a3b-nvfp4", cfg, tensors, num_shards)


# ----------------------------------------------------------------------------------------------------
# other families


def _llama_like_tensors(
    *, layers: int, H: int, heads: int, kv: int, D: int, inter: int, V: int, qk_norm: bool = False,
    experts: int = 0, moe_inter: int = 0, tie: bool = False,
) -> list[TensorSpec]:
    t: list[TensorSpec] = [("model.embed_tokens.weight", "BF16", (V, H))]
    for i in range(layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        t += [
            (p + "input_layernorm.weight", "BF16", (H,)),
            (a + "q_proj.weight", "BF16", (heads * D, H)),
            (a + "k_proj.weight", "BF16", (kv * D, H)),
            (a + "v_proj.weight", "BF16", (kv * D, H)),
            (a + "o_proj.weight", "BF16", (H, heads * D)),
        ]
        if qk_norm:
            t += [(a + "q_norm.weight", "BF16", (D,)), (a + "k_norm.weight", "BF16", (D,))]
        if experts:
            t.append((p + "mlp.gate.weight", "BF16", (experts, H)))
            for e in range(experts):
                x = f"{p}mlp.experts.{e}."
                t += [(x + "gate_proj.weight", "BF16", (moe_inter, H)), (x + "up_proj.weight", "BF16", (moe_inter, H)),
                      (x + "down_proj.weight", "BF16", (H, moe_inter))]
        else:
            t += _dense_mlp(p, H, inter)
        t.append((p + "post_attention_layernorm.weight", "BF16", (H,)))
    t.append(("model.norm.weight", "BF16", (H,)))
    if not tie:
        t.append(("lm_head.weight", "BF16", (V, H)))
    return t


def llama_dense(*, num_shards: int = 4) -> ReplicaSpec:
    """Llama-3.1-8B-shaped dense model: 32 layers, GQA 32/8, 291 tensors."""
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    t = _llama_like_tensors(layers=32, H=4096, heads=32, kv=8, D=128, inter=14336, V=128256)
    return ReplicaSpec("llama-3.1-8b", cfg, t, num_shards)


def qwen3_moe(*, num_shards: int = 16) -> ReplicaSpec:
    """Qwen3-30B-A3B-shaped MoE: 48 layers, 128 experts top-8, 18,867 tensors."""
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    t = _llama_like_tensors(layers=48, H=2048, heads=32, kv=4, D=128, inter=0, V=151936, qk_norm=True, experts=128, moe_inter=768)
    return ReplicaSpec("qwen3-30b-a3b", cfg, t, num_shards)


def tiny_qwen3(*, layers: int = 4, hidden: int = 128, kv_heads: int = 2, head_dim: int = 64, vocab: int = 512,
               max_pos: int = 4096, num_shards: int = 2) -> ReplicaSpec:
    """A small servable Qwen3 dense model (tied embeddings), for the vLLM CPU checks."""
    heads = 4
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    t = _llama_like_tensors(layers=layers, H=hidden, heads=heads, kv=kv_heads, D=head_dim, inter=2 * hidden, V=vocab,
                            qk_norm=True, tie=True)
    return ReplicaSpec("tiny-qwen3", cfg, t, num_shards)


def tiny_qwen3_next(*, layers: int = 4, hidden: int = 128, kv_heads: int = 2, head_dim: int = 64, vocab: int = 512,
                    lin_k_heads: int = 2, lin_v_heads: int = 4, lin_k_dim: int = 64, lin_v_dim: int = 64,
                    experts: int = 4, interval: int = 4, max_pos: int = 4096, num_shards: int = 2) -> ReplicaSpec:
    """A small servable Qwen3-Next hybrid (gated-delta + full attention, MoE), untied embeddings (vLLM ignores tying)."""
    heads = 4
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "full_attention_interval": interval,
        "layer_types": ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)],
        "linear_num_key_heads": lin_k_heads,
        "linear_num_value_heads": lin_v_heads,
        "linear_key_head_dim": lin_k_dim,
        "linear_value_head_dim": lin_v_dim,
        "linear_conv_kernel_dim": 4,
        "num_experts": experts,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": hidden // 2,
        "shared_expert_intermediate_size": hidden // 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    H, mi = hidden, hidden // 2
    t: list[TensorSpec] = [("model.embed_tokens.weight", "BF16", (vocab, H))]
    kw, vw = lin_k_heads * lin_k_dim, lin_v_heads * lin_v_dim
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", "BF16", (H,)), (p + "post_attention_layernorm.weight", "BF16", (H,))]
        if kind == "full_attention":
            t += _qwen35_attention(p, H, heads, kv_heads, head_dim)
        else:
            a = p + "linear_attn."
            t += [
                (a + "in_proj_qkvz.weight", "BF16", (2 * kw + 2 * vw, H)),
                (a + "in_proj_ba.weight", "BF16", (2 * lin_v_heads, H)),
                (a + "conv1d.weight", "BF16", (2 * kw + vw, 1, 4)),
                (a + "A_log", "BF16", (lin_v_heads,)),
                (a + "dt_bias", "BF16", (lin_v_heads,)),
                (a + "norm.weight", "BF16", (lin_v_dim,)),
                (a + "out_proj.weight", "BF16", (H, vw)),
            ]
        t += _moe(p, H, experts, mi, mi)
    t += [("model.norm.weight", "BF16", (H,)), ("lm_head.weight", "BF16", (vocab, H))]
    return ReplicaSpec("tiny-qwen3-next", cfg, t, num_shards)

