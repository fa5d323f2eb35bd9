"""Property-based fuzzing of the safetensors header parser (``parse_header``: pure, bytes in).

Whatever the bytes, the parser returns a validated header or raises a one-line HeaderError/UserError,
never anything else. An accepted header is exactly what an independent, slow reference validator
(``_reference`` below: orjson for "is it JSON", the standard library's pairs for repeated keys, then
safetensors' rules written out plainly) accepts, with the same tensors, sizes and metadata; and the
fast (msgspec) and the slow (orjson) paths of the parser agree. Inputs: random bytes, random JSON,
random header-shaped JSON, and valid headers written by ``roost.checkpoint.writer.header_bytes`` then
mutated (a byte flipped, a dimension changed, an offset shifted, a dtype swapped, a key repeated...).

Deterministic (``derandomize=True``, no example database): CI runs the same examples every time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.errors import assert_one_line_message

from roost.checkpoint.safetensors_header import (
    DTYPE_BITS,
    MAX_DIM,
    MAX_NDIM,
    HeaderError,
    ShardHeader,
    _fast_valid,
    _slow_parse,
    parse_header,
    tensor_nbytes,
)
from roost.checkpoint.writer import header_bytes
from roost.errors import UserError

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=600,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
WHERE = "hf://acme/m@abc/model-00001-of-00002.safetensors"
DTYPES = sorted(DTYPE_BITS)


class Refused(Exception):
    """The reference validator's refusal."""


def _reference(raw: bytes, file_size: int) -> tuple[dict[str, str], list[tuple[str, str, list[int], int, int]]]:
    """(metadata, [(name, dtype, shape, begin, end)] in header order), or Refused: safetensors' rules and
    roost's bounds, written out plainly without sharing code with the parser."""
    if not 2 <= len(raw) <= 100_000_000 or 8 + len(raw) > file_size:
        raise Refused("length")
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Refused("not JSON") from None
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            repeated.append("x")
        return dict(items)

    obj = json.loads(raw, object_pairs_hook=pairs)
    if repeated:
        raise Refused("a key twice")
    if not isinstance(obj, dict):
        raise Refused("not an object")
    metadata = obj.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise Refused("metadata")
    data_bytes = file_size - 8 - len(raw)
    out = []
    for name, e in obj.items():
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= e.keys():
            raise Refused("entry")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise Refused("dtype")
        if type(shape) is not list or len(shape) > MAX_NDIM:
            raise Refused("shape")
        if not all(type(d) is int and 0 <= d <= MAX_DIM for d in shape):
            raise Refused("dims")
        if type(offs) is not list or len(offs) != 2 or not all(type(o) is int for o in offs):
            raise Refused("offsets")
        begin, end = offs
        if not 0 <= begin <= end <= data_bytes:
            raise Refused("span")
        bits = math.prod(shape) * DTYPE_BITS[dtype]
        if bits % 8 or bits // 8 != end - begin:
            raise Refused("size")
        out.append((name, dtype, shape, begin, end))
    pos = 0
    for begin, end in sorted((b, e) for _, _, _, b, e in out):
        if begin != pos:
            raise Refused("tiling")
        pos = end
    if pos != data_bytes:
        raise Refused("tiling")
    return metadata, out


def check(raw: bytes, file_size: int) -> ShardHeader | None:
    """Parse; assert the outcome is the reference's, the error one line, the result's invariants."""
    try:
        expected = _reference(raw, file_size)
    except Refused:
        expected = None
    try:
        h = parse_header(WHERE, raw, file_size)
    except UserError as exc:  # HeaderError is one
        assert_one_line_message(exc, max_chars=2_000)
        assert expected is None, f"refused a header the reference accepts: {exc}"
        return None
    assert expected is not None, "accepted a header the reference refuses"
    metadata, entries = expected
    assert h.metadata == metadata and h.header_len == len(raw) and h.file_size == file_size
    assert h.raw == raw and h.data_offset == 8 + len(raw)
    assert list(h.tensors) == [n for n, *_ in entries]
    for (name, dtype, shape, begin, end), size, d in zip(entries, h.sizes, h.dtypes, strict=True):
        e = h.tensors[name]
        assert (e.dtype, e.shape, tuple(e.data_offsets)) == (dtype, shape, (begin, end)) and d == dtype
        assert size == end - begin == tensor_nbytes(dtype, shape)
    spans = sorted(tuple(e.data_offsets) for e in h.tensors.values())  # they tile the data section
    assert [b for b, _ in spans] == [0, *[e for _, e in spans[:-1]]][: len(spans)]
    assert (spans[-1][1] if spans else 0) == sum(h.sizes) == file_size - h.data_offset
    # the slow (orjson) path alone reaches the same verdict and the same entries
    tensors, meta = _slow_parse(WHERE, raw, file_size - 8 - len(raw))
    assert tensors == h.tensors and meta == h.metadata and _fast_valid(tensors, file_size - 8 - len(raw)) is not None
    return h


# ------------------------------------------------------------------------------------------ strategies

# Names from a small alphabet with the awkward characters (quote, backslash, newline, NUL, escape, non-ASCII)
# draw fast; the occasional arbitrary text covers the rest.
names = st.text(alphabet='ab._"\\\n\x00\x1bé€', max_size=6) | st.text(max_size=4)
json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | names)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(names, c, max_size=3),
                           max_leaves=6)
small_int = st.integers(min_value=-2, max_value=40) | st.sampled_from([2**31, 2**32, 2**62, 2**63, 2**64 - 1, 2**64, 2**70])
# Shapes: small, absurd (up to 70 dimensions of up to 2^64 - 1: element counts past a float's range and past
# str()'s 4,300 digits), or not a list of integers at all.
dims = st.one_of(
    st.lists(small_int, max_size=6),
    st.lists(st.sampled_from([2**63 - 1, 2**64 - 1, 3]), min_size=15, max_size=70),
    st.sampled_from(["", "3", {}, [1.0], [True], [None], [[2]], [-1]]),
)
entries = st.fixed_dictionaries(
    {"dtype": st.sampled_from(DTYPES) | st.sampled_from(DTYPES) | json_scalars, "shape": dims,
     "data_offsets": st.tuples(small_int, small_int).map(list) | st.lists(small_int, max_size=3) | json_values},
    optional={"extra": json_values})
header_like = st.dictionaries(names | st.sampled_from(["__metadata__", "a", "b"]), entries | json_values, max_size=4)
specs = st.lists(
    st.tuples(names, st.sampled_from(DTYPES), st.lists(st.integers(0, 6), max_size=4)),
    max_size=5, unique_by=lambda t: t[0],
).map(lambda ts: [(n, d, tuple(s)) for n, d, s in ts if tensor_nbytes(d, s) >= 0 and n != "__metadata__"])
metadata = st.none() | st.dictionaries(names, names, max_size=3)


def valid_header(spec: list[tuple[str, str, tuple[int, ...]]], meta: dict[str, str] | None) -> tuple[bytes, int]:
    """(header JSON bytes, file size) as roost's writer lays them out."""
    head, data = header_bytes(spec, meta)
    return head[8:], len(head) + data


# ---------------------------------------------------------------------------------------- properties


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 1 << 12))
def test_random_bytes(raw: bytes, data: int) -> None:
    check(raw, 8 + len(raw) + data)


@settings(FUZZ, max_examples=300)
@given(json_values, st.integers(0, 64))
def test_random_json(value: Any, data: int) -> None:
    raw = json.dumps(value).encode()
    check(raw, 8 + len(raw) + data)


@settings(FUZZ, max_examples=1500)
@given(header_like, st.integers(0, 96), st.booleans())
def test_header_shaped_json(obj: dict[str, Any], data: int, sort: bool) -> None:
    raw = json.dumps(obj, sort_keys=sort).encode()
    check(raw, 8 + len(raw) + data)


@settings(FUZZ, max_examples=600)
@given(st.sampled_from(DTYPES),
       st.integers(0, 70).flatmap(lambda n: st.lists(st.sampled_from([2**64 - 1, 2**63 - 1, 2**32 + 1, 3, 1]),
                                                     min_size=n, max_size=n)).map(lambda s: [*s, 0] if len(s) % 5 == 4 else s),
       st.integers(0, 64))
def test_absurd_shapes(dtype: str, shape: list[int], end: int) -> None:
    """Element counts past a float's range (``nbits / 8`` overflowed) and past str()'s 4,300 digits, on
    every dtype (sub-byte ones included): refused in one line, or accepted when they fit (a 0 dimension)."""
    raw = json.dumps({"a": {"dtype": dtype, "shape": shape, "data_offsets": [0, end]}}).encode()
    check(raw, 8 + len(raw) + end)


@settings(FUZZ, max_examples=300)
@given(specs, metadata)
def test_valid_headers_are_accepted(spec: list[tuple[str, str, tuple[int, ...]]], meta: dict[str, str] | None) -> None:
    raw, size = valid_header(spec, meta)
    h = check(raw, size)
    assert h is not None
    assert [(n, e.dtype, tuple(e.shape)) for n, e in h.tensors.items()] == spec
    assert h.metadata == (meta or {})


def _flip(raw: bytes, i: int, bit: int) -> bytes:
    i %= len(raw)
    return raw[:i] + bytes([raw[i] ^ (1 << bit)]) + raw[i + 1:]


def _edit_entry(raw: bytes, i: int, edit: Callable[[dict[str, Any]], None]) -> bytes:
    obj = json.loads(raw)
    names = [k for k in obj if k != "__metadata__"]
    if names:
        edit(obj[names[i % len(names)]])
    return json.dumps(obj).encode()


def _repeat_key(raw: bytes, i: int) -> bytes:
    """The header with one of its tensors (or its metadata) written twice."""
    obj = json.loads(raw)
    if not obj:
        return raw
    k = list(obj)[i % len(obj)]
    return raw.rstrip()[:-1] + b"," + json.dumps(k).encode() + b":" + json.dumps(obj[k]).encode() + b"}"


MUTATIONS: dict[str, Callable[[bytes, int, int, Any], bytes]] = {
    "flip a bit": lambda raw, i, k, v: _flip(raw, i, k % 8),
    "drop a byte": lambda raw, i, k, v: raw[: i % len(raw)] + raw[i % len(raw) + 1:],
    "truncate": lambda raw, i, k, v: raw[: i % len(raw)],
    "change a dimension": lambda raw, i, k, v: _edit_entry(
        raw, i, lambda e: e["shape"].__setitem__(k % len(e["shape"]), v) if e["shape"] else e.__setitem__("shape", [v])),
    "add a dimension": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e["shape"].append(v)),
    "shift an offset": lambda raw, i, k, v: _edit_entry(
        raw, i, lambda e: e["data_offsets"].__setitem__(k % 2, e["data_offsets"][k % 2] + (v if type(v) is int else 1))),
    "offsets of another arity": lambda raw, i, k, v: _edit_entry(
        raw, i, lambda e: e.__setitem__("data_offsets", e["data_offsets"][: k % 2] + [v] * (k % 3))),
    "offsets of another type": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e.__setitem__("data_offsets", v)),
    "swap the dtype": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e.__setitem__("dtype", DTYPES[k % len(DTYPES)])),
    "dtype of another type": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e.__setitem__("dtype", v)),
    "shape of another type": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e.__setitem__("shape", v)),
    "scalar shape as a string": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e.__setitem__("shape", "")),
    "drop a field": lambda raw, i, k, v: _edit_entry(raw, i, lambda e: e.pop(["dtype", "shape", "data_offsets"][k % 3])),
    "repeat a key": lambda raw, i, k, v: _repeat_key(raw, i),
    "repeat a field": lambda raw, i, k, v: raw.replace(b'"dtype":', b'"dtype":"F32","dtype":', 1),
    "metadata last": lambda raw, i, k, v: json.dumps(
        {**{n: e for n, e in json.loads(raw).items() if n != "__metadata__"}, "__metadata__": {"format": "pt"}}).encode(),
    "metadata of another type": lambda raw, i, k, v: json.dumps({**json.loads(raw), "__metadata__": v}).encode(),
    "escape a key": lambda raw, i, k, v: raw.replace(b'"dtype"', b'"\\u0064type"', 1 + k % 2),
    "an extra field of raw bytes": lambda raw, i, k, v: raw.replace(
        b'"dtype":', b'"x' + bytes([128 + k]) + b'":"' + bytes([192 + k % 64]) + b'","dtype":', 1),
}


@settings(FUZZ, max_examples=2500)
@given(st.sampled_from(sorted(MUTATIONS)), specs.filter(bool), metadata, st.integers(0, 10_000), st.integers(0, 64),
       json_scalars | st.sampled_from([2**62, 2**63, 2**64, -1, 0, 1]), st.integers(-3, 3))
def test_mutated_valid_headers(mutation: str, spec: list[tuple[str, str, tuple[int, ...]]], meta: dict[str, str] | None,
                               i: int, k: int, v: Any, size_delta: int) -> None:
    raw, size = valid_header(spec, meta)
    mutated = MUTATIONS[mutation](raw, i, k, v)
    assume(mutated)
    check(mutated, size + (len(mutated) - len(raw)) + size_delta)


# ------------------------------------------------------------------------- named cases (found by hand)


@pytest.mark.parametrize("metadata_first", [True, False])
def test_an_empty_string_shape_is_never_a_scalar(metadata_first: bool) -> None:
    """``shape: ""`` iterates as no dimensions (a scalar) if only its length is looked at: both paths refuse it."""
    entry = {"dtype": "F32", "shape": "", "data_offsets": [0, 4]}
    obj = {"__metadata__": {"format": "pt"}, "a": entry} if metadata_first else {"a": entry, "__metadata__": {}}
    raw = json.dumps(obj).encode()
    with pytest.raises(HeaderError, match=r"tensor 'a' shape '' is not a list") as e:
        parse_header(WHERE, raw, 8 + len(raw) + 4)
    assert_one_line_message(e.value, max_chars=2_000)
    with pytest.raises(HeaderError, match=r"shape '' is not a list"):
        _slow_parse(WHERE, raw, 4)


@pytest.mark.parametrize(("dtype", "shape", "needs"), [
    ("F4", [2**62 - 1, 2**62 - 1], r"needs about 2\^12\d bits \(not a whole byte count\)"),
    ("F4", [2**63 - 1] * 20, r"needs about 2\^12\d\d bits \(not a whole byte count\)"),  # nbits / 8 overflows a float
    ("F32", [2**63 - 1] * 64, r"needs about 2\^40\d\d bytes"),  # > 4,300 digits: str() would refuse it
])
def test_absurd_shapes_make_a_short_message(dtype: str, shape: list[int], needs: str) -> None:
    raw = json.dumps({"a": {"dtype": dtype, "shape": shape, "data_offsets": [0, 4]}}).encode()
    with pytest.raises(HeaderError, match=needs) as e:
        parse_header(WHERE, raw, 8 + len(raw) + 4)
    assert_one_line_message(e.value, max_chars=2_000)


@pytest.mark.parametrize(("obj", "match"), [
    ({"a": {"dtype": "F32", "shape": [1] * (MAX_NDIM + 1), "data_offsets": [0, 4]}}, r"has 65 dimensions, more than 64"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, r"lacks dtype/shape/data_offsets"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": "04"}}, r"invalid data_offsets \['0', '4'\]"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}}, r"invalid data_offsets \[0, 4\.0\]"),
    ({"a\nb\x1b[31m": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}, r"tensor 'a\\nb\\x1b\[31m' has unknown"),
])
def test_malformed_entries_are_named(obj: dict[str, Any], match: str) -> None:
    raw = json.dumps(obj).encode()
    with pytest.raises(HeaderError, match=match) as e:
        parse_header(WHERE, raw, 8 + len(raw) + 4)
    assert_one_line_message(e.value, max_chars=2_000)


def test_a_tensor_declared_twice_is_refused() -> None:
    """JSON parsers keep the last of two equal keys silently; which declaration counts is ambiguous."""
    e = b'{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    raw = b'{"a":' + e + b',"a":' + e + b"}"
    with pytest.raises(HeaderError, match=r"key 'a' appears twice in one object of the header"):
        parse_header(WHERE, raw, 8 + len(raw) + 4)
    raw = b'{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    with pytest.raises(HeaderError, match=r"key 'dtype' appears twice"):
        parse_header(WHERE, raw, 8 + len(raw) + 4)
    raw = b'{"__metadata__":{"format":"pt"},"a":' + e + b',"__metadata__":{"format":"np"}}'
    with pytest.raises(HeaderError, match=r"key '__metadata__' appears twice"):
        parse_header(WHERE, raw, 8 + len(raw) + 4)


@pytest.mark.parametrize(("raw", "file_size", "match"), [
    (b"{}", 9, r"a 2-byte header in a 9-byte file"),
    (b"{" + b" " * 100_000_000 + b"}", 200_000_000, r"a 100,000,002-byte header"),
    # msgspec raises RecursionError (not its DecodeError) on deep nesting; orjson refuses it by depth
    (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
     200_100, r"header is not valid JSON"),
])
def test_header_lengths_and_depth(raw: bytes, file_size: int, match: str) -> None:
    with pytest.raises(HeaderError, match=match):
        parse_header(WHERE, raw, file_size)
