"""roost.checkpoint.model: one read of config, index and headers into the facts the checks and the plan use."""

from __future__ import annotations

import json
from pathlib import Path

from support import replicas

from roost.checkpoint.config import parse_config
from roost.checkpoint.model import decode_bytes_per_token, read_checkpoint


def test_index_and_shards_agree(ornith_9b_dir: Path) -> None:
    ck = read_checkpoint(ornith_9b_dir)
    assert ck.index is not None and len(ck.index) == 760
    assert (ck.missing_shards, ck.unindexed_shards, ck.duplicates, ck.index_absent, ck.index_extra) == ({}, [], [], [], [])
    assert ck.shards_on_disk == ck.shards_read


def test_index_disagreement_is_described(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "m")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    wm = idx["weight_map"]
    moved = "model.layers.0.self_attn.q_proj.weight"
    home = wm[moved]
    other = next(s for s in set(wm.values()) if s != home)
    wm[moved] = other
    del wm["model.norm.weight"]
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    ck = read_checkpoint(d)
    assert ck.index_absent == [f"{moved} -> {other}"]
    assert ck.index_extra == ["model.norm.weight in model-00002-of-00002.safetensors"]
    assert ck.tensors.count == 291 and ck.index_tensor_count == 290


def test_missing_shard_counts_its_indexed_tensors(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "m")
    (d / "model-00003-of-00004.safetensors").unlink()
    ck = read_checkpoint(d)
    assert ck.missing_shards == {"model-00003-of-00004.safetensors": 143}
    assert ck.shards_read == ["model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                              "model-00004-of-00004.safetensors"]
    assert ck.tensors.count == 760 - 143
    assert (ck.index_absent, ck.index_extra) == ([], [])  # absent with their shard: reported once, as MISSING_SHARD


def test_per_expert_names_fold_but_layers_stay(ornith_35b_dir: Path) -> None:
    t = read_checkpoint(ornith_35b_dir).tensors
    assert sorted(t.layer_classes) == list(range(40))
    assert t.layer_classes[3] == {"norm", "attention", "moe_router", "moe_experts", "moe_shared_experts"}
    assert t.layer_classes[0] == {"norm", "linear_attention", "moe_router", "moe_experts", "moe_shared_experts"}
    assert t.layer_name_dtypes["mlp.experts.E.gate_proj.weight"] == {"BF16"}
    assert t.layer_name_dtypes["linear_attn.A_log"] == {"F32"}
    assert t.per_expert and t.float_weight_bytes.keys() == {"BF16"}
    # every tensor but norms (2 per layer + the final one), A_log/dt_bias/norm of the 30 linear-attention
    # layers, q_norm/k_norm of the 10 full-attention ones, and the tower's 8 norms/biases per block + 5 more
    not_matmul = 40 * 2 + 1 + 30 * 3 + 10 * 2 + 27 * 8 + 5
    assert t.quant_modules == [] and t.quantization.unquantized_modules == 31_666 - not_matmul == 31_254


def test_quantized_modules_fold_like_the_names(nvfp4_dir: Path) -> None:
    mods = read_checkpoint(nvfp4_dir).tensors.quant_modules
    experts = [m for m in mods if ".mlp.experts." in m.name]
    assert len(experts) == 8 * 3 and {m.count for m in experts} == {32} and {m.kind for m in experts} == {"nvfp4"}
    one = next(m for m in experts if m.name == "model.language_model.layers.0.mlp.experts.31.gate_proj")
    assert (one.kind, one.count, {r: (e.dtype, e.shape) for r, e in one.roles.items()}) == (
        "nvfp4", 32, {"weight": ("U8", (512, 1024)), "weight_scale": ("F8_E4M3", (512, 128)),
                      "weight_scale_2": ("F32", ()), "input_scale": ("F32", ())})
    fp8 = [m for m in mods if m.kind == "fp8"]
    assert sorted(m.name.rsplit(".", 1)[1] for m in fp8) == sorted(["q_proj", "k_proj", "v_proj", "o_proj"] * 2)
    assert {m.count for m in fp8} == {1}


def test_names_with_a_newline_fold_one_by_one(tmp_path: Path) -> None:
    """Folding joins names with newlines; a name that contains one still folds correctly."""
    tensors = [(f"model.layers.0.mlp.experts.{e}.w{chr(10) if e == 1 else ''}x.weight", "BF16", (2, 2)) for e in range(3)]
    tensors += [("model.layers.0.self_attn.q_proj.weight", "BF16", (2, 2)), ("model.embed_tokens.weight", "BF16", (4, 2)),
                ("lm_head.weight", "BF16", (4, 2))]
    cfg = {"architectures": ["X"], "hidden_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 4,
           "max_position_embeddings": 16, "num_experts": 3, "num_experts_per_tok": 1}
    t = read_checkpoint(replicas.write_replica(replicas.ReplicaSpec("nl", cfg, tensors), tmp_path / "nl")).tensors
    assert t.count == 6 and t.per_expert
    assert set(t.layer_name_dtypes) == {"mlp.experts.E.wx.weight", "self_attn.q_proj.weight"}  # experts 0 and 2 folded
    assert (t.count_by_class["moe_experts"], t.count_by_class["other"]) == (2, 1)  # no layer pattern spans a newline


def test_decode_bytes_per_token() -> None:
    dense = parse_config({"architectures": ["X"], "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
                          "vocab_size": 4, "max_position_embeddings": 16})
    by_class = {"embedding": 100, "lm_head": 100, "attention": 10, "mlp": 20, "vision": 1000, "mtp": 500}
    assert decode_bytes_per_token(by_class, dense, lm_head_present=True) == 130  # no tower, no draft, no embedding gather
    tied = dense.model_copy(update={"tie_word_embeddings": True})
    assert decode_bytes_per_token({"embedding": 100, "mlp": 20}, tied, lm_head_present=False) == 120
    moe = dense.model_copy(update={"num_experts": 256, "num_experts_per_tok": 8})
    assert decode_bytes_per_token({"moe_experts": 2560, "moe_router": 5, "moe_shared_experts": 7}, moe, lm_head_present=True) == 80 + 12
