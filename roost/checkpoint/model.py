"""A checkpoint as the audit sees it: config, index and shard headers read once, every tensor classified.

``read_checkpoint(path)`` reads ``config.json``, ``model.safetensors.index.json`` and every indexed
shard's header (never tensor data), from a directory or from what a Hub preflight fetched
(:mod:`roost.checkpoint.files`), and keeps the facts the checks (:mod:`roost.checkpoint.checks`)
and the plan (:mod:`roost.plan`) need: which shards the index names and which are on disk, where the
index and the shards disagree, tensor counts and bytes by class and by dtype, the classes present in
each language layer, the dtypes of each layer-relative name, the quantized modules, and the weight
bytes one decode step reads.

Per-expert checkpoints have tens of thousands of tensors whose names differ only in the expert
index. One regex pass over all names (C speed) folds that index to ``E``; a Counter over (folded
name, dtype, bytes) leaves ~1k distinct keys for 31k tensors, and only those are classified in
Python. Layer indices stay in the keys for the layer checks. The cyclic garbage collector is paused
while the ~100k small objects of the headers are built, used and freed (none holds a cycle): left
running, it would walk them again and again, and once more when it resumes if they were still alive.

Unusable input (no directory, no config, a corrupt header or index, an index naming a path outside
the directory) raises :class:`~roost.errors.UserError` (exit 2); what the audit can describe is left
to the checks. The index is parsed by :func:`parse_index` (bytes in, no I/O), the config by
:func:`roost.checkpoint.config.config_from_bytes`, each header by
:func:`roost.checkpoint.safetensors_header.parse_header`: a directory and a Hub preflight meet the
same parsers.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path, PurePosixPath
from typing import Literal

import msgspec
from pydantic import BaseModel, Field

from roost.checkpoint.config import ModelConfigInfo, config_of
from roost.checkpoint.files import INDEX_LIMIT, CheckpointFiles, LocalFiles, too_large
from roost.checkpoint.layout import (
    SCALE_ROLES,
    TENSOR_CLASSES,
    QuantKind,
    TensorClass,
    classify,
    quant_kind,
)
from roost.checkpoint.safetensors_header import (
    FLOAT_DTYPES,
    FP8_DTYPES,
    INDEX_NAME,
    RawEntry,
    ShardHeader,
    TensorEntry,
    is_utf8,
    paused_gc,
)
from roost.errors import UserError
from roost.inputs.jsondoc import parse_object
from roost.inputs.text import shown

ExpertLayout = Literal["none", "per_expert", "fused"]

_EXPERT_INDEX = re.compile(r"\.experts\.\d+\.")
_QUANT_DTYPES = frozenset({"U8", "F4", *FP8_DTYPES})


class QuantSummary(BaseModel):
    """What the config says about quantization and what the tensors on disk show."""

    method: str | None = Field(default=None, description="quantization_config.quant_method (modelopt, fp8, ...).")
    algo: str | None = Field(default=None, description="quant_algo (NVFP4, FP8, MIXED_PRECISION, ...).")
    kv_cache_quant_algo: str | None = None
    nvfp4_modules: int = 0
    fp8_modules: int = 0
    unquantized_modules: int = Field(default=0, description="Matmul weights (2-D+) stored in a float dtype.")


@dataclass(frozen=True, slots=True)
class QuantModules:
    """``count`` quantized modules stored exactly like ``name`` (its tensors by role)."""

    name: str
    kind: QuantKind
    roles: dict[str, TensorEntry]
    count: int


@dataclass(frozen=True, slots=True)
class TensorStats:
    """What the tensors of a checkpoint are, summed by class, dtype and layer."""

    count: int
    count_by_class: dict[TensorClass, int]  # every class, zeros included
    bytes_by_class: dict[TensorClass, int]  # classes with bytes only
    bytes_by_dtype: dict[str, int]  # largest first
    layer_classes: dict[int, set[TensorClass]]  # language layer -> classes of its tensors
    layer_name_dtypes: dict[str, set[str]]  # layer-relative (expert-folded) name -> dtypes over all layers
    float_weight_bytes: dict[str, int]  # bytes of 2-D+ float weights by dtype
    quant_modules: list[QuantModules]
    quantization: QuantSummary
    per_expert: bool  # routed experts stored one tensor per expert (else fused, or none)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What one checkpoint holds, read from its config, index and headers."""

    location: str  # the directory, or hf://OWNER/NAME@COMMIT for a preflight from the Hub
    name: str  # the default served model name: the directory's or the repository's
    config: ModelConfigInfo
    index: dict[str, str] | None  # the index's weight_map (None: no index file)
    shards_on_disk: list[str]
    shards_read: list[str]
    missing_shards: dict[str, int]  # shards the index names that are not on disk -> tensors it puts there
    unindexed_shards: list[str]  # shards on disk the index does not name
    duplicates: list[str]  # "name (shard, shard)" for a tensor stored twice
    index_absent: list[str]  # "name -> shard": indexed, but not in the (read) shard the index names
    index_extra: list[str]  # "name in shard": in a shard, not in the index
    header_changed: list[str]  # shards whose header differs from the one a preflight read (when given)
    tensors: TensorStats

    @property
    def has_index(self) -> bool:
        return self.index is not None

    @property
    def index_tensor_count(self) -> int:
        """Entries in the index's weight_map (= the tensor count for a single unindexed file)."""
        return len(self.index) if self.index is not None else self.tensors.count

    @property
    def visual_tensor_count(self) -> int:
        return self.tensors.count_by_class["vision"]

    @property
    def mtp_tensor_count(self) -> int:
        return self.tensors.count_by_class["mtp"]

    @property
    def lm_head_present(self) -> bool:
        return self.tensors.count_by_class["lm_head"] > 0

    @property
    def weight_bytes(self) -> int:
        return sum(self.tensors.bytes_by_class.values())

    @property
    def expert_layout(self) -> ExpertLayout:
        if not self.tensors.count_by_class["moe_experts"]:
            return "none"
        return "per_expert" if self.tensors.per_expert else "fused"

    @property
    def decode_bytes_per_token(self) -> int:
        return decode_bytes_per_token(self.tensors.bytes_by_class, self.config, self.lm_head_present)


def decode_bytes_per_token(by_class: dict[TensorClass, int], cfg: ModelConfigInfo, lm_head_present: bool) -> int:
    """Weight bytes read per decode token.

    Dense: everything except the vision tower (image inputs only), MTP (draft only) and the embedding
    (a gather of one row) — unless the embedding doubles as the LM head (tied, no ``lm_head``).
    MoE: routed experts count ``top_k / num_experts`` of their bytes; router and shared experts count fully.
    """
    skip = {"vision", "mtp", "embedding", "moe_experts"}
    total = sum(b for c, b in by_class.items() if c not in skip)
    if not lm_head_present and cfg.tie_word_embeddings:
        total += by_class.get("embedding", 0)
    experts = by_class.get("moe_experts", 0)
    if experts:
        if cfg.num_experts > 0:
            total += experts * cfg.num_experts_per_tok // cfg.num_experts
        else:
            total += experts
    return total


class _IndexFile(msgspec.Struct):
    """``model.safetensors.index.json``: what the audit reads of it (other keys are ignored)."""

    weight_map: dict[str, str]


_DECODE_INDEX = msgspec.json.Decoder(_IndexFile)


def read_index(files: CheckpointFiles) -> tuple[dict[str, str], list[str]] | None:
    """The index's weight_map and the shards it names (sorted), each checked to stay inside the checkpoint."""
    raw = files.read_small(INDEX_NAME)
    if raw is None:
        return None
    return parse_index(raw, files.where(INDEX_NAME))


_REMEDY_INDEX = "re-download model.safetensors.index.json"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME_MAX = 255  # bytes in one path component (NAME_MAX on Linux and macOS)
_PATH_MAX = 4096  # bytes in a path (PATH_MAX on Linux)


def parse_index(raw: bytes, where: str = INDEX_NAME) -> tuple[dict[str, str], list[str]]:
    """The weight map of an index's bytes and the shards it names (sorted), or the UserError naming
    ``where`` and what is wrong (pure: no I/O; local and fetched indexes both come here)."""
    if len(raw) > INDEX_LIMIT:
        raise too_large(where, len(raw), INDEX_LIMIT)
    try:  # the typed decoder checks the document's shape in C (but not the bytes of the keys it skips)
        if not is_utf8(raw):
            raise msgspec.DecodeError
        with paused_gc():
            wm = _DECODE_INDEX.decode(raw).weight_map
    except (msgspec.MsgspecError, RecursionError):
        wm = _weight_map_or_why(where, raw)
    return _checked_index(where, wm)


def _weight_map_or_why(where: str, raw: bytes) -> dict[str, str]:
    """The weight map of an index the typed decoder refused (parsed by :func:`roost.inputs.jsondoc.parse_object`,
    which bounds depth and numbers), or the UserError saying what is wrong with it."""
    obj = parse_object(raw, shown(where), _REMEDY_INDEX)
    wm = obj.get("weight_map")
    if not isinstance(wm, dict) or not all(type(v) is str for v in wm.values()):
        raise UserError(f"{shown(where)}: needs a 'weight_map' object mapping tensor names to shard file names; "
                        f"{_REMEDY_INDEX}")
    try:  # the standard library's parser (jsondoc's fallback) lets lone surrogates through: no file has them
        "\n".join(wm).encode()
        "\n".join(wm.values()).encode()
    except UnicodeEncodeError:
        raise UserError(f"{shown(where)}: weight_map holds a name that is not valid UTF-8; {_REMEDY_INDEX}") from None
    return wm


def _checked_index(where: str, wm: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The weight map and its shards (sorted), each checked to stay inside the checkpoint directory and
    to be a name a file can have."""
    shards = set(wm.values())
    for shard in shards:
        p = PurePosixPath(shard)
        if p.is_absolute() or ".." in p.parts or "\\" in shard or not p.parts:  # "", ".": the directory itself
            raise UserError(
                f"{shown(where)}: weight_map names shard {shown(repr(shard))}, a path outside the checkpoint "
                "directory; refusing to read it — the index is corrupt or hostile"
            )
        encoded = shard.encode()
        if _CONTROL.search(shard) or len(encoded) > _PATH_MAX or any(len(c.encode()) > _NAME_MAX for c in p.parts):
            raise UserError(
                f"{shown(where)}: weight_map names shard {shown(repr(shard))}, which is not a file name a "
                f"checkpoint can hold (control characters, or longer than the system allows); {_REMEDY_INDEX}"
            )
    return wm, sorted(shards)


def read_checkpoint(path: Path | CheckpointFiles, expected_headers: Mapping[str, str] | None = None) -> Checkpoint:
    """Read a checkpoint: config, index and shard headers (no tensor data).

    ``path``: a checkpoint directory, or the files a Hub preflight fetched (:class:`FetchedFiles`).
    ``expected_headers`` (shard -> sha256 of its header, from a preflight): each shard read whose
    header differs is listed in ``Checkpoint.header_changed``.
    """
    files: CheckpointFiles
    if isinstance(path, str | os.PathLike):
        local = LocalFiles(Path(path))
        local.check()
        files = local
    else:
        files = path
    on_disk = files.shard_names()
    cfg = config_of(files)
    # The headers' ~100k dicts and lists are freed before the collector resumes (see the module docstring).
    with paused_gc():
        index_and_shards = read_index(files)
        index: dict[str, str] | None = None
        missing: dict[str, int] = {}
        unindexed: list[str] = []
        if index_and_shards is not None:
            index, indexed = index_and_shards
            on_disk_set = set(on_disk)
            gone = [s for s in indexed if s not in on_disk_set and not files.has(s)]
            if gone:
                per_shard = Counter(index.values())
                missing = {s: per_shard[s] for s in gone}
            unindexed = sorted(on_disk_set - set(indexed))
            to_read = [s for s in indexed if s not in missing]
        else:
            if not on_disk:
                raise UserError(f"{files.location}: no *.safetensors files; roost audits safetensors checkpoints only")
            to_read = on_disk
        headers = files.read_headers(to_read)
        changed = [] if expected_headers is None else header_changes(to_read, headers, expected_headers)
        checkpoint = _build(files, cfg, index, on_disk, to_read, missing, unindexed, headers, changed)
        del headers
    return checkpoint


def header_digest(raw: bytes) -> str:
    """The sha256 of a header's JSON bytes: how a preflight's header is compared with the downloaded file's."""
    return hashlib.sha256(raw).hexdigest()


def header_changes(names: Sequence[str], headers: Sequence[ShardHeader], expected: Mapping[str, str]) -> list[str]:
    """The shards of ``names`` whose header is not the one ``expected`` records (shards it lacks included)."""
    return [n for n, h in zip(names, headers, strict=True) if expected.get(n) != header_digest(h.raw)]


def _build(
    files: CheckpointFiles,
    cfg: ModelConfigInfo,
    index: dict[str, str] | None,
    on_disk: list[str],
    to_read: list[str],
    missing: dict[str, int],
    unindexed: list[str],
    headers: list[ShardHeader],
    header_changed: list[str],
) -> Checkpoint:
    tensors: dict[str, RawEntry] = {}
    for h in headers:
        tensors.update(h.tensors)
    total = sum(len(h.tensors) for h in headers)
    duplicates: list[str] = []
    if len(tensors) == total:
        dtypes = list(chain.from_iterable(h.dtypes for h in headers))
        sizes = list(chain.from_iterable(h.sizes for h in headers))
    else:  # a name in two shards: say which; the last shard's entry counts, as vLLM would load it
        seen: dict[str, str] = {}
        size_of: dict[str, int] = {}
        for shard, h in zip(to_read, headers, strict=True):
            duplicates += [f"{n} ({seen[n]}, {shard})" for n in h.tensors if n in seen]
            seen.update(dict.fromkeys(h.tensors, shard))
            size_of.update(zip(h.tensors, h.sizes, strict=True))
        dtypes = [e.dtype for e in tensors.values()]
        sizes = list(map(size_of.__getitem__, tensors))
    absent: list[str] = []
    extra: list[str] = []
    if index is not None and not _index_agrees(index, to_read, headers, total, missing):
        owner: dict[str, str] = {}
        for shard, h in zip(to_read, headers, strict=True):
            owner.update(dict.fromkeys(h.tensors, shard))
        read_set = set(to_read)
        absent = [f"{n} -> {s}" for n, s in index.items() if s in read_set and owner.get(n) != s]
        extra = [f"{n} in {s}" for n, s in owner.items() if n not in index]
    return Checkpoint(
        location=files.location,
        name=files.name,
        config=cfg,
        index=index,
        shards_on_disk=on_disk,
        shards_read=to_read,
        missing_shards=missing,
        unindexed_shards=unindexed,
        duplicates=duplicates,
        index_absent=absent,
        index_extra=extra,
        header_changed=header_changed,
        tensors=_classify(cfg, tensors, dtypes, sizes),
    )


def _index_agrees(
    index: dict[str, str], to_read: list[str], headers: list[ShardHeader], total: int, missing: dict[str, int]
) -> bool:
    """The index names exactly the tensors of the shards read, each in its shard (C-level passes only)."""
    if missing or len(index) != total:
        return False
    return all(set(map(index.get, h.tensors)) <= {shard} for shard, h in zip(to_read, headers, strict=True))


def _classify(cfg: ModelConfigInfo, tensors: dict[str, RawEntry], dtypes: list[str], sizes: list[int]) -> TensorStats:
    """Counts, bytes, layer classes, per-name dtypes and quantized modules of ``tensors``."""
    mtp_start = cfg.num_hidden_layers if cfg.mtp_style == "extra_layers" else None
    names = list(tensors)
    joined = "\n".join(names)
    folded = ".experts." in joined
    canon = _EXPERT_INDEX.sub(".experts.E.", joined).split("\n") if folded else names
    if len(canon) != len(names):  # a name with a newline in it: fold one by one
        canon = [_EXPERT_INDEX.sub(".experts.E.", n) for n in names]
    counts = Counter(zip(canon, dtypes, sizes, strict=True))
    last: dict[str, str] = {}  # folded name -> the last real name behind it, built when first needed

    def real(key: str) -> str:
        """The last real tensor name behind ``key`` (itself when nothing was folded out of it)."""
        if ".experts.E." not in key:
            return key
        if not last:
            last.update(zip(canon, names, strict=True))
        return last[key]

    def ndim(key: str) -> int:
        """Dimensions of a tensor behind ``key``: expert 0's when the name was folded and it exists
        (the members of a key share dtype and byte size), without indexing every name."""
        if folded and ".experts.E." in key:
            entry = tensors.get(key.replace(".experts.E.", ".experts.0.", 1))
            if entry is not None:
                return len(entry.shape)
        return len(tensors[real(key)].shape)

    count_by: dict[TensorClass, int] = dict.fromkeys(TENSOR_CLASSES, 0)
    bytes_by: dict[TensorClass, int] = dict.fromkeys(TENSOR_CLASSES, 0)
    bytes_by_dtype: dict[str, int] = {}
    layer_classes: dict[int, set[TensorClass]] = defaultdict(set)
    name_dtypes: dict[str, set[str]] = defaultdict(set)
    quant_keys: set[str] = set()
    float_bytes: dict[str, int] = {}
    unquantized = 0
    per_expert = False
    for (key, dtype, size), n in counts.items():
        cls, layer = classify(key, mtp_start)
        total = size * n
        count_by[cls] += n
        bytes_by[cls] += total
        bytes_by_dtype[dtype] = bytes_by_dtype.get(dtype, 0) + total
        role = key[key.rfind(".") + 1 :]
        if role in SCALE_ROLES or dtype in _QUANT_DTYPES:
            quant_keys.add(key)
        elif role == "weight" and dtype in FLOAT_DTYPES and ndim(key) >= 2:
            float_bytes[dtype] = float_bytes.get(dtype, 0) + total
            unquantized += n
        if layer is not None and cls != "mtp" and cls != "vision":
            layer_classes[layer].add(cls)
            name_dtypes[key.partition(f"layers.{layer}.")[2]].add(dtype)
            if cls == "moe_experts" and not per_expert and ".experts.E." in key:
                per_expert = True
    modules = _quant_modules(quant_keys, counts, tensors, names, canon, real)
    q = cfg.quantization or {}
    quantization = QuantSummary(
        method=q.get("quant_method"),
        algo=q.get("quant_algo"),
        kv_cache_quant_algo=q.get("kv_cache_quant_algo"),
        nvfp4_modules=sum(m.count for m in modules if m.kind == "nvfp4"),
        fp8_modules=sum(m.count for m in modules if m.kind == "fp8"),
        unquantized_modules=unquantized,
    )
    return TensorStats(
        count=len(names),
        count_by_class=count_by,
        bytes_by_class={c: b for c, b in bytes_by.items() if b},
        bytes_by_dtype=dict(sorted(bytes_by_dtype.items(), key=lambda kv: -kv[1])),
        layer_classes=dict(layer_classes),
        layer_name_dtypes=dict(name_dtypes),
        float_weight_bytes=float_bytes,
        quant_modules=modules,
        quantization=quantization,
        per_expert=per_expert,
    )


def _quant_modules(
    quant_keys: set[str],
    counts: Counter[tuple[str, str, int]],
    tensors: dict[str, RawEntry],
    names: list[str],
    canon: list[str],
    real: Callable[[str], str],
) -> list[QuantModules]:
    """The quantized modules, folded like the names: one entry per folded module whose real modules
    all have the same roles, dtypes and sizes; one per real module where they differ."""
    quant_folded = {k.rpartition(".")[0] for k in quant_keys}
    if not quant_folded:
        return []
    folded_roles: dict[str, dict[str, list[tuple[str, int, int]]]] = defaultdict(lambda: defaultdict(list))
    for (key, dtype, size), n in counts.items():
        module, _, role = key.rpartition(".")
        if module in quant_folded:
            folded_roles[module][role].append((dtype, size, n))
    out: list[QuantModules] = []
    for folded, roles in folded_roles.items():
        weights = roles.get("weight")
        if not weights:
            continue
        n_modules = sum(n for _, _, n in weights)
        uniform = all(len(v) == 1 for v in roles.values())
        complete = all(sum(n for _, _, n in v) == n_modules for v in roles.values())
        if uniform and complete:  # every real module behind this name is stored alike: keep one
            one = {role: TensorEntry.of(tensors[real(f"{folded}.{role}")]) for role in roles}
            kind = quant_kind(one)
            if kind != "none":
                out.append(QuantModules(real(f"{folded}.weight").rpartition(".")[0], kind, one, n_modules))
            continue
        for module, mroles in _real_modules(folded, tensors, names, canon).items():  # they differ: each one
            kind = quant_kind(mroles)
            if kind != "none":
                out.append(QuantModules(module, kind, mroles, 1))
    return out


def _real_modules(
    folded: str, tensors: dict[str, RawEntry], names: list[str], canon: list[str]
) -> dict[str, dict[str, TensorEntry]]:
    """Every real module behind a folded module name, with its tensors by role (the slow, exact path)."""
    out: dict[str, dict[str, TensorEntry]] = defaultdict(dict)
    prefix = folded + "."
    for name, key in zip(names, canon, strict=True):
        if key.startswith(prefix) and "." not in key[len(prefix) :]:
            module, _, role = name.rpartition(".")
            out[module][role] = TensorEntry.of(tensors[name])
    return out
