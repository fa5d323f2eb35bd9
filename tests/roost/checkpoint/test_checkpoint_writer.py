"""roost.checkpoint.writer: the one safetensors writer (demo model, test replicas) writes what safetensors reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from roost.checkpoint.safetensors_header import read_header
from roost.checkpoint.writer import (
    INDEX_NAME,
    header_bytes,
    shard_file_name,
    to_bf16_bytes,
    write_shard,
    write_shards,
)


def test_header_bytes_roundtrip_and_padding(tmp_path: Path) -> None:
    specs = [("w", "BF16", (4, 8)), ("s", "F8_E4M3", (4, 1)), ("p", "U8", (4, 4)), ("f4", "F4", (3, 2))]
    head, data_len = header_bytes(specs, {"format": "pt"})
    assert (len(head) - 8) % 8 == 0 and int.from_bytes(head[:8], "little") == len(head) - 8
    assert head[8:].rstrip(b" ").startswith(b'{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[4,8],')
    assert data_len == 64 + 4 + 16 + 3
    path = tmp_path / "r.safetensors"
    path.write_bytes(head + b"\0" * data_len)
    h = read_header(path)
    assert list(h.tensors) == ["w", "s", "p", "f4"]
    assert h.sizes == [64, 4, 16, 3]
    with pytest.raises(ValueError, match="not a whole number of bytes"):
        header_bytes([("odd", "F4", (3,))])


def test_bf16_rounds_to_nearest_even() -> None:
    values = np.array([1.0, -2.0, 0.0, 1.00390625, 1.01171875, 3.140625], dtype=np.float32)
    # 1 + 2^-8 is halfway between two BF16 values and rounds to even (1.0); 1 + 3*2^-8 rounds up
    assert np.frombuffer(to_bf16_bytes(values), dtype="<u2").tolist() == [0x3F80, 0xC000, 0x0000, 0x3F80, 0x3F82, 0x4049]


def test_shards_index_and_data_read_back_by_safetensors(tmp_path: Path) -> None:
    shards = [[("a", "BF16", (2, 3)), ("b", "F32", (2,))], [("c", "BF16", (4,))]]
    values = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([0.5, -1.5], np.float32),
              "c": np.array([1, 2, 3, 4], np.float32)}

    def data(name: str, dtype: str, shape: tuple[int, ...]) -> bytes:
        return to_bf16_bytes(values[name]) if dtype == "BF16" else values[name].tobytes()

    weight_map = write_shards(tmp_path, shards, data)
    assert weight_map == {"a": shard_file_name(1, 2), "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}
    index = (tmp_path / INDEX_NAME).read_text()
    assert index.endswith("}\n") and json.loads(index) == {"metadata": {"total_size": 12 + 8 + 8}, "weight_map": weight_map}
    first = tmp_path / "model-00001-of-00002.safetensors"
    with safe_open(str(first), framework="np") as f:
        assert f.get_tensor("b").tolist() == [0.5, -1.5]
        assert (f.get_slice("a").get_dtype(), f.get_slice("a").get_shape()) == ("BF16", [2, 3])
    h = read_header(first)
    begin, end = h.tensors["a"].data_offsets
    raw = first.read_bytes()[h.data_offset + begin : h.data_offset + end]
    assert (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).tolist() == [0, 1, 2, 3, 4, 5]
    assert read_header(tmp_path / "model-00002-of-00002.safetensors").metadata == {"format": "pt"}


def test_single_shard_and_sparse_data(tmp_path: Path) -> None:
    write_shards(tmp_path / "one", [[("w", "BF16", (1024, 1024))]])
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["model.safetensors"]
    f = tmp_path / "one" / "model.safetensors"
    assert f.stat().st_size == len(header_bytes([("w", "BF16", (1024, 1024))], {"format": "pt"})[0]) + 2 * 1024 * 1024
    assert f.stat().st_blocks * 512 < 64 * 1024  # a hole, not 2 MiB of zeros
    write_shards(tmp_path / "indexed", [[("w", "BF16", (2,))]], index=True)
    assert sorted(p.name for p in (tmp_path / "indexed").iterdir()) == ["model-00001-of-00001.safetensors", INDEX_NAME]
    with pytest.raises(ValueError, match="2 shards need an index"):
        write_shards(tmp_path / "bad", [[("a", "U8", (1,))], [("b", "U8", (1,))]], index=False)


def test_data_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"w: 3 bytes of data for BF16 x \[2\]"):
        write_shard(tmp_path / "x.safetensors", [("w", "BF16", (2,))], lambda *_: b"abc")
