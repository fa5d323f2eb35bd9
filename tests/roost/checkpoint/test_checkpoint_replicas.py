"""tests/support/replicas.py (written by roost.checkpoint.writer): header-exact, sparse, and faithful to the
published counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors import safe_open
from support import replicas

from roost.checkpoint.safetensors_header import read_header


def test_ornith_9b_counts(ornith_9b_dir: Path) -> None:
    spec = replicas.ornith_9b()
    names = [n for n, _, _ in spec.tensors]
    assert len(names) == 760
    assert sum(".visual." in n or n.startswith("model.visual") for n in names) == 333
    assert sum("mtp" in n for n in names) == 0
    wm = json.loads((ornith_9b_dir / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(wm) == 760 and len(set(wm.values())) == 4


def test_replica_is_sparse(ornith_35b_dir: Path) -> None:
    apparent = sum(f.stat().st_size for f in ornith_35b_dir.glob("*.safetensors"))
    assert apparent > 70e9
    assert replicas.sparse_disk_bytes(ornith_35b_dir) < 50e6


def test_ornith_35b_counts(ornith_35b_dir: Path) -> None:
    shards = sorted(ornith_35b_dir.glob("*.safetensors"))
    assert len(shards) == 14
    assert shards[0].name == "model-00001-of-00014.safetensors"
    assert sum(len(read_header(s).tensors) for s in shards) == 31_666


def test_headers_read_identically_by_safetensors(ornith_9b_dir: Path) -> None:
    """safetensors' own reader sees the same names, dtypes and shapes as the spec."""
    expected = {n: (d, list(s)) for n, d, s in replicas.ornith_9b().tensors}
    seen = {}
    for shard in ornith_9b_dir.glob("*.safetensors"):
        with safe_open(str(shard), framework="np") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open handles are not mappings
                sl = f.get_slice(k)
                seen[k] = (sl.get_dtype(), list(sl.get_shape()))
    assert seen == expected


def test_other_families() -> None:
    assert len(replicas.llama_dense().tensors) == 291
    assert len(replicas.qwen3_moe().tensors) == 18_867
    assert len(replicas.ornith_35b_a3b(fused_experts=True).tensors) == 1_026
    assert len(replicas.ornith_9b(mtp=True).tensors) == 775


def test_nvfp4_structure(nvfp4_dir: Path) -> None:
    names = {n: (d, s) for n, d, s in replicas.nvfp4_moe_mtp(layers=8, experts=32).tensors}
    w = "model.language_model.layers.0.mlp.experts.3.gate_proj."
    assert names[w + "weight"] == ("U8", (512, 1024))
    assert names[w + "weight_scale"] == ("F8_E4M3", (512, 128))
    assert names[w + "weight_scale_2"] == ("F32", ())
    assert names[w + "input_scale"] == ("F32", ())
    a = "model.language_model.layers.3.self_attn."
    assert names[a + "q_proj.weight"][0] == "F8_E4M3"
    assert names[a + "k_proj.k_scale"] == ("F32", ())
    assert sum(n.startswith("mtp.") for n in names) == 4 + 2 + 6 + (1 + 3 * 32 + 3 + 1)
    cfg = json.loads((nvfp4_dir / "config.json").read_text())
    assert cfg["quantization_config"]["kv_cache_quant_algo"] == "FP8"


def test_random_fill_writes_real_data(tmp_path: Path) -> None:
    """fill="random": real bytes (no holes), finite BF16 values, norms near one."""
    d = replicas.write_replica(replicas.tiny_qwen3(layers=2), tmp_path / "tiny", fill="random")
    assert replicas.sparse_disk_bytes(d) >= sum(f.stat().st_size for f in d.glob("*.safetensors"))
    for shard in d.glob("*.safetensors"):
        h = read_header(shard)
        raw = shard.read_bytes()[h.data_offset :]
        for name, e in h.tensors.items():
            b, end = e.data_offsets
            values = (np.frombuffer(raw[b:end], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            assert np.isfinite(values).all(), name
            if name.endswith("norm.weight"):
                assert abs(float(values.mean()) - 1.0) < 0.05
