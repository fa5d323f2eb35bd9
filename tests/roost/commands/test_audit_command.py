"""``roost audit PATH [--host] [--json]``: the JSON contract, exit 0/1/2, and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import replicas
from support.contract import AUDIT_JSON_KEYS
from typer.testing import CliRunner

from roost.checkpoint.writer import header_bytes
from roost.cli import app

ROOST = str(Path(sys.executable).parent / "roost")


@pytest.fixture(scope="module")
def ornith_9b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.ornith_9b(), tmp_path_factory.mktemp("cli") / "ornith-9b")


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_json_contract_real_entry_point(ornith_9b: Path) -> None:
    r = subprocess.run([ROOST, "audit", str(ornith_9b), "--host", "spark", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == AUDIT_JSON_KEYS
    assert (out["tensor_count"], out["index_tensor_count"], out["visual_tensor_count"], out["mtp_tensor_count"]) == (760, 760, 333, 0)
    assert round(out["decode_bytes_per_token"] / 1e9, 2) == 15.87 and round(out["decode_ceiling_tok_s"], 1) == 17.2
    assert out["kv_bytes_per_token"] == 32768
    assert [(f["code"], f["severity"]) for f in out["findings"]] == [
        ("MTP_ADVERTISED_NOT_SHIPPED", "warning"), ("VISION_TOWER_PRESENT", "info")]
    assert all(list(f) == ["code", "severity", "message"] for f in out["findings"])
    assert out["vllm_args"] == ["--served-model-name", "ornith-9b", "--max-model-len", "262144",
                                "--kv-cache-memory-bytes", "8650752000"]
    assert isinstance(out["vllm_args"], list) and all(isinstance(a, str) for a in out["vllm_args"])


def test_human_summary(ornith_9b: Path) -> None:
    code, out, _ = run("audit", str(ornith_9b))
    assert code == 0
    assert "decode reads 15.87 GB/token -> ceiling 17.2 tok/s on spark" in out
    assert "MTP_ADVERTISED_NOT_SHIPPED" in out


def _one_line_error(code: int, err: str, want_code: int, *fragments: str) -> None:
    assert code == want_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roost: error: "), err
    assert "Traceback" not in err
    for frag in fragments:
        assert frag in lines[0]


def _single_shard(d: Path, body: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    spec = replicas.tiny_qwen3(layers=1, num_shards=1)
    replicas.write_replica(spec, d)
    (d / "model.safetensors").write_bytes(body)
    return d


def test_truncated_file(tmp_path: Path) -> None:
    d = _single_shard(tmp_path / "m", b"\x05\x00")
    _one_line_error(*run("audit", str(d))[::2], 2, "model.safetensors", "truncated")


def test_header_length_larger_than_file(tmp_path: Path) -> None:
    d = _single_shard(tmp_path / "m", (1 << 40).to_bytes(8, "little") + b"{}")
    _one_line_error(*run("audit", str(d))[::2], 2, "larger than the file allows")


def test_non_json_header(tmp_path: Path) -> None:
    d = _single_shard(tmp_path / "m", (6).to_bytes(8, "little") + b"{oops}")
    _one_line_error(*run("audit", str(d))[::2], 2, "not valid JSON")


def test_unknown_dtype(tmp_path: Path) -> None:
    h = json.dumps({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}).encode()
    d = _single_shard(tmp_path / "m", len(h).to_bytes(8, "little") + h + b"\0\0")
    _one_line_error(*run("audit", str(d))[::2], 2, "unknown dtype 'Q7'")


def test_offsets_out_of_range(tmp_path: Path) -> None:
    h = json.dumps({"w": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}}).encode()
    d = _single_shard(tmp_path / "m", len(h).to_bytes(8, "little") + h + b"\0" * 10)
    _one_line_error(*run("audit", str(d))[::2], 2, "run past the data section")


def test_overlapping_offsets(tmp_path: Path) -> None:
    h = json.dumps({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                    "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}}).encode()
    d = _single_shard(tmp_path / "m", len(h).to_bytes(8, "little") + h + b"\0" * 12)
    _one_line_error(*run("audit", str(d))[::2], 2, "'b'", "overlaps 'a'")


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "m")
    (d / "model-00003-of-00004.safetensors").unlink()
    code, out, err = run("audit", str(d), "--json")
    assert code == 1
    found = {f["code"] for f in json.loads(out)["findings"]}
    assert "MISSING_SHARD" in found
    assert err.strip().startswith("roost: error: ") and "MISSING_SHARD" in err and "Traceback" not in err


def test_index_naming_a_tensor_absent_from_its_shard(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "m")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"] = (
        "model-00002-of-00002.safetensors"
        if idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"] == "model-00001-of-00002.safetensors"
        else "model-00001-of-00002.safetensors"
    )
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    code, out, err = run("audit", str(d))
    assert code == 1
    assert "INDEX_SHARD_MISMATCH" in out and "q_proj.weight" in out
    assert "INDEX_SHARD_MISMATCH" in err and "Traceback" not in err


def test_dot_dot_path_in_index(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "m")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.norm.weight"] = "../../etc/passwd"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    _one_line_error(*run("audit", str(d))[::2], 2, "'../../etc/passwd'", "outside the checkpoint directory")


def test_config_missing_required_field(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=1), tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["num_attention_heads"]
    (d / "config.json").write_text(json.dumps(cfg))
    _one_line_error(*run("audit", str(d))[::2], 2, "config.json", "missing field 'num_attention_heads'")


def test_config_not_json(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=1), tmp_path / "m")
    (d / "config.json").write_text("{")
    _one_line_error(*run("audit", str(d))[::2], 2, "config.json", "not valid JSON")


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    _one_line_error(*run("audit", str(tmp_path / "empty"))[::2], 2, "empty checkpoint directory")


def test_missing_path_and_unknown_host(tmp_path: Path, ornith_9b: Path) -> None:
    _one_line_error(*run("audit", str(tmp_path / "nope"))[::2], 2, "no such directory")
    _one_line_error(*run("audit", str(ornith_9b), "--host", "moon")[::2], 2, "unknown host profile 'moon'")


def test_layer_gap_exit_1(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [t for t in spec.tensors if ".layers.7." not in t[0]]
    d = replicas.write_replica(spec, tmp_path / "m")
    code, out, _ = run("audit", str(d), "--json")
    assert code == 1 and any(f["code"] == "LAYER_GAP" for f in json.loads(out)["findings"])


def test_no_traceback_through_real_entry_point(tmp_path: Path) -> None:
    """The installed console script maps a corrupt shard to one line and exit 2."""
    d = tmp_path / "m"
    replicas.write_replica(replicas.tiny_qwen3(layers=1, num_shards=1), d)
    head, _ = header_bytes([("w", "BF16", (4, 4))])
    (d / "model.safetensors").write_bytes(head)  # data section missing
    r = subprocess.run([ROOST, "audit", str(d)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("roost: error: ") and r.stderr.count("\n") == 1
