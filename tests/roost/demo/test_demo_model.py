"""roost.demo.model: the demo model ``roost run`` serves, written by the one safetensors writer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from roost.checkpoint.safetensors_header import read_header
from roost.demo.model import generate_tiny_model
from roost.hosts import CPU
from roost.plan.report import audit_for_host


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_tiny_model(tmp_path_factory.mktemp("demo") / "tiny", seed=0)


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_a_checkpoint_the_audit_accepts(demo: Path) -> None:
    r = audit_for_host(demo, CPU)
    assert r.findings == [] and (r.architecture, r.shard_count, r.has_index) == ("Qwen3ForCausalLM", 2, True)
    assert r.tensor_count == 1 + 4 * 11 + 2 and r.weight_bytes_by_dtype.keys() == {"BF16"}
    names = sorted(p.name for p in demo.iterdir())
    assert names == ["README.md", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                     "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
                     "tokenizer_config.json"]
    index = json.loads((demo / "model.safetensors.index.json").read_text())
    assert list(index["weight_map"]) == sorted(index["weight_map"])


def test_weights_are_the_recipe(demo: Path) -> None:
    """Norms are ones; every other tensor is N(0, 0.02) in BF16 (as read back by safetensors' own reader)."""
    shard = demo / "model-00001-of-00002.safetensors"
    h = read_header(shard)
    raw = shard.read_bytes()
    with safe_open(str(shard), framework="np") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}  # noqa: SIM118 - not a mapping
    for name, entry in h.tensors.items():
        begin, end = entry.data_offsets
        values = (np.frombuffer(raw[h.data_offset + begin : h.data_offset + end], "<u2").astype(np.uint32) << 16).view(np.float32)
        if name.endswith("norm.weight"):
            assert (values == 1.0).all(), name
        elif values.size >= 4096:
            assert abs(float(values.std()) - 0.02) < 0.002, name


def test_same_seed_same_bytes(demo: Path, tmp_path: Path) -> None:
    """The Hub commit and every cache key downstream depend on it."""
    again = generate_tiny_model(tmp_path / "again", seed=0)
    assert _digests(again) == _digests(demo)
    other = _digests(generate_tiny_model(tmp_path / "other", seed=1))
    assert other["tokenizer.json"] == _digests(demo)["tokenizer.json"]
    assert other["model-00001-of-00002.safetensors"] != _digests(demo)["model-00001-of-00002.safetensors"]
