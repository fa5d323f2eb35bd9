"""roost.checkpoint.audit: the recipes' figures from headers alone, and every finding the recipes describe.

The Ornith 1.0 9B recipe publishes 760 tensors (333 visual, 0 mtp), 15.87 GB read per decode token and
the per-class sizes; the Ornith 1.0 35B recipe's checkpoint has 31,666 tensors in 14 shards. What
depends on a host (vLLM arguments, fit, ceiling) is tested with roost.plan.report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import replicas

from roost.checkpoint.audit import CheckpointAudit, audit_checkpoint
from roost.checkpoint.checks import CHECKS, check_mtp
from roost.checkpoint.safetensors_header import tensor_nbytes
from roost.errors import UserError
from roost.records import Finding


def codes(audit: CheckpointAudit) -> dict[str, str]:
    return {f.code: f.severity for f in audit.findings}


def test_ornith_9b_matches_the_recipe(ornith_9b_dir: Path) -> None:
    a = audit_checkpoint(ornith_9b_dir)
    ck = a.checkpoint
    assert (ck.tensors.count, ck.index_tensor_count, ck.visual_tensor_count, ck.mtp_tensor_count) == (760, 760, 333, 0)
    assert ck.decode_bytes_per_token == 15_873_376_768  # "15.87 GB" in the Ornith 1.0 9B recipe
    assert codes(a) == {"MTP_ADVERTISED_NOT_SHIPPED": "warning", "VISION_TOWER_PRESENT": "info"}
    # the recipe's per-class figures (GiB)
    gib = {c: round(b / 2**30, 2) for c, b in ck.tensors.bytes_by_class.items()}
    assert (gib["mlp"], gib["linear_attention"], gib["attention"], gib["vision"]) == (9.00, 3.01, 0.88, 0.85)
    assert (ck.config.full_attention_layers, ck.config.linear_attention_layers) == (8, 24)
    assert (ck.shards_read, ck.has_index, ck.expert_layout) == (
        [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)], True, "none")


def test_ornith_35b_per_expert(ornith_35b_dir: Path) -> None:
    a = audit_checkpoint(ornith_35b_dir)
    ck = a.checkpoint
    assert (ck.tensors.count, len(ck.shards_read), ck.visual_tensor_count, ck.mtp_tensor_count) == (31_666, 14, 333, 0)
    assert ck.expert_layout == "per_expert" and (ck.config.num_experts, ck.config.num_experts_per_tok) == (256, 8)
    assert ck.weight_bytes == 70_214_373_472  # 70.2 GB
    assert ck.tensors.count_by_class["moe_experts"] == 40 * 256 * 3
    # MoE decode bytes: everything but vision/embedding/experts, plus 8/256 of the routed experts
    spec = replicas.ornith_35b_a3b()
    experts = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors if ".mlp.experts." in n)
    rest = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors
               if ".mlp.experts." not in n and "visual" not in n and "embed_tokens" not in n)
    assert ck.decode_bytes_per_token == rest + experts * 8 // 256
    assert codes(a) == {"MTP_ADVERTISED_NOT_SHIPPED": "warning", "VISION_TOWER_PRESENT": "info"}


def test_fused_experts_layout(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_35b_a3b(fused_experts=True, num_shards=3), tmp_path / "fused")
    ck = audit_checkpoint(d).checkpoint
    assert ck.tensors.count == 1_026 and ck.expert_layout == "fused"
    assert ck.tensors.count_by_class["moe_experts"] == 40 * 2


def test_vision_config_without_tower(tmp_path: Path) -> None:
    a = audit_checkpoint(replicas.write_replica(replicas.ornith_9b(vision=False), tmp_path / "lm-only"))
    assert a.checkpoint.visual_tensor_count == 0
    assert codes(a) == {"MTP_ADVERTISED_NOT_SHIPPED": "warning", "VISION_CONFIG_WITHOUT_TOWER": "warning"}


def test_mtp_shipped(tmp_path: Path) -> None:
    a = audit_checkpoint(replicas.write_replica(replicas.ornith_9b(mtp=True), tmp_path / "mtp"))
    assert a.checkpoint.mtp_tensor_count == 15 and a.checkpoint.tensors.count == 775
    assert codes(a)["MTP_PRESENT"] == "info"
    assert a.checkpoint.decode_bytes_per_token == 15_873_376_768  # the draft is not read per decode token


def test_nvfp4_modelopt_moe(nvfp4_dir: Path) -> None:
    ck = audit_checkpoint(nvfp4_dir).checkpoint
    q = ck.tensors.quantization
    assert (q.method, q.algo, q.kv_cache_quant_algo) == ("modelopt", "MIXED_PRECISION", "FP8")
    # 8 layers x (32 experts x 3 + 3 shared) NVFP4 modules; 2 full-attention layers x 4 FP8 projections
    assert (q.nvfp4_modules, q.fp8_modules) == (8 * (32 * 3 + 3), 2 * 4)
    assert ck.mtp_tensor_count == 4 + 2 + 6 + (1 + 32 * 3 + 3 + 1)
    assert ck.tensors.bytes_by_dtype["U8"] > 0 and ck.tensors.bytes_by_dtype["F8_E4M3"] > 0
    # packed bytes + scales are what decode reads for experts
    spec = replicas.nvfp4_moe_mtp(layers=8, experts=32)
    experts = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors if ".mlp.experts." in n and not n.startswith("mtp."))
    rest = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors
               if ".mlp.experts." not in n and "visual" not in n and "embed_tokens" not in n and not n.startswith("mtp."))
    assert ck.decode_bytes_per_token == rest + experts * 8 // 32


def test_llama_and_qwen3_moe(tmp_path: Path) -> None:
    llama = audit_checkpoint(replicas.write_replica(replicas.llama_dense(), tmp_path / "llama"))
    ck = llama.checkpoint
    assert llama.findings == []
    assert ck.decode_bytes_per_token == ck.weight_bytes - ck.tensors.bytes_by_class["embedding"]
    moe = audit_checkpoint(replicas.write_replica(replicas.qwen3_moe(), tmp_path / "qwen3moe"))
    assert moe.checkpoint.tensors.count == 18_867 and moe.checkpoint.expert_layout == "per_expert"
    assert moe.findings == []


def test_tied_embeddings_count_as_lm_head(tmp_path: Path) -> None:
    ck = audit_checkpoint(replicas.write_replica(replicas.tiny_qwen3(), tmp_path / "tiny")).checkpoint
    assert "lm_head" not in ck.tensors.bytes_by_class
    assert ck.decode_bytes_per_token == ck.weight_bytes  # no vision, no MTP: the tied embedding is read as lm_head


def test_missing_shard_is_an_error_finding(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "m")  # (never copy a sparse replica: copies are dense)
    (d / "model-00002-of-00004.safetensors").unlink()
    a = audit_checkpoint(d)
    missing = next(f for f in a.findings if f.code == "MISSING_SHARD")
    assert missing.severity == "error"
    assert missing.message.startswith("model-00002-of-00004.safetensors is named by the index for 144 tensors but is not in ")
    assert "LAYER_GAP" in codes(a)  # the layers that lived in the missing shard
    assert "INDEX_SHARD_MISMATCH" not in codes(a)  # a missing shard is reported once, as itself


def test_index_names_tensor_absent_from_its_shard(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "x")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.language_model.layers.0.mlp.ghost.weight"] = "model-00001-of-00004.safetensors"
    name = "model.language_model.norm.weight"
    idx["weight_map"][name] = "model-00001-of-00004.safetensors" if idx["weight_map"][name] != "model-00001-of-00004.safetensors" else "model-00002-of-00004.safetensors"
    del idx["weight_map"]["model.language_model.layers.3.mlp.up_proj.weight"]
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    msgs = [f.message for f in audit_checkpoint(d).findings if f.code == "INDEX_SHARD_MISMATCH"]
    assert len(msgs) == 2
    assert msgs[0].startswith("2 indexed tensor(s) are absent from the shard the index names: ")
    assert "ghost" in msgs[0] and "model.language_model.norm.weight -> " in msgs[0]
    assert msgs[1].startswith("1 tensor(s) in the shards are not in the index: model.language_model.layers.3.mlp.up_proj.weight in ")


def test_layer_gap(tmp_path: Path) -> None:
    spec = replicas.ornith_9b(vision=False)
    spec.tensors = [t for t in spec.tensors if ".layers.17." not in t[0]]
    gap = [f for f in audit_checkpoint(replicas.write_replica(spec, tmp_path / "gap")).findings if f.code == "LAYER_GAP"]
    assert [(f.severity, f.message) for f in gap] == [(
        "error",
        "layers 17 of 0..31 (num_hidden_layers) have no tensors; shards are missing or the config does not match the weights",
    )]


def test_layer_type_mismatch_and_extra_layer(tmp_path: Path) -> None:
    spec = replicas.ornith_9b(vision=False)
    spec.config["text_config"]["full_attention_interval"] = 2
    del spec.config["text_config"]["layer_types"]
    assert codes(audit_checkpoint(replicas.write_replica(spec, tmp_path / "types")))["LAYER_TYPE_MISMATCH"] == "error"
    spec = replicas.ornith_9b(vision=False)
    spec.config["text_config"]["num_hidden_layers"] = 31
    spec.config["text_config"]["layer_types"] = spec.config["text_config"]["layer_types"][:31]
    assert codes(audit_checkpoint(replicas.write_replica(spec, tmp_path / "extra")))["LAYER_OUT_OF_RANGE"] == "error"


def test_layer_missing_whole_modules(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [t for t in spec.tensors if ".layers.3.mlp" not in t[0] and ".layers.4.self_attn" not in t[0]]
    f = next(f for f in audit_checkpoint(replicas.write_replica(spec, tmp_path / "m")).findings if f.code == "LAYER_INCOMPLETE")
    assert f.message == ("layers missing whole modules: 3 (no MLP tensors), 4 (no attention tensors); "
                         "re-download the checkpoint")


def test_incomplete_vision_tower(tmp_path: Path) -> None:
    spec = replicas.ornith_9b()
    spec.tensors = [t for t in spec.tensors if ".visual.blocks.26." not in t[0]]
    a = audit_checkpoint(replicas.write_replica(spec, tmp_path / "v"))
    assert codes(a)["VISION_TOWER_INCOMPLETE"] == "error"
    assert "321 visual tensors but a 27-block tower has 333" in next(f.message for f in a.findings if f.code == "VISION_TOWER_INCOMPLETE")


def test_nvfp4_missing_scale(tmp_path: Path) -> None:
    spec = replicas.nvfp4_moe_mtp(layers=4, experts=4, num_shards=1)
    spec.tensors = [t for t in spec.tensors if not t[0].endswith("layers.1.mlp.experts.2.up_proj.weight_scale_2")]
    f = next(f for f in audit_checkpoint(replicas.write_replica(spec, tmp_path / "q")).findings if f.code == "NVFP4_INCOMPLETE")
    assert f.severity == "error"
    assert f.message == ("1 NVFP4 problem(s): model.language_model.layers.1.mlp.experts.2.up_proj: packed U8 weight "
                         "without weight_scale_2; the export is broken")


def test_nvfp4_problem_in_every_expert_is_counted_once_per_layer(tmp_path: Path) -> None:
    """Experts stored alike are checked through one of them, and the finding says how many more."""
    spec = replicas.nvfp4_moe_mtp(layers=4, experts=4, num_shards=1)
    spec.tensors = [(n, "BF16", s) if n.endswith("layers.1.mlp.experts.0.up_proj.weight_scale") else (n, d, s)
                    for n, d, s in spec.tensors]
    spec.tensors = [(n, "BF16", s) if ".layers.2.mlp.experts." in n and n.endswith("down_proj.weight_scale") else (n, d, s)
                    for n, d, s in spec.tensors]
    f = next(f for f in audit_checkpoint(replicas.write_replica(spec, tmp_path / "q")).findings if f.code == "NVFP4_INCOMPLETE")
    assert f.message.startswith("2 NVFP4 problem(s): ")
    assert ("model.language_model.layers.1.mlp.experts.0.up_proj.weight_scale is BF16, NVFP4 block scales are F8_E4M3"
            in f.message)
    assert "layers.2.mlp.experts.3.down_proj.weight_scale is BF16, NVFP4 block scales are F8_E4M3 (and 3 more like it)" in f.message


def test_quantized_tensors_without_config(tmp_path: Path) -> None:
    spec = replicas.nvfp4_moe_mtp(layers=4, experts=4, num_shards=1)
    del spec.config["quantization_config"]
    del spec.config["text_config"]["quantization_config"]
    f = next(f for f in audit_checkpoint(replicas.write_replica(spec, tmp_path / "nq")).findings if f.code == "QUANT_CONFIG_MISSING")
    assert f.message.startswith("60 NVFP4 and 4 FP8 modules on disk but config.json has no quantization_config")


def test_fp8_without_scale_and_config_without_tensors(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [(n, "F8_E4M3", s) if n.endswith("layers.2.self_attn.q_proj.weight") else (n, d, s) for n, d, s in spec.tensors]
    a = audit_checkpoint(replicas.write_replica(spec, tmp_path / "fp8"))
    assert codes(a) == {"FP8_SCALE_MISSING": "error", "QUANT_CONFIG_MISSING": "error", "DTYPE_INCONSISTENT": "warning"}
    spec = replicas.llama_dense(num_shards=1)
    spec.config["quantization_config"] = {"quant_method": "fp8"}
    a = audit_checkpoint(replicas.write_replica(spec, tmp_path / "cfg"))
    assert [(f.code, f.message) for f in a.findings] == [
        ("QUANT_TENSORS_MISSING", "quantization_config says fp8/None but no quantized tensors are on disk")]


def test_bad_group_size_is_unusable_input(tmp_path: Path) -> None:
    spec = replicas.nvfp4_moe_mtp(layers=2, experts=2, num_shards=1)
    spec.config["quantization_config"]["group_size"] = "16"
    with pytest.raises(UserError, match=r"quantization_config.group_size must be a positive integer, got '16'"):
        audit_checkpoint(replicas.write_replica(spec, tmp_path / "g"))


def test_dtype_inconsistent_and_config_dtype_mismatch(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [(n, "F16" if n == "model.layers.5.mlp.up_proj.weight" else d, s) for n, d, s in spec.tensors]
    f = next(f for f in audit_checkpoint(replicas.write_replica(spec, tmp_path / "dt")).findings if f.code == "DTYPE_INCONSISTENT")
    assert f.severity == "warning" and "mlp.up_proj.weight: BF16/F16" in f.message
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [(n, "F16", s) for n, _, s in spec.tensors]
    a = audit_checkpoint(replicas.write_replica(spec, tmp_path / "f16"))
    assert [(f.code, f.message) for f in a.findings] == [
        ("CONFIG_DTYPE_MISMATCH", "config dtype is bfloat16 but most weights are F16; pass --dtype explicitly")]


def test_mixed_precision_dtypes_are_expected(tmp_path: Path) -> None:
    spec = replicas.nvfp4_moe_mtp(layers=4, experts=4, num_shards=2)
    assert spec.config["quantization_config"]["quant_algo"] == "MIXED_PRECISION"
    spec.tensors = [(n, "BF16", (8, 8)) if n.endswith("layers.2.mlp.experts.1.down_proj.weight") else (n, d, s)
                    for n, d, s in spec.tensors]
    a = audit_checkpoint(replicas.write_replica(spec, tmp_path / "mixed"))
    assert codes(a)["DTYPE_INCONSISTENT"] == "info"


def test_duplicate_and_unindexed(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=2)
    d = replicas.write_replica(spec, tmp_path / "dup")
    first = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    stray = replicas.ReplicaSpec("stray", {}, [t for t in spec.tensors if first[t[0]] == "model-00001-of-00002.safetensors"])
    replicas.write_replica(stray, tmp_path / "stray")
    (tmp_path / "stray" / "model.safetensors").rename(d / "stray.safetensors")
    a = audit_checkpoint(d)
    assert codes(a) == {"UNINDEXED_SHARD": "warning"}
    assert a.checkpoint.shards_read == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    (d / "model.safetensors.index.json").unlink()
    a = audit_checkpoint(d)
    assert codes(a) == {"INDEX_MISSING": "warning", "DUPLICATE_TENSOR": "error"}
    assert a.checkpoint.tensors.count == 291 and a.checkpoint.index_tensor_count == 291
    dup = next(f.message for f in a.findings if f.code == "DUPLICATE_TENSOR")
    assert dup.startswith(f"{len(stray.tensors)} tensor(s) stored in two shards: ")


def test_unusable_input_raises_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such directory"):
        audit_checkpoint(tmp_path / "absent")
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        audit_checkpoint(tmp_path / "f")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty checkpoint directory"):
        audit_checkpoint(tmp_path / "empty")
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "badindex")
    (d / "model.safetensors.index.json").write_text("{")
    with pytest.raises(UserError, match=r"model.safetensors.index.json: not valid JSON \(.*\); re-download"):
        audit_checkpoint(d)


def test_findings_follow_the_checks(ornith_9b_dir: Path) -> None:
    """The audit is the list of checks: findings come in CHECKS order, and a subset runs only those."""
    assert [c.__name__ for c in CHECKS] == [
        "check_shards", "check_duplicates", "check_index_entries", "check_layers", "check_embedding_and_head",
        "check_mtp", "check_vision", "check_quantization", "check_dtypes"]
    only_mtp = audit_checkpoint(ornith_9b_dir, checks=(check_mtp,))
    assert [f.code for f in only_mtp.findings] == ["MTP_ADVERTISED_NOT_SHIPPED"]
    assert check_mtp(only_mtp.checkpoint) == [Finding(
        code="MTP_ADVERTISED_NOT_SHIPPED", severity="warning",
        message="config advertises 1 MTP layer(s) but the checkpoint ships 0 mtp tensors: no speculative decoding — "
                "do not pass --speculative-config")]


def test_vision_encoder_layers_are_not_language_layers(tmp_path: Path) -> None:
    """A SigLIP-style tower (``vision_model.encoder.layers.N``) deeper than the LM must not look like extra LM layers."""
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors += [(f"vision_model.encoder.layers.{i}.mlp.fc1.weight", "BF16", (8, 8)) for i in range(40)]
    spec.config["vision_config"] = {"num_hidden_layers": 40}
    a = audit_checkpoint(replicas.write_replica(spec, tmp_path / "vlm"))
    assert a.checkpoint.visual_tensor_count == 40
    assert codes(a) == {"VISION_TOWER_PRESENT": "info"}


def test_unprefixed_layer_names(tmp_path: Path) -> None:
    """Consolidated-style names (``layers.N.attention.wq.weight``) are a layer stack too; ``layers.norm`` is not."""
    H, L = 64, 3
    tensors: list[tuple[str, str, tuple[int, ...]]] = [("tok_embeddings.weight", "BF16", (100, H)), ("output.weight", "BF16", (100, H))]
    for i in range(L):
        tensors += [(f"layers.{i}.attention.wq.weight", "BF16", (H, H)), (f"layers.{i}.feed_forward.w1.weight", "BF16", (2 * H, H)),
                    (f"layers.{i}.attention_norm.weight", "BF16", (H,))]
    tensors.append(("layers.norm.weight", "BF16", (H,)))
    cfg = {"architectures": ["X"], "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": 4, "vocab_size": 100,
           "max_position_embeddings": 256}
    a = audit_checkpoint(replicas.write_replica(replicas.ReplicaSpec("c", cfg, tensors), tmp_path / "c"))
    counts = {c: n for c, n in a.checkpoint.tensors.count_by_class.items() if n}
    assert counts == {"embedding": 1, "lm_head": 1, "final_norm": 1, "norm": 3, "attention": 3, "mlp": 3}
    assert a.findings == []
