"""Property-based fuzzing of the index parser (``roost.checkpoint.model.parse_index``: pure, bytes in).

Whatever the bytes of ``model.safetensors.index.json``, the parser returns a weight map whose shards
all stay inside the checkpoint directory, or raises a one-line UserError naming the index — never
another exception (msgspec's RecursionError, the standard library's 4,300-digit ValueError, a lone
surrogate reaching a print later...). An accepted index is exactly what a plain reference (orjson
for "is it JSON", then the rules written out) accepts. Inputs: random bytes, random JSON, index-shaped
JSON with hostile shard names, and real indexes (``roost.checkpoint.writer``'s) mutated.

Deterministic (``derandomize=True``, no example database).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.errors import assert_one_line_message

from roost.checkpoint.files import INDEX_LIMIT
from roost.checkpoint.model import parse_index
from roost.errors import UserError

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=400,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
WHERE = "/ckpt/model.safetensors.index.json"


def _reference(raw: bytes) -> dict[str, str] | None:
    """The weight map an index must be accepted with, or None: the rules written out plainly. JSON is
    what the standard library reads (numbers of any length, NaN: what Python's writer emits), valid UTF-8."""
    try:
        obj = json.loads(raw, parse_int=lambda s: 0)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("weight_map"), dict):
        return None
    wm = obj["weight_map"]
    try:
        "".join(map(str, [*wm, *wm.values()])).encode()
    except UnicodeEncodeError:  # a lone surrogate
        return None
    for shard in wm.values():
        if not isinstance(shard, str) or not shard or shard.startswith("/") or "\\" in shard:
            return None
        parts = shard.split("/")
        if ".." in parts or re.search(r"[\x00-\x1f\x7f]", shard):
            return None
        if all(p in ("", ".") for p in parts):  # ".", "./": the checkpoint directory itself, not a file in it
            return None
        if len(shard.encode()) > 4096 or any(len(p.encode()) > 255 for p in parts):
            return None
    return wm


def check(raw: bytes) -> tuple[dict[str, str], list[str]] | None:
    expected = _reference(raw)
    try:
        wm, shards = parse_index(raw, WHERE)
    except UserError as exc:
        assert_one_line_message(exc, max_chars=2_000, starts=WHERE)
        assert expected is None, f"refused an index the reference accepts: {exc}"
        return None
    assert expected is not None, "accepted an index the reference refuses"
    assert wm == expected and shards == sorted(set(wm.values()))
    for shard in shards:  # joined to the checkpoint directory, every shard stays inside it
        assert os.path.normpath(os.path.join("/ckpt", shard)).startswith("/ckpt/")
        shard.encode()  # printable: no lone surrogate
    "".join(wm).encode()
    return wm, shards


names = st.text(alphabet='ab._-/"\\\n\x00\x1bé€', max_size=8) | st.text(max_size=6)
hostile_shards = st.sampled_from([
    "../x.safetensors", "a/../../x.safetensors", "/etc/passwd", "a\\b.safetensors", "", ".", "./a.safetensors",
    "a\x00b.safetensors", "a\nb.safetensors", "x" * 256 + ".safetensors", "d/" * 2100 + "x", "é" * 200,
    "model-00001-of-00002.safetensors", "sub/model.safetensors", "..a.safetensors", "a..safetensors",
])
json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | names)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(names, c, max_size=3),
                           max_leaves=6)
index_like = st.fixed_dictionaries(
    {"weight_map": st.dictionaries(names, names | hostile_shards | json_scalars, max_size=5) | json_values},
    optional={"metadata": st.fixed_dictionaries({"total_size": st.integers(0, 2**70) | json_values}) | json_values,
              "other": json_values},
)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(raw: bytes) -> None:
    check(raw)


@FUZZ
@given(json_values)
def test_random_json(value: Any) -> None:
    check(json.dumps(value).encode())


@settings(FUZZ, max_examples=1500)
@given(index_like, st.booleans())
def test_index_shaped_json(obj: dict[str, Any], indent: bool) -> None:
    check(json.dumps(obj, indent=2 if indent else None).encode())


def _real_index(n: int) -> bytes:
    """An index as roost's writer (and save_pretrained) writes it."""
    wm = {f"model.layers.{i}.mlp.up_proj.weight": f"model-{i % 3 + 1:05d}-of-00003.safetensors" for i in range(n)}
    return (json.dumps({"metadata": {"total_size": 123}, "weight_map": dict(sorted(wm.items()))}, indent=2) + "\n").encode()


SPLICES = [b"../", b"/", b"\\", b"\x00", b"\\u0000", b"\\ud800", b'"', b"{", b"}", b"[", b"]", b",", b":", b"null",
           b"1e999", b"9" * 5000, b"[" * 2000, b"NaN", b"\xff", b"\\n"]


@settings(FUZZ, max_examples=1500)
@given(st.integers(1, 12), st.integers(0, 10_000), st.integers(0, 7), st.sampled_from(SPLICES),
       st.sampled_from(["flip", "insert", "replace", "truncate"]))
def test_mutated_real_indexes(n: int, i: int, bit: int, splice: bytes, how: str) -> None:
    raw = _real_index(n)
    assert check(raw) is not None
    i %= len(raw)
    mutated = {
        "flip": raw[:i] + bytes([raw[i] ^ (1 << bit)]) + raw[i + 1:],
        "insert": raw[:i] + splice + raw[i:],
        "replace": raw[:i] + splice + raw[i + len(splice):],
        "truncate": raw[:i],
    }[how]
    check(mutated)


@pytest.mark.parametrize(("raw", "match"), [
    (b'{"weight_map": {}, "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", r"not valid JSON"),
    (b'{"weight_map": {}, "metadata": {"total_size": ' + b"9" * 5000 + b"}}", None),  # msgspec skips it
    # NaN sends it past msgspec to jsondoc, whose standard-library fallback refuses 4,300+ digits: still one line
    (b'{"weight_map": {"a": "x.safetensors"}, "metadata": {"total_size": ' + b"9" * 5000 + b'}, "x": NaN}',
     r"not valid JSON"),
    (b'{"weight_map": {"\\ud800": "x.safetensors"}, "x": NaN}', r"not valid UTF-8"),
    (b'{"weight_map": {"a": "x\\u0000.safetensors"}}', r"shard 'x\\x00\.safetensors', which is not a file name"),
    (b'{"weight_map": {"a": "../../etc/x.safetensors"}}', r"a path outside the checkpoint directory"),
    (b'{"weight_map": []}', r"needs a 'weight_map' object"),
    (b'{"weight_map": {"a": 1}}', r"needs a 'weight_map' object"),
    (b"[1]", r"must be a JSON object"),
])
def test_named_cases(raw: bytes, match: str | None) -> None:
    if match is None:
        assert parse_index(raw, WHERE) == ({}, [])
        return
    with pytest.raises(UserError, match=match) as e:
        parse_index(raw, WHERE)
    assert_one_line_message(e.value, max_chars=2_000, starts=WHERE)


def test_an_index_over_the_limit_is_refused_unparsed() -> None:
    raw = b'{"weight_map": {}}' + b" " * INDEX_LIMIT
    with pytest.raises(UserError, match=r"67,108,882 bytes, more than the 67,108,864 a checkpoint's metadata file"):
        parse_index(raw, WHERE)
