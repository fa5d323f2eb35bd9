"""roost.plan.report: the audit report for a host (``roost audit --json``), composed from the checkpoint audit
and the plan's derivations (vLLM arguments, load bytes, fit, decode ceiling, KV bytes per token)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from support import replicas
from support.contract import AUDIT_JSON_KEYS

from roost.checkpoint.audit import audit_checkpoint
from roost.hosts import CPU, SPARK
from roost.plan.report import AuditReport, audit_for_host, audit_report
from roost.records import Finding


def codes(report: AuditReport) -> dict[str, str]:
    return {f.code: f.severity for f in report.findings}


def test_ornith_9b_on_the_spark(plan_9b_dir: Path) -> None:
    """The Ornith 1.0 9B recipe: 15.87 GB/token -> 17.2 tok/s at 273 GB/s; 32 KiB of KV per token; the full window."""
    r = audit_for_host(plan_9b_dir, SPARK)
    out = r.to_json()
    # a local audit's JSON has no Hub fields (repo_id, commit, bytes_fetched: a preflight's only)
    assert list(out) == AUDIT_JSON_KEYS and out == r.model_dump(mode="json", exclude={"repo_id", "commit", "bytes_fetched"})
    assert (r.host, r.served_model_name, r.tensor_count, r.visual_tensor_count) == ("spark", "ornith-9b", 760, 333)
    assert r.decode_bytes_per_token == 15_873_376_768 and f"{r.decode_ceiling_tok_s:.1f}" == "17.2"
    assert r.kv_bytes_per_token == 32 * 1024
    assert r.vllm_args == ["--served-model-name", "ornith-9b", "--max-model-len", "262144",
                           "--kv-cache-memory-bytes", "8650752000"]
    assert r.kv_cache_memory_bytes == 8_650_752_000 and r.load_weight_bytes == r.weight_bytes  # tower built, no MTP
    assert codes(r) == {"MTP_ADVERTISED_NOT_SHIPPED": "warning", "VISION_TOWER_PRESENT": "info"}
    assert r.errors == [] and not r.has_errors
    assert out["quantization"] == {"method": None, "algo": None, "kv_cache_quant_algo": None, "nvfp4_modules": 0,
                                   "fp8_modules": 0, "unquantized_modules": 760 - (64 + 1 + 24 * 3 + 8 * 2 + 221)}
    assert out["tensor_count_by_class"] == {"embedding": 1, "lm_head": 1, "final_norm": 1, "norm": 64, "attention": 48,
                                            "linear_attention": 216, "mlp": 96, "vision": 333}


def test_config_rides_along_but_is_not_in_the_json(plan_9b_dir: Path) -> None:
    r = audit_for_host(plan_9b_dir, SPARK)
    assert "config" not in r.to_json() and "config" not in json.loads(r.model_dump_json())
    back = pickle.loads(pickle.dumps(r))  # what a persisted Prefect result comes back as
    assert isinstance(back, AuditReport) and back.config == r.config and back == r


def test_language_model_only_drops_the_tower(tmp_path: Path) -> None:
    r = audit_for_host(replicas.write_replica(replicas.ornith_9b(vision=False), tmp_path / "lm-only"), SPARK)
    assert "--language-model-only" in r.vllm_args
    assert r.load_weight_bytes == r.weight_bytes  # nothing to drop: no visual tensors


def test_mtp_shipped_enables_speculation(tmp_path: Path) -> None:
    r = audit_for_host(replicas.write_replica(replicas.ornith_9b(mtp=True), tmp_path / "mtp"), SPARK)
    i = r.vllm_args.index("--speculative-config")
    assert json.loads(r.vllm_args[i + 1]) == {"method": "mtp", "num_speculative_tokens": 1}
    assert r.load_weight_bytes == r.weight_bytes  # the draft is loaded
    assert r.kv_bytes_per_token == 9 * 2 * 4 * 256 * 2  # the draft's attention layer has a KV cache too


def test_nvfp4_fp8_kv_cache(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.nvfp4_moe_mtp(layers=8, experts=32, num_shards=3), tmp_path / "nvfp4")
    r = audit_for_host(d, SPARK)
    assert r.vllm_args[r.vllm_args.index("--kv-cache-dtype") + 1] == "fp8"
    assert r.kv_bytes_per_token == 3 * 2 * 2 * 256 * 1  # 2 full-attention layers + the MTP draft layer, FP8 KV
    assert not r.has_errors


def test_does_not_fit_host(plan_35b_dir: Path) -> None:
    r = audit_for_host(plan_35b_dir, CPU)
    assert r.errors == [r.findings[-1]] and r.findings[-1].code == "DOES_NOT_FIT_HOST"
    assert r.findings[-1].message.startswith("weights 65.39 GiB + KV pool ")
    assert r.findings[-1].message.endswith("exceed cpu's 8.00 GiB budget; use a quantized build or a bigger host")


def test_one_checkpoint_audit_serves_two_hosts(plan_9b_dir: Path) -> None:
    """The headers are read once; the host only changes what the plan derives from them."""
    audit = audit_checkpoint(plan_9b_dir)
    spark, cpu = audit_report(audit, SPARK), audit_report(audit, CPU)
    assert spark.findings[: len(audit.findings)] == cpu.findings[: len(audit.findings)] == audit.findings
    assert (spark.host, cpu.host) == ("spark", "cpu")
    assert f"{spark.decode_ceiling_tok_s:.1f}" == "17.2" and f"{cpu.decode_ceiling_tok_s:.2f}" == "1.26"
    assert [f.code for f in cpu.errors] == ["DOES_NOT_FIT_HOST"] and spark.errors == []
    named = audit_report(audit, SPARK, served_model_name="ornith9b", max_model_len=131072, target_concurrency=2.0)
    assert named.vllm_args[:4] == ["--served-model-name", "ornith9b", "--max-model-len", "131072"]
    assert (named.max_model_len, named.native_max_model_len) == (131072, 262144)  # the window served, and the native one


def test_summary(plan_9b_dir: Path) -> None:
    text = audit_for_host(plan_9b_dir, SPARK).summary()
    assert "decode reads 15.87 GB/token -> ceiling 17.2 tok/s on spark" in text
    assert "\n  KV cache: 32 KiB/token\n" in text and "\n    mlp                      9.00 GiB\n" in text
    assert "[warning] MTP_ADVERTISED_NOT_SHIPPED: config advertises 1 MTP layer(s)" in text


def test_errors_lists_error_findings_only(plan_9b_dir: Path) -> None:
    r = audit_for_host(plan_9b_dir, SPARK)
    err = Finding(code="LAYER_GAP", severity="error", message="x")
    r2 = r.model_copy(update={"findings": [*r.findings, err]})
    assert r2.errors == [err] and r2.has_errors
