"""Read and validate safetensors headers without touching tensor data.

A safetensors file is ``<u64 little-endian N><N bytes of JSON header><data section>``. The header maps
tensor names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the data
section) plus an optional ``__metadata__`` object of string -> string.

One ``pread`` per file covers the length prefix and (almost always) the whole header. ``msgspec``
decodes it straight into typed entries (:class:`RawEntry`: a ``str`` dtype, a ``list[int]`` shape,
two ``int`` offsets, checked in C while parsing, and untracked by the cyclic garbage collector), which
leaves the checks below a few C-level passes; this is 30-40% faster than ``orjson`` into dicts plus
the same checks on the 31,666-tensor replica (``benchmarks/bench_audit.py``). A header the typed
decoder refuses (malformed, or ``__metadata__`` somewhere other than first, where every safetensors
writer puts it) is parsed again by ``orjson`` and walked entry by entry, which names the problem.
Validation mirrors what ``safetensors`` itself enforces, and then some: the length fits the file,
every dtype is known, every span lies inside the data section, ``end - begin`` equals the tensor's
byte size (sub-byte dtypes included), and the spans tile the data section with no overlap and no gap.
Beyond safetensors: at most ``MAX_NDIM`` dimensions of at most ``MAX_DIM`` each (the element count's
arithmetic stays small), and no key twice in one object (the JSON parsers keep the last silently; a
tensor declared twice is ambiguous). Every message echoes outside values through
:func:`roost.inputs.text.shown` and formats sizes as integers (never a float that could overflow).
Any violation is a :class:`HeaderError` naming the file and the tensor (exit 2).

Writing headers (and shards) is :mod:`roost.checkpoint.writer`'s job.
"""

from __future__ import annotations

import gc
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, repeat
from math import prod
from operator import attrgetter, mul, sub
from pathlib import Path
from typing import Any

import msgspec
import orjson

from roost.errors import UserError
from roost.inputs.files import kind_of
from roost.inputs.text import shown

# Bits per element for every dtype safetensors can store (safetensors 0.8 Dtype enum).
# Sub-byte formats (F4 = FP4 E2M1, F6_*) are packed; ModelOpt NVFP4 checkpoints instead store their
# packed weights as U8 with the last dimension halved, so the header's U8 span already counts real bytes.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

# Floating dtypes whose tensors are model weights in the usual sense (used for dtype consistency).
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})

# Bytes per element for the dtypes that fill whole bytes (the fast path compares byte counts directly).
_WHOLE_BYTES: dict[str, int] = {d: b // 8 for d, b in DTYPE_BITS.items() if b % 8 == 0}

_OFFSETS, _SHAPE, _DTYPE = attrgetter("data_offsets"), attrgetter("shape"), attrgetter("dtype")

# safetensors refuses headers above 100 MB; a larger declared length means a corrupt or foreign file.
MAX_HEADER_BYTES = 100_000_000
# The file names a sharded checkpoint's index and a single-file checkpoint carry (transformers' names).
INDEX_NAME = "model.safetensors.index.json"
SINGLE_FILE_NAME = "model.safetensors"
# First read: the length prefix plus this much header. Bigger headers take one more read.
_FIRST_READ = 1 << 18
# Dimensions of one tensor: numpy's limit (NPY_MAXDIMS, 64); model weights have at most 5.
MAX_NDIM = 64
# Largest dimension: safetensors stores them as u64.
MAX_DIM = (1 << 64) - 1


class HeaderError(UserError):
    """A safetensors file whose header cannot be trusted (truncated, corrupt, inconsistent)."""


class RawEntry(msgspec.Struct, frozen=True, gc=False):
    """One tensor exactly as the JSON header declares it (offsets relative to the data section).

    ``gc=False``: its fields (a string, a list of ints, a pair of ints) can never form a cycle.
    """

    dtype: str
    shape: list[int]
    data_offsets: tuple[int, int]


_DECODE_HEADER = msgspec.json.Decoder(dict[str, RawEntry])
# ``{"__metadata__": {<string: string, ...>},`` at the start of the header, as safetensors writes it:
# cut out before the typed decode (its values are not tensors). A ``{`` or ``}`` inside its strings
# makes the cut fail or the JSON invalid, and the header then takes the orjson path.
_LEADING_METADATA = re.compile(rb'\{\s*"__metadata__"\s*:\s*(\{[^{}]*\})\s*(,?)')


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor as the header declares it. ``begin``/``end`` are relative to the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @classmethod
    def of(cls, raw: RawEntry) -> TensorEntry:
        b, e = raw.data_offsets
        return cls(raw.dtype, tuple(raw.shape), b, e)


@dataclass(frozen=True, slots=True)
class ShardHeader:
    """A validated header: where the file is, what it holds, how big each part is.

    ``dtypes`` and ``sizes`` are aligned with ``tensors`` (header order): validation computes them
    anyway, and the audit reads them as lists.
    """

    path: Path | str  # a local file, or hf://OWNER/NAME@COMMIT/FILE for a header read over HTTP
    file_size: int
    header_len: int
    metadata: dict[str, str]
    tensors: dict[str, RawEntry]  # validated entries, in header order
    dtypes: list[str]  # dtype of each tensor
    sizes: list[int]  # byte span of each tensor
    raw: bytes  # the header's JSON exactly as stored (a preflight's header is compared with the download's)

    @property
    def data_offset(self) -> int:
        """Absolute file offset of the data section (where ``data_offsets`` count from)."""
        return 8 + self.header_len


def tensor_nbytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int:
    """Bytes a tensor of ``dtype`` and ``shape`` occupies on disk; -1 when sub-byte elements don't fill whole bytes."""
    n = 1
    for d in shape:
        n *= d
    bits = n * DTYPE_BITS[dtype]
    return bits // 8 if bits % 8 == 0 else -1


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (restored as it was on exit), for bulk allocations without cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_header(path: Path) -> ShardHeader:
    """Read and validate the header of one ``.safetensors`` file (never its data)."""
    where = shown(str(path))
    try:  # O_NONBLOCK: a FIFO in a shard's place opens at once (and is refused below) instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise HeaderError(f"{where}: file not found") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a valid path"
        raise HeaderError(f"{where}: cannot open ({reason})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HeaderError(f"{where} is {kind_of(st.st_mode)}, not a regular file: a shard must be a file; "
                              "re-download it")
        file_size = st.st_size
        head = os.pread(fd, _FIRST_READ, 0)
        header_len = header_length(path, head, file_size, "re-download it")
        raw = head[8 : 8 + header_len]
        if len(raw) < header_len:
            raw += os.pread(fd, header_len - len(raw), 8 + len(raw))
        if len(raw) < header_len:
            raise HeaderError(f"{where}: truncated while reading its {header_len:,}-byte header; re-download it")
    finally:
        os.close(fd)
    return parse_header(path, raw, file_size)


def header_length(where: Path | str, prefix: bytes, file_size: int, remedy: str) -> int:
    """The header length the file's first 8 bytes declare, checked against the file's size and
    safetensors' limits (a HeaderError naming ``where`` and ending with ``remedy`` otherwise)."""
    at = shown(str(where))
    if file_size < 8 or len(prefix) < 8:
        raise HeaderError(f"{at}: truncated: {file_size} bytes, shorter than the 8-byte header length; {remedy}")
    n = int.from_bytes(prefix[:8], "little")
    if n > file_size - 8:
        raise HeaderError(
            f"{at}: header length {n:,} is larger than the file allows ({file_size - 8:,} bytes after the "
            f"length prefix); the file is truncated or not safetensors — {remedy}"
        )
    if n > MAX_HEADER_BYTES:
        raise HeaderError(f"{at}: header length {n:,} exceeds safetensors' 100 MB limit; not a safetensors file")
    if n < 2:
        raise HeaderError(f"{at}: header length {n} is too small to hold a JSON object")
    return n


def parse_header(path: Path | str, raw: bytes, file_size: int) -> ShardHeader:
    """Validate an already-read header (``raw`` = the JSON bytes) against the file size.

    The fast path decodes typed entries and checks them all with C-level passes; when the decoder or
    a check refuses, the slow path parses the JSON again and walks the tensors one by one: it names
    the culprit, or accepts a valid header the fast path could not take (metadata not first).
    """
    where = shown(str(path))
    if not 2 <= len(raw) <= MAX_HEADER_BYTES or 8 + len(raw) > file_size:
        raise HeaderError(f"{where}: a {len(raw):,}-byte header in a {file_size:,}-byte file; "
                          "the file is truncated or not safetensors — re-download it")
    data_bytes = file_size - 8 - len(raw)
    fast = _fast_parse(raw)
    valid: tuple[list[str], list[int]] | None = None
    quotes = -1
    if fast is not None:
        tensors, metadata, quotes = fast
        valid = _fast_valid(tensors, data_bytes)
    slow = valid is None
    if valid is None:
        tensors, metadata = _slow_parse(where, raw, data_bytes)
        valid = _fast_valid(tensors, data_bytes)
        if valid is None:  # pragma: no cover - the slow walk accepted it, so the passes do too
            raise HeaderError(f"{where}: header failed validation")
    if slow or raw.count(b'"') != quotes:
        key = _repeated_key(raw)
        if key is not None:
            raise HeaderError(f"{where}: key {shown(repr(key))} appears twice in one object of the header; "
                              "which one counts is ambiguous — the file is corrupt, re-download it")
    return _shard(path, raw, file_size, metadata, tensors, *valid)


def _quotes(n_tensors: int, metadata: dict[str, str], metadata_first: bool) -> int:
    """The ``"`` characters a header the fast path decoded holds when no key appears twice in any object.

    Every JSON string has two; the decoded entries need five strings each (the name, ``"dtype"``, its
    value, ``"shape"``, ``"data_offsets"``: the dimensions and offsets are integers) and the leading
    metadata ``1 + 2m``. Anything more in the bytes (a key written twice, an extra field, an escaped
    quote in a name) adds quotes, and nothing can take any away: one C-level count decides whether the
    exact check (:func:`_repeated_key`, the standard library's pairs) has to run.
    """
    return 10 * n_tensors + (2 + 4 * len(metadata) if metadata_first else 0)


def _repeated_key(raw: bytes) -> str | None:
    """The first key found twice in one object of the header (the standard library's parser sees pairs)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if not found:
            seen: set[str] = set()
            for k, _ in items:
                if k in seen:
                    found.append(k)
                    break
                seen.add(k)
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except (ValueError, RecursionError):  # orjson accepted it; the standard library's limits differ
        return None
    return found[0] if found else None


def _shard(path: Path | str, raw: bytes, file_size: int, metadata: dict[str, str], tensors: dict[str, RawEntry],
           dtypes: list[str], sizes: list[int]) -> ShardHeader:
    return ShardHeader(path=path, file_size=file_size, header_len=len(raw), metadata=metadata, tensors=tensors,
                       dtypes=dtypes, sizes=sizes, raw=raw)


def is_utf8(raw: bytes) -> bool:
    """Whether ``raw`` is valid UTF-8 (msgspec skips unknown fields without checking their bytes)."""
    if raw.isascii():
        return True
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _fast_parse(raw: bytes) -> tuple[dict[str, RawEntry], dict[str, str], int] | None:
    """Typed entries, metadata and the ``"`` count the header holds if no key is repeated (:func:`_quotes`),
    or None when the typed decoder refuses the header."""
    if not is_utf8(raw):
        return None
    metadata: dict[str, str] = {}
    body = raw
    m = _LEADING_METADATA.match(raw)
    if m is not None:
        if not m.group(2) and raw[m.end():].strip() != b"}":  # no comma, yet more follows: malformed
            return None
        try:
            parsed = orjson.loads(m.group(1))
        except orjson.JSONDecodeError:
            return None
        if not all(type(v) is str for v in parsed.values()):
            return None
        metadata, body = parsed, b"{" + raw[m.end():]
    try:
        with paused_gc():
            tensors = _DECODE_HEADER.decode(body)
    except (msgspec.MsgspecError, RecursionError):
        return None
    if "__metadata__" in tensors:  # a second __metadata__, or one shaped like a tensor: the slow path names it
        return None
    return tensors, metadata, _quotes(len(tensors), metadata, m is not None)


def _slow_parse(path: str, raw: bytes, data_bytes: int) -> tuple[dict[str, RawEntry], dict[str, str]]:
    """Parse with orjson, walk every entry (raising a HeaderError naming the first problem) and
    return the typed entries and the metadata. ``path`` is already :func:`shown`."""
    try:
        with paused_gc():
            obj = orjson.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at byte {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
        raise HeaderError(f"{path}: header is not valid JSON{where}; the file is corrupt or not safetensors") from None
    if not isinstance(obj, dict):
        raise HeaderError(f"{path}: header is JSON but not an object; not a safetensors file")
    metadata_obj = obj.pop("__metadata__", None)
    metadata: dict[str, str] = {}
    if metadata_obj is not None:
        if not isinstance(metadata_obj, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata_obj.items()
        ):
            raise HeaderError(f"{path}: __metadata__ must map strings to strings; the header is malformed")
        metadata = metadata_obj
    _slow_validate(path, obj, data_bytes)
    tensors = {name: RawEntry(e["dtype"], e["shape"], tuple(e["data_offsets"])) for name, e in obj.items()}
    return tensors, metadata


def _fast_valid(tensors: dict[str, RawEntry], data_bytes: int) -> tuple[list[str], list[int]] | None:
    """Each tensor's dtype and byte span when every entry is well-formed and the spans tile the data
    section; else None (the slow path then names the problem).

    The decoder has checked the types (every offset and dimension an int, two offsets); every pass
    here is a C-level ``map``: dimensions are non-negative, sizes (prod(shape) x dtype bytes, or bits
    for sub-byte dtypes) equal the spans exactly, and the [begin, end] pairs read 0, e0=b1, e1=b2,
    ..., data_bytes — in header order (how safetensors and roost write them) or, failing that,
    sorted by offset.
    """
    vals = list(tensors.values())
    if not vals:
        return ([], []) if data_bytes == 0 else None
    try:
        dtypes = list(map(_DTYPE, vals))
        shapes = list(map(_SHAPE, vals))
        offs = list(map(_OFFSETS, vals))
        if max(map(len, shapes)) > MAX_NDIM:
            return None
        dims = list(chain.from_iterable(shapes))
        if dims and (min(dims) < 0 or max(dims) > MAX_DIM):
            return None
        flat = list(chain.from_iterable(offs))
        begins, ends = flat[0::2], flat[1::2]
        spans = list(map(sub, ends, begins))
        elements = map(prod, shapes)
        if set(dtypes) <= _WHOLE_BYTES.keys():
            if list(map(mul, elements, map(_WHOLE_BYTES.__getitem__, dtypes))) != spans:
                return None
        elif list(map(mul, elements, map(DTYPE_BITS.__getitem__, dtypes))) != list(map(mul, spans, repeat(8))):
            return None
    except KeyError:  # an unknown dtype
        return None
    # spans equal sizes of non-negative dimensions, so they are >= 0: chained pairs tile the section
    if begins[0] == 0 and ends[-1] == data_bytes and begins[1:] == ends[:-1]:
        return dtypes, spans
    ordered = list(chain.from_iterable(sorted(offs)))
    tiled = ordered[0] == 0 and ordered[-1] == data_bytes and ordered[1:-1:2] == ordered[2::2]
    return (dtypes, spans) if tiled else None


def _r(value: object) -> str:
    """An outside value as a message echoes it: its repr, on one line, cut when long."""
    return shown(repr(value))


def _amount(n: int) -> str:
    """An integer as a message prints it: with thousands separators, or its order of magnitude when huge
    (a 64-dimension shape's element count has ~1,200 digits)."""
    return f"{n:,}" if n.bit_length() <= 100 else f"about 2^{n.bit_length() - 1}"


def _slow_validate(path: str, obj: dict[str, Any], data_bytes: int) -> None:
    """Walk the entries one by one and raise a HeaderError naming the first problem."""
    bits_of = DTYPE_BITS
    spans: list[tuple[int, int, str]] = []
    for name, info in obj.items():
        try:
            dtype = info["dtype"]
            shape = info["shape"]
            begin, end = info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise HeaderError(
                f"{path}: tensor {_r(name)} lacks dtype/shape/data_offsets [begin, end]; the header is malformed"
            ) from None
        bits = bits_of.get(dtype) if isinstance(dtype, str) else None
        if bits is None:
            known = ", ".join(sorted(bits_of))
            raise HeaderError(f"{path}: tensor {_r(name)} has unknown dtype {_r(dtype)} (known: {known})")
        if type(begin) is not int or type(end) is not int or begin < 0 or end < begin:
            raise HeaderError(f"{path}: tensor {_r(name)} has invalid data_offsets {_r([begin, end])}; "
                              "the header is malformed")
        if end > data_bytes:
            raise HeaderError(
                f"{path}: tensor {_r(name)} data_offsets [{_amount(begin)}, {_amount(end)}] run past the data "
                f"section ({data_bytes:,} bytes); the file is truncated — re-download it"
            )
        if type(shape) is not list:
            raise HeaderError(f"{path}: tensor {_r(name)} shape {_r(shape)} is not a list; the header is malformed")
        if len(shape) > MAX_NDIM:
            raise HeaderError(f"{path}: tensor {_r(name)} has {len(shape):,} dimensions, more than {MAX_NDIM}; "
                              "the header is corrupt")
        n = 1
        for d in shape:
            if type(d) is not int or d < 0:
                raise HeaderError(f"{path}: tensor {_r(name)} shape {_r(shape)} has a non-integer or negative "
                                  "dimension; the header is malformed")
            if d > MAX_DIM:
                raise HeaderError(f"{path}: tensor {_r(name)} shape {_r(shape)} has a dimension beyond 2^64; "
                                  "the header is corrupt")
            n *= d
        nbits = n * bits
        if nbits % 8 or nbits // 8 != end - begin:
            expected = f"{_amount(nbits // 8)} bytes" if nbits % 8 == 0 else f"{_amount(nbits)} bits (not a whole byte count)"
            raise HeaderError(
                f"{path}: tensor {_r(name)} spans {end - begin:,} bytes but {dtype} x {_r(shape)} needs {expected}"
            )
        spans.append((begin, end, name))
    _check_tiling(path, spans, data_bytes)


def _check_tiling(path: str, spans: list[tuple[int, int, str]], data_bytes: int) -> None:
    """Spans must tile [0, data_bytes) exactly: sorted by begin, each starts where the previous ended."""
    spans.sort()
    pos = 0
    prev = "(start of data)"
    for begin, end, name in spans:
        if begin < pos:
            raise HeaderError(f"{path}: tensor {_r(name)} [{begin:,}, {end:,}) overlaps {_r(prev)} (ends at {pos:,})")
        if begin > pos:
            raise HeaderError(
                f"{path}: {begin - pos:,}-byte gap before tensor {_r(name)} at offset {pos:,} (after {_r(prev)}); "
                "the header does not describe the data section"
            )
        pos = end
        prev = name
    if pos != data_bytes:
        if pos < data_bytes:
            raise HeaderError(
                f"{path}: {data_bytes - pos:,} trailing bytes after the last tensor ({_r(prev)}); "
                "the file does not match its header"
            )
        raise HeaderError(f"{path}: tensors end at {pos:,} but the data section holds {data_bytes:,} bytes")
