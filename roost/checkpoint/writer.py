"""Write safetensors checkpoints: headers, BF16 data, shards and the sharded index (the one writer).

``roost.demo.model`` writes the demo model ``roost run`` serves with it; the test replicas
(``tests/support/replicas.py``) write header-exact copies of real checkpoints with it. What it
writes is what ``safetensors`` and ``save_pretrained`` write:

- a shard is ``<u64 little-endian N><N bytes of JSON header><data>``; the header is compact JSON,
  ``__metadata__`` first, tensors in data order, space-padded to a multiple of 8 bytes;
- several shards are ``model-00001-of-0000N.safetensors`` ... with ``model.safetensors.index.json``
  (``{"metadata": {"total_size": ...}, "weight_map": {...}}``, sorted, two-space indent); a single
  one is ``model.safetensors`` without an index unless asked for.

Data comes from a callback per tensor; without one a shard's data section is a sparse hole
(``truncate``), so a 70 GB checkpoint's headers cost a few MB of disk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from roost.checkpoint.safetensors_header import INDEX_NAME, SINGLE_FILE_NAME, tensor_nbytes

TensorSpec = tuple[str, str, tuple[int, ...]]
"""One tensor as a header declares it: (name, safetensors dtype, shape)."""
TensorData = Callable[[str, str, tuple[int, ...]], bytes]
"""The raw little-endian bytes of one tensor, given its name, dtype and shape (called in data order)."""


def header_bytes(tensors: Sequence[TensorSpec], metadata: Mapping[str, str] | None = None) -> tuple[bytes, int]:
    """The length prefix + header for ``tensors`` laid out in order; returns (those bytes, data bytes)."""
    obj: dict[str, Any] = {}
    if metadata is not None:
        obj["__metadata__"] = dict(metadata)
    pos = 0
    for name, dtype, shape in tensors:
        n = tensor_nbytes(dtype, shape)
        if n < 0:
            raise ValueError(f"{name}: {dtype} x {list(shape)} is not a whole number of bytes")
        obj[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(obj, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw, pos


def to_bf16_bytes(values: npt.ArrayLike) -> bytes:
    """float32 -> bfloat16 (round to nearest even), little-endian bytes."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").tobytes()


def shard_file_name(i: int, n: int) -> str:
    """``model-0000i-of-0000n.safetensors`` (1-based), as ``save_pretrained`` names shards."""
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def write_shard(
    path: Path,
    tensors: Sequence[TensorSpec],
    data: TensorData | None = None,
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Write one ``.safetensors`` file; return its data bytes. ``data=None`` leaves a sparse hole.

    ``metadata`` defaults to ``{"format": "pt"}``, what PyTorch exports carry.
    """
    head, size = header_bytes(tensors, {"format": "pt"} if metadata is None else metadata)
    with open(path, "wb") as f:
        f.write(head)
        if data is None:
            f.truncate(len(head) + size)
            return size
        for name, dtype, shape in tensors:
            chunk = data(name, dtype, shape)
            if len(chunk) != tensor_nbytes(dtype, shape):
                raise ValueError(f"{name}: {len(chunk)} bytes of data for {dtype} x {list(shape)}")
            f.write(chunk)
    return size


def write_index(out_dir: Path, weight_map: Mapping[str, str], total_size: int) -> Path:
    """Write ``model.safetensors.index.json`` (sorted, as ``save_pretrained`` writes it)."""
    index = {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
    path = out_dir / INDEX_NAME
    path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return path


def write_shards(
    out_dir: Path,
    shards: Sequence[Sequence[TensorSpec]],
    data: TensorData | None = None,
    *,
    index: bool | None = None,
) -> dict[str, str]:
    """Write ``shards`` (tensors in order, already split) under ``out_dir``; return the weight map.

    ``index=None``: an index only for more than one shard (one shard is ``model.safetensors``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    n = len(shards)
    with_index = n > 1 if index is None else index
    if n > 1 and not with_index:
        raise ValueError(f"{n} shards need an index")
    weight_map: dict[str, str] = {}
    total = 0
    for i, tensors in enumerate(shards, start=1):
        fname = shard_file_name(i, n) if with_index else SINGLE_FILE_NAME
        total += write_shard(out_dir / fname, tensors, data)
        weight_map.update(dict.fromkeys((name for name, _, _ in tensors), fname))
    if with_index:
        write_index(out_dir, weight_map, total)
    return weight_map
