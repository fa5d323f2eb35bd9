"""roost.checkpoint.audit: the seeds' figures from headers alone, and every finding the seeds describe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roost.checkpoint import replicas
from roost.checkpoint.audit import AuditReport, audit_checkpoint
from roost.checkpoint.safetensors_header import tensor_nbytes
from roost.errors import UserError
from roost.hosts import CPU, SPARK


def codes(report: AuditReport) -> dict[str, str]:
    return {f.code: f.severity for f in report.findings}


def test_ornith_9b_matches_the_seed(ornith_9b_dir: Path) -> None:
    r = audit_checkpoint(ornith_9b_dir, SPARK)
    assert (r.tensor_count, r.index_tensor_count, r.visual_tensor_count, r.mtp_tensor_count) == (760, 760, 333, 0)
    assert f"{r.decode_bytes_per_token / 1e9:.2f}" == "15.87"
    assert f"{r.decode_ceiling_tok_s:.1f}" == "17.2"
    assert r.kv_bytes_per_token == 32 * 1024
    assert codes(r) == {"MTP_ADVERTISED_NOT_SHIPPED": "warning", "VISION_TOWER_PRESENT": "info"}
    assert not r.has_errors
    # the seed's per-class figures (GiB)
    gib = {c: round(b / 2**30, 2) for c, b in r.weight_bytes_by_class.items()}
    assert (gib["mlp"], gib["linear_attention"], gib["attention"], gib["vision"]) == (9.00, 3.01, 0.88, 0.85)
    assert "--language-model-only" not in r.vllm_args
    assert "--speculative-config" not in r.vllm_args
    assert r.vllm_args[r.vllm_args.index("--max-model-len") + 1] == "262144"
    assert (r.full_attention_layers, r.linear_attention_layers) == (8, 24)


def test_ornith_35b_per_expert(ornith_35b_dir: Path) -> None:
    r = audit_checkpoint(ornith_35b_dir, SPARK)
    assert (r.tensor_count, r.shard_count, r.visual_tensor_count, r.mtp_tensor_count) == (31_666, 14, 333, 0)
    assert r.expert_layout == "per_expert" and (r.num_experts, r.num_experts_per_tok) == (256, 8)
    assert f"{r.weight_bytes / 1e9:.1f}" == "70.2"
    # MoE decode bytes: everything but vision/embedding/experts, plus 8/256 of the routed experts
    spec = replicas.ornith_35b_a3b()
    experts = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors if ".mlp.experts." in n)
    rest = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors
               if ".mlp.experts." not in n and "visual" not in n and "embed_tokens" not in n)
    assert r.decode_bytes_per_token == rest + experts * 8 // 256
    assert "MTP_ADVERTISED_NOT_SHIPPED" in codes(r)
    assert r.kv_bytes_per_token == 10 * 2 * 2 * 256 * 2


def test_fused_experts_layout(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_35b_a3b(fused_experts=True, num_shards=3), tmp_path / "fused")
    r = audit_checkpoint(d, SPARK)
    assert r.tensor_count == 1_026 and r.expert_layout == "fused"


def test_vision_config_without_tower(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(vision=False), tmp_path / "lm-only")
    r = audit_checkpoint(d, SPARK)
    assert r.visual_tensor_count == 0
    assert codes(r)["VISION_CONFIG_WITHOUT_TOWER"] == "warning"
    assert "--language-model-only" in r.vllm_args
    assert r.load_weight_bytes == r.weight_bytes


def test_mtp_shipped_enables_speculation(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(mtp=True), tmp_path / "mtp")
    r = audit_checkpoint(d, SPARK)
    assert r.mtp_tensor_count == 15 and r.tensor_count == 775
    assert codes(r)["MTP_PRESENT"] == "info"
    i = r.vllm_args.index("--speculative-config")
    assert json.loads(r.vllm_args[i + 1]) == {"method": "mtp", "num_speculative_tokens": 1}
    # the draft is not read per decode token
    assert f"{r.decode_bytes_per_token / 1e9:.2f}" == "15.87"


def test_nvfp4_modelopt_moe(nvfp4_dir: Path) -> None:
    r = audit_checkpoint(nvfp4_dir, SPARK)
    assert r.quantization.method == "modelopt" and r.quantization.kv_cache_quant_algo == "FP8"
    # 8 layers x (32 experts x 3 + 3 shared) NVFP4 modules; 2 full-attention layers x 4 FP8 projections
    assert r.quantization.nvfp4_modules == 8 * (32 * 3 + 3)
    assert r.quantization.fp8_modules == 2 * 4
    assert r.mtp_tensor_count == 4 + 2 + 6 + (1 + 32 * 3 + 3 + 1)
    assert "MTP_PRESENT" in codes(r) and not r.has_errors
    assert r.vllm_args[r.vllm_args.index("--kv-cache-dtype") + 1] == "fp8"
    assert r.kv_bytes_per_token == 3 * 2 * 2 * 256 * 1  # 2 full-attention layers + the MTP draft layer, FP8 KV
    assert r.weight_bytes_by_dtype["U8"] > 0 and r.weight_bytes_by_dtype["F8_E4M3"] > 0
    # packed bytes + scales are what decode reads for experts
    spec = replicas.nvfp4_moe_mtp(layers=8, experts=32)
    experts = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors if ".mlp.experts." in n and not n.startswith("mtp."))
    rest = sum(tensor_nbytes(d, s) for n, d, s in spec.tensors
               if ".mlp.experts." not in n and "visual" not in n and "embed_tokens" not in n and not n.startswith("mtp."))
    assert r.decode_bytes_per_token == rest + experts * 8 // 32


def test_llama_and_qwen3_moe(tmp_path: Path) -> None:
    llama = audit_checkpoint(replicas.write_replica(replicas.llama_dense(), tmp_path / "llama"), SPARK)
    assert llama.findings == [] and llama.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2
    assert llama.decode_bytes_per_token == llama.weight_bytes - llama.weight_bytes_by_class["embedding"]
    moe = audit_checkpoint(replicas.write_replica(replicas.qwen3_moe(), tmp_path / "qwen3moe"), SPARK)
    assert moe.tensor_count == 18_867 and moe.expert_layout == "per_expert" and moe.findings == []


def test_tied_embeddings_count_as_lm_head(tmp_path: Path) -> None:
    r = audit_checkpoint(replicas.write_replica(replicas.tiny_qwen3(), tmp_path / "tiny"), CPU)
    assert "lm_head" not in r.weight_bytes_by_class
    assert r.decode_bytes_per_token == r.weight_bytes  # no vision, no MTP: the tied embedding is read as lm_head


def test_missing_shard_is_an_error_finding(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "m")  # (never copy a sparse replica: copies are dense)
    (d / "model-00002-of-00004.safetensors").unlink()
    r = audit_checkpoint(d, SPARK)
    assert codes(r)["MISSING_SHARD"] == "error" and r.has_errors
    assert "LAYER_GAP" in codes(r)  # the layers that lived in the missing shard


def test_index_names_tensor_absent_from_its_shard(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "x")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.language_model.layers.0.mlp.ghost.weight"] = "model-00001-of-00004.safetensors"
    name = "model.language_model.norm.weight"
    idx["weight_map"][name] = "model-00001-of-00004.safetensors" if idx["weight_map"][name] != "model-00001-of-00004.safetensors" else "model-00002-of-00004.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    r = audit_checkpoint(d, SPARK)
    msgs = [f.message for f in r.findings if f.code == "INDEX_SHARD_MISMATCH"]
    assert any("ghost" in m and "absent from the shard" in m for m in msgs)
    assert r.has_errors


def test_layer_gap(tmp_path: Path) -> None:
    spec = replicas.ornith_9b(vision=False)
    spec.tensors = [t for t in spec.tensors if ".layers.17." not in t[0]]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "gap"), SPARK)
    gap = [f for f in r.findings if f.code == "LAYER_GAP"]
    assert gap and "layers 17 of 0..31" in gap[0].message and gap[0].severity == "error"


def test_layer_type_mismatch_and_extra_layer(tmp_path: Path) -> None:
    spec = replicas.ornith_9b(vision=False)
    spec.config["text_config"]["full_attention_interval"] = 2
    del spec.config["text_config"]["layer_types"]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "types"), SPARK)
    assert codes(r)["LAYER_TYPE_MISMATCH"] == "error"
    spec = replicas.ornith_9b(vision=False)
    spec.config["text_config"]["num_hidden_layers"] = 31
    spec.config["text_config"]["layer_types"] = spec.config["text_config"]["layer_types"][:31]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "extra"), SPARK)
    assert codes(r)["LAYER_OUT_OF_RANGE"] == "error"


def test_incomplete_vision_tower(tmp_path: Path) -> None:
    spec = replicas.ornith_9b()
    spec.tensors = [t for t in spec.tensors if ".visual.blocks.26." not in t[0]]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "v"), SPARK)
    assert codes(r)["VISION_TOWER_INCOMPLETE"] == "error"
    assert "321 visual tensors but a 27-block tower has 333" in next(f.message for f in r.findings if f.code == "VISION_TOWER_INCOMPLETE")


def test_nvfp4_missing_scale(tmp_path: Path) -> None:
    spec = replicas.nvfp4_moe_mtp(layers=4, experts=4, num_shards=1)
    spec.tensors = [t for t in spec.tensors if not t[0].endswith("layers.1.mlp.experts.2.up_proj.weight_scale_2")]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "q"), SPARK)
    f = next(f for f in r.findings if f.code == "NVFP4_INCOMPLETE")
    assert f.severity == "error" and "experts.2.up_proj: packed U8 weight without weight_scale_2" in f.message


def test_quantized_tensors_without_config(tmp_path: Path) -> None:
    spec = replicas.nvfp4_moe_mtp(layers=4, experts=4, num_shards=1)
    del spec.config["quantization_config"]
    del spec.config["text_config"]["quantization_config"]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "nq"), SPARK)
    assert codes(r)["QUANT_CONFIG_MISSING"] == "error"


def test_dtype_inconsistent(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [(n, "F16" if n == "model.layers.5.mlp.up_proj.weight" else d, s) for n, d, s in spec.tensors]
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "dt"), SPARK)
    f = next(f for f in r.findings if f.code == "DTYPE_INCONSISTENT")
    assert f.severity == "warning" and "mlp.up_proj.weight: BF16/F16" in f.message


def test_duplicate_and_unindexed(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=2)
    d = replicas.write_replica(spec, tmp_path / "dup")
    first = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    stray = replicas.ReplicaSpec("stray", {}, [t for t in spec.tensors if first[t[0]] == "model-00001-of-00002.safetensors"])
    replicas.write_replica(stray, tmp_path / "stray")
    (tmp_path / "stray" / "model.safetensors").rename(d / "stray.safetensors")
    r = audit_checkpoint(d, SPARK)
    assert codes(r)["UNINDEXED_SHARD"] == "warning" and not r.has_errors
    (d / "model.safetensors.index.json").unlink()
    r = audit_checkpoint(d, SPARK)
    assert codes(r)["DUPLICATE_TENSOR"] == "error" and codes(r)["INDEX_MISSING"] == "warning"


def test_does_not_fit_host(ornith_35b_dir: Path) -> None:
    r = audit_checkpoint(ornith_35b_dir, CPU)
    assert codes(r)["DOES_NOT_FIT_HOST"] == "error"


def test_unusable_input_raises_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such directory"):
        audit_checkpoint(tmp_path / "absent", SPARK)
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        audit_checkpoint(tmp_path / "f", SPARK)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty checkpoint directory"):
        audit_checkpoint(tmp_path / "empty", SPARK)


def test_audit_is_fast_enough_to_run_every_time(ornith_35b_dir: Path) -> None:
    """Not a timing test: the audit reports its own duration, which the benchmark measures properly."""
    r = audit_checkpoint(ornith_35b_dir, SPARK)
    assert 0 < r.audit_seconds < 30


def test_vision_encoder_layers_are_not_language_layers(tmp_path: Path) -> None:
    """A SigLIP-style tower (``vision_model.encoder.layers.N``) deeper than the LM must not look like extra LM layers."""
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors += [(f"vision_model.encoder.layers.{i}.mlp.fc1.weight", "BF16", (8, 8)) for i in range(40)]
    spec.config["vision_config"] = {"num_hidden_layers": 40}
    r = audit_checkpoint(replicas.write_replica(spec, tmp_path / "vlm"), SPARK)
    assert r.visual_tensor_count == 40
    assert "LAYER_OUT_OF_RANGE" not in codes(r) and not r.has_errors


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
    r = audit_checkpoint(replicas.write_replica(replicas.ReplicaSpec("c", cfg, tensors), tmp_path / "c"), SPARK)
    assert r.tensor_count_by_class == {"embedding": 1, "lm_head": 1, "final_norm": 1, "norm": 3, "attention": 3, "mlp": 3}
    assert not r.has_errors, r.findings
