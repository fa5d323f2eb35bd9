"""roost.checkpoint.safetensors_header: header-only reading and every way a header can be wrong."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from roost.checkpoint.safetensors_header import (
    DTYPE_BITS,
    HeaderError,
    TensorEntry,
    paused_gc,
    read_header,
    tensor_nbytes,
)
from roost.checkpoint.writer import header_bytes
from roost.errors import UserError


def _write_raw(path: Path, header: dict[str, object], data_len: int, *, pad: int = 0) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * (data_len + pad))
    return path


def test_reads_what_safetensors_writes(tmp_path: Path) -> None:
    """A file written by the safetensors library itself reads back with the same names, dtypes, shapes."""
    tensors = {
        "a": np.zeros((3, 5), dtype=np.float32),
        "b": np.zeros((7,), dtype=np.int64),
        "c": np.zeros((2, 2, 2), dtype=np.float16),
        "d": np.zeros((), dtype=np.uint8),
    }
    path = tmp_path / "x.safetensors"
    save_file(tensors, str(path), metadata={"format": "np"})
    h = read_header(path)
    assert h.metadata == {"format": "np"}
    assert set(h.tensors) == set(tensors)
    a = TensorEntry.of(h.tensors["a"])
    assert a == TensorEntry("F32", (3, 5), a.begin, a.begin + 60)
    assert h.tensors["b"].dtype == "I64" and h.tensors["c"].dtype == "F16" and h.tensors["d"].shape == []
    assert h.data_offset + sum(h.sizes) == h.file_size == path.stat().st_size
    # dtypes and sizes are aligned with the header's order (safetensors orders by dtype size, then name)
    assert dict(zip(h.tensors, zip(h.dtypes, h.sizes, strict=True), strict=True)) == {
        "a": ("F32", 60), "b": ("I64", 56), "c": ("F16", 16), "d": ("U8", 1)}


def test_header_bytes_roundtrip_and_padding(tmp_path: Path) -> None:
    specs = [("w", "BF16", (4, 8)), ("s", "F8_E4M3", (4, 1)), ("p", "U8", (4, 4)), ("f4", "F4", (3, 2))]
    head, data_len = header_bytes(specs, {"format": "pt"})
    assert (len(head) - 8) % 8 == 0
    assert data_len == 64 + 4 + 16 + 3
    path = tmp_path / "r.safetensors"
    path.write_bytes(head + b"\0" * data_len)
    h = read_header(path)
    assert list(h.tensors) == ["w", "s", "p", "f4"]
    assert h.sizes == [64, 4, 16, 3]


def test_dtype_table_covers_safetensors_dtypes() -> None:
    for dtype in ("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"):
        assert dtype in DTYPE_BITS
    assert tensor_nbytes("F4", (3, 3)) == -1  # 9 nibbles: not a whole byte count
    assert tensor_nbytes("BF16", (2, 3)) == 12


def test_empty_header_is_valid(tmp_path: Path) -> None:
    h = read_header(_write_raw(tmp_path / "e.safetensors", {}, 0))
    assert h.tensors == {} and h.sizes == [] and h.data_offset == h.file_size


@pytest.mark.parametrize(
    ("header", "data_len", "pad", "match"),
    [
        ({"t": {"dtype": "X9", "shape": [2], "data_offsets": [0, 2]}}, 2, 0, r"unknown dtype 'X9'"),
        ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}}, 8, 0, r"run past the data section"),
        ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, 4, 0, r"spans 4 bytes but F32 x \[2\] needs 8"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
          "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, 6, 0, r"overlaps"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
          "b": {"dtype": "U8", "shape": [4], "data_offsets": [6, 10]}}, 10, 0, r"2-byte gap before tensor 'b'"),
        ({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, 4, 3, r"3 trailing bytes"),
        ({"t": {"dtype": "U8", "shape": [-2, -2], "data_offsets": [0, 4]}}, 4, 0, r"negative dimension"),
        ({"t": {"dtype": "U8", "shape": [2.0, 2], "data_offsets": [0, 4]}}, 4, 0, r"non-integer"),
        ({"t": {"dtype": "U8", "shape": [4], "data_offsets": [4, 0]}}, 4, 0, r"invalid data_offsets"),
        ({"t": {"dtype": "U8", "shape": [4]}}, 4, 0, r"lacks dtype/shape/data_offsets"),
        ({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}, 1, 0, r"not a whole byte count"),
        ({"__metadata__": {"k": 1}}, 0, 0, r"__metadata__ must map strings to strings"),
        ({"t": {"dtype": "U8", "shape": [True, 4], "data_offsets": [0, 4]}}, 4, 0, r"non-integer or negative dimension"),
        ({"t": {"dtype": "U8", "shape": [4], "data_offsets": [0.0, 4]}}, 4, 0, r"invalid data_offsets \[0.0, 4\]"),
        ({"t": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4, 8]}}, 8, 0, r"lacks dtype/shape/data_offsets"),
    ],
)
def test_inconsistent_headers_are_named(tmp_path: Path, header: dict[str, object], data_len: int, pad: int, match: str) -> None:
    path = _write_raw(tmp_path / "bad.safetensors", header, data_len, pad=pad)
    with pytest.raises(HeaderError, match=match) as exc:
        read_header(path)
    assert str(path) in str(exc.value)
    assert isinstance(exc.value, UserError) and exc.value.exit_code == 2


ENTRIES = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
           "b": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [4, 16]}}


@pytest.mark.parametrize(
    ("raw", "metadata"),
    [
        # as safetensors writes it: metadata first (the typed decoder's route)
        (b'{"__metadata__":{"format":"pt"},' + json.dumps(ENTRIES).encode()[1:], {"format": "pt"}),
        # spaces and a metadata object alone
        (b'{ "__metadata__" : { } , ' + json.dumps(ENTRIES).encode()[1:], {}),
        # metadata last, or with braces inside its strings: orjson's route, the same answer
        (json.dumps({**ENTRIES, "__metadata__": {"format": "pt"}}).encode(), {"format": "pt"}),
        (json.dumps({"__metadata__": {"note": "{a} }"}, **ENTRIES}).encode(), {"note": "{a} }"}),
        (json.dumps({"a": ENTRIES["a"], "__metadata__": {"k": "v"}, "b": ENTRIES["b"]}).encode(), {"k": "v"}),
    ],
)
def test_metadata_anywhere_reads_the_same(tmp_path: Path, raw: bytes, metadata: dict[str, str]) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 16)
    h = read_header(path)
    assert h.metadata == metadata
    assert list(h.tensors) == ["a", "b"] and h.sizes == [4, 12] and h.dtypes == ["U8", "BF16"]
    assert TensorEntry.of(h.tensors["b"]) == TensorEntry("BF16", (2, 3), 4, 16)


def test_metadata_without_its_comma_is_not_json(tmp_path: Path) -> None:
    """The cut before the typed decode must not repair a header safetensors would refuse."""
    raw = b'{"__metadata__":{"format":"pt"} "a":' + json.dumps(ENTRIES["a"]).encode() + b"}"
    path = tmp_path / "c.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    with pytest.raises(HeaderError, match="not valid JSON"):
        read_header(path)


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(b"\x10\x00\x00")
    with pytest.raises(HeaderError, match="truncated"):
        read_header(path)


def test_truncated_data_section(tmp_path: Path) -> None:
    """A download cut short: the header is intact but the data ends early."""
    head, data_len = header_bytes([("w", "BF16", (64, 64))])
    path = tmp_path / "cut.safetensors"
    path.write_bytes(head + b"\0" * (data_len - 100))
    with pytest.raises(HeaderError, match=r"run past the data section.*truncated"):
        read_header(path)


def test_header_length_larger_than_file(tmp_path: Path) -> None:
    path = tmp_path / "l.safetensors"
    path.write_bytes((10_000).to_bytes(8, "little") + b'{"a": 1}')
    with pytest.raises(HeaderError, match=r"header length 10,000 is larger than the file allows \(8 bytes"):
        read_header(path)


def test_non_json_header(tmp_path: Path) -> None:
    path = tmp_path / "j.safetensors"
    body = b"{not json at all}"
    path.write_bytes(len(body).to_bytes(8, "little") + body)
    with pytest.raises(HeaderError, match="not valid JSON at byte 1"):
        read_header(path)


def test_json_but_not_object(tmp_path: Path) -> None:
    path = tmp_path / "k.safetensors"
    body = b"[1, 2, 3]"
    path.write_bytes(len(body).to_bytes(8, "little") + body)
    with pytest.raises(HeaderError, match="not an object"):
        read_header(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HeaderError, match="file not found"):
        read_header(tmp_path / "nope.safetensors")


def test_large_header_needs_a_second_read(tmp_path: Path) -> None:
    """Headers bigger than the first read (256 KiB) are completed with a second read."""
    specs = [(f"model.layers.{i}.mlp.experts.{e}.w", "BF16", (2, 2)) for i in range(40) for e in range(256)]
    head, data_len = header_bytes(specs)
    assert len(head) > 1 << 18
    path = tmp_path / "big.safetensors"
    path.write_bytes(head)
    with open(path, "r+b") as f:
        f.truncate(len(head) + data_len)
    h = read_header(path)
    assert len(h.tensors) == 40 * 256


def test_offsets_out_of_header_order_are_valid(tmp_path: Path) -> None:
    """The spans need not come in header order: they must tile the data section once sorted."""
    header = {"b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]},
              "a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}
    h = read_header(_write_raw(tmp_path / "o.safetensors", header, 8))
    assert list(h.tensors) == ["b", "a"] and h.dtypes == ["U8", "BF16"] and h.sizes == [4, 4]


def test_paused_gc_restores_the_collector() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not re-enable what the outer one paused
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a caller that disabled it keeps it disabled
    finally:
        gc.enable()
