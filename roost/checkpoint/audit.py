"""Audit a checkpoint from its safetensors headers and config alone, before any GPU minute is spent.

``audit_checkpoint(path, host)`` reads every shard's header (never tensor data), cross-checks
``model.safetensors.index.json`` against the shards and ``config.json``, classifies every tensor,
and reports findings with stable codes plus the figures that decide how the model will serve:
tensor counts, weight bytes by class, bytes read per decode token and the bandwidth ceiling, KV bytes
per token, and the vLLM arguments the checkpoint needs.

Unusable input (no directory, no config, corrupt header, traversal in the index...) raises
:class:`~roost.errors.UserError` (exit 2). Problems the audit can describe (a missing shard, an index
naming a tensor its shard lacks, a layer gap) are findings with severity ``error`` (exit 1).

Finding codes (stable; scripts match on them):
    MISSING_SHARD, UNINDEXED_SHARD, INDEX_MISSING, INDEX_SHARD_MISMATCH, DUPLICATE_TENSOR,
    LAYER_GAP, LAYER_OUT_OF_RANGE, LAYER_TYPE_MISMATCH, LAYER_INCOMPLETE,
    EMBEDDING_MISSING, LM_HEAD_MISSING,
    MTP_ADVERTISED_NOT_SHIPPED, MTP_PRESENT, MTP_NOT_DECLARED,
    VISION_CONFIG_WITHOUT_TOWER, VISION_TOWER_PRESENT, VISION_TOWER_INCOMPLETE, VISION_TOWER_WITHOUT_CONFIG,
    QUANT_CONFIG_MISSING, QUANT_TENSORS_MISSING, NVFP4_INCOMPLETE, FP8_SCALE_MISSING,
    DTYPE_INCONSISTENT, CONFIG_DTYPE_MISMATCH, DOES_NOT_FIT_HOST
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter, defaultdict
from operator import itemgetter
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, Field

from roost.checkpoint.layout import (
    SCALE_ROLES,
    TENSOR_CLASSES,
    ModelConfigInfo,
    TensorClass,
    classify,
    expected_vision_tensors,
    load_config,
    nvfp4_problems,
    quant_kind,
)
from roost.checkpoint.safetensors_header import (
    FLOAT_DTYPES,
    FP8_DTYPES,
    RawEntry,
    ShardHeader,
    TensorEntry,
    read_header,
)
from roost.errors import UserError
from roost.hosts import HostProfile
from roost.records import Finding, Severity

INDEX_NAME = "model.safetensors.index.json"
_EXPERT_INDEX = re.compile(r"\.experts\.\d+\.")
GB = 10**9
GiB = 1024**3
_EXAMPLES = 3

ExpertLayout = Literal["none", "per_expert", "fused"]


class QuantSummary(BaseModel):
    """What the config says about quantization and what the tensors on disk show."""

    method: str | None = Field(default=None, description="quantization_config.quant_method (modelopt, fp8, ...).")
    algo: str | None = Field(default=None, description="quant_algo (NVFP4, FP8, MIXED_PRECISION, ...).")
    kv_cache_quant_algo: str | None = None
    nvfp4_modules: int = 0
    fp8_modules: int = 0
    unquantized_modules: int = Field(default=0, description="Matmul weights (2-D+) stored in a float dtype.")


class AuditReport(BaseModel):
    """Everything the audit established about one checkpoint directory for one host."""

    path: str
    host: str
    architecture: str
    model_type: str
    served_model_name: str
    shard_count: int
    has_index: bool
    tensor_count: int
    index_tensor_count: int = Field(description="Entries in the index's weight_map (= tensor_count for a single unindexed file).")
    visual_tensor_count: int
    mtp_tensor_count: int
    tensor_count_by_class: dict[str, int]
    num_hidden_layers: int
    full_attention_layers: int
    linear_attention_layers: int
    num_experts: int
    num_experts_per_tok: int
    expert_layout: ExpertLayout
    quantization: QuantSummary
    weight_bytes: int
    weight_bytes_by_class: dict[str, int]
    weight_bytes_by_dtype: dict[str, int]
    decode_bytes_per_token: int = Field(description="Weight bytes one decode step reads (see decode_bytes_per_token()).")
    decode_ceiling_tok_s: float = Field(description="host bandwidth / decode_bytes_per_token.")
    kv_bytes_per_token: int = Field(description="K+V of one token over all full-attention layers as vLLM will store it.")
    max_model_len: int = Field(description="Native window (max_position_embeddings).")
    findings: list[Finding]
    vllm_args: list[str]
    kv_cache_memory_bytes: int = Field(description="The pool in vllm_args: smallest for the target concurrency.")
    load_weight_bytes: int = Field(description="Weights vLLM will load with vllm_args (tower/MTP dropped when unused).")
    audit_seconds: float

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def summary(self) -> str:
        lines = [
            f"{self.path}: {self.architecture} ({self.model_type}), {self.shard_count} shard(s)",
            f"  tensors: {self.tensor_count:,} (index {self.index_tensor_count:,}, visual {self.visual_tensor_count:,}, "
            f"mtp {self.mtp_tensor_count:,})",
            f"  layers: {self.num_hidden_layers} ({self.full_attention_layers} full attention, "
            f"{self.linear_attention_layers} linear)"
            + (f"; MoE {self.num_experts} experts top-{self.num_experts_per_tok} ({self.expert_layout})" if self.num_experts else ""),
            f"  weights: {format_bytes(self.weight_bytes)} ({self.weight_bytes:,} bytes)",
        ]
        for cls, b in sorted(self.weight_bytes_by_class.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {cls:<20} {format_bytes(b):>12}")
        lines += [
            f"  decode reads {self.decode_bytes_per_token / GB:.2f} GB/token -> ceiling "
            f"{self.decode_ceiling_tok_s:.1f} tok/s on {self.host}",
            f"  KV cache: {self.kv_bytes_per_token / 1024:.0f} KiB/token",
            "  findings:" if self.findings else "  findings: none",
        ]
        lines += [f"    [{f.severity}] {f.code}: {f.message}" for f in self.findings]
        lines.append("  vllm args: " + " ".join(_quote(a) for a in self.vllm_args))
        return "\n".join(lines)


def format_bytes(n: int) -> str:
    """1.23 GiB / 45.6 MiB / 789 KiB / 12 B: binary units, as vLLM reports memory."""
    for unit, size in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in " {}\"") else arg


def _examples(items: list[str] | set[str]) -> str:
    items = sorted(items)
    more = f" (+{len(items) - _EXAMPLES} more)" if len(items) > _EXAMPLES else ""
    return ", ".join(items[:_EXAMPLES]) + more


def _read_index(model_dir: Path) -> dict[str, str] | None:
    """The index's weight_map, with every shard name checked to stay inside ``model_dir``."""
    path = model_dir / INDEX_NAME
    if not path.is_file():
        return None
    try:
        obj = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc}); re-download the index") from None
    wm = obj.get("weight_map") if isinstance(obj, dict) else None
    if not isinstance(wm, dict) or not set(map(type, wm.values())) <= {str}:
        raise UserError(f"{path}: needs a 'weight_map' object mapping tensor names to shard file names")
    for shard in set(wm.values()):
        p = PurePosixPath(shard)
        if p.is_absolute() or ".." in p.parts or "\\" in shard or not shard:
            raise UserError(
                f"{path}: weight_map names shard {shard!r}, a path outside the checkpoint directory; "
                "refusing to read it — the index is corrupt or hostile"
            )
    return wm


def _shard_files(model_dir: Path) -> list[str]:
    with os.scandir(model_dir) as it:
        return sorted(e.name for e in it if e.name.endswith(".safetensors") and e.is_file())


def decode_bytes_per_token(by_class: dict[str, int], cfg: ModelConfigInfo, lm_head_present: bool) -> int:
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


def audit_checkpoint(
    path: Path,
    host: HostProfile,
    *,
    served_model_name: str | None = None,
    max_model_len: int | None = None,
    target_concurrency: float = 1.0,
) -> AuditReport:
    """Audit the checkpoint in directory ``path`` for serving on ``host`` (headers and config only)."""
    t0 = time.perf_counter()
    model_dir = Path(path)
    if not model_dir.exists():
        raise UserError(f"{model_dir}: no such directory; pass the checkpoint directory (config.json + *.safetensors)")
    if not model_dir.is_dir():
        raise UserError(f"{model_dir}: not a directory; pass the checkpoint directory, not a file")
    on_disk = _shard_files(model_dir)
    if not on_disk and not (model_dir / "config.json").exists() and not (model_dir / INDEX_NAME).exists():
        raise UserError(f"{model_dir}: empty checkpoint directory (no config.json, no *.safetensors); download the model first")
    cfg = load_config(model_dir)
    index = _read_index(model_dir)
    findings: list[Finding] = []

    def add(code: str, severity: Severity, message: str) -> None:
        findings.append(Finding(code=code, severity=severity, message=message))

    # --- shards <-> index -------------------------------------------------------------------------
    on_disk_set = set(on_disk)
    if index is not None:
        indexed = sorted(set(index.values()))
        missing = [s for s in indexed if s not in on_disk_set and not (model_dir / s).is_file()]
        for s in missing:
            n = sum(1 for v in index.values() if v == s)
            add("MISSING_SHARD", "error", f"{s} is named by the index for {n:,} tensors but is not in {model_dir}; re-download it")
        unindexed = sorted(on_disk_set - set(indexed))
        if unindexed:
            add(
                "UNINDEXED_SHARD",
                "warning",
                f"{len(unindexed)} shard(s) not named by the index ({_examples(unindexed)}); vLLM ignores them — remove stray files",
            )
        to_read = [s for s in indexed if s not in missing]
    else:
        if not on_disk:
            raise UserError(f"{model_dir}: no *.safetensors files; roost audits safetensors checkpoints only")
        if len(on_disk) > 1:
            add("INDEX_MISSING", "warning", f"{len(on_disk)} shards but no {INDEX_NAME}; vLLM will load every *.safetensors file")
        to_read = on_disk
    headers: list[ShardHeader] = [read_header(model_dir / s) for s in to_read]

    # --- union of tensors, index cross-check --------------------------------------------------------
    tensors: dict[str, RawEntry] = {}
    nbytes: dict[str, int] = {}
    owner: dict[str, str] = {}
    duplicates: list[str] = []
    for shard, h in zip(to_read, headers, strict=True):
        tensors.update(h.tensors)
        nbytes.update(h.nbytes)
        owner.update(dict.fromkeys(h.tensors, shard))
    if len(tensors) != sum(len(h.tensors) for h in headers):  # a name in two shards: say which
        seen: dict[str, str] = {}
        for shard, h in zip(to_read, headers, strict=True):
            duplicates += [f"{n} ({seen[n]}, {shard})" for n in h.tensors if n in seen]
            seen.update(dict.fromkeys(h.tensors, shard))
    if duplicates:
        add("DUPLICATE_TENSOR", "error", f"{len(duplicates)} tensor(s) stored in two shards: {_examples(duplicates)}; the shards are from different exports")
    if index is not None:
        read_set = set(to_read)
        if index != owner:
            absent = [f"{n} -> {s}" for n, s in index.items() if s in read_set and owner.get(n) != s]
            extra = [f"{n} in {s}" for n, s in owner.items() if n not in index]
            if absent:
                add(
                    "INDEX_SHARD_MISMATCH",
                    "error",
                    f"{len(absent):,} indexed tensor(s) are absent from the shard the index names: {_examples(absent)}; "
                    "the index and shards are from different exports — re-download both",
                )
            if extra:
                add(
                    "INDEX_SHARD_MISMATCH",
                    "error",
                    f"{len(extra):,} tensor(s) in the shards are not in the index: {_examples(extra)}; "
                    "vLLM would not load them — re-download the index",
                )

    # --- classification -----------------------------------------------------------------------------
    # Per-expert names differ only in the expert index. One regex pass over all names (C speed) folds it
    # to "E"; a Counter over (name, dtype, bytes) leaves ~1k distinct keys for 31k tensors, and only those
    # are classified in Python. Layer indices stay in the keys for the layer checks.
    mtp_start = cfg.num_hidden_layers if cfg.mtp_style == "extra_layers" else None
    names = list(tensors)
    canon = _EXPERT_INDEX.sub(".experts.E.", "\n".join(names)).split("\n")
    if len(canon) != len(names):  # a name with a newline in it: fold one by one
        canon = [_EXPERT_INDEX.sub(".experts.E.", n) for n in names]
    dtypes_all = list(map(itemgetter("dtype"), tensors.values()))
    counts = Counter(zip(canon, dtypes_all, map(nbytes.__getitem__, names), strict=True))
    sample = dict(zip(canon, names, strict=True))  # one real name per folded name
    count_by: dict[str, int] = dict.fromkeys(TENSOR_CLASSES, 0)
    bytes_by: dict[str, int] = dict.fromkeys(TENSOR_CLASSES, 0)
    bytes_by_dtype: dict[str, int] = {}
    layer_kinds: dict[int, set[str]] = defaultdict(set)
    key_dtypes: dict[str, set[str]] = defaultdict(set)
    quant_keys: set[str] = set()
    float_bytes: dict[str, int] = {}
    unquantized = 0
    per_expert = False
    quant_dtypes = {"U8", "F4", *FP8_DTYPES}
    classified: dict[str, tuple[TensorClass, int | None]] = {}
    for (key, dtype, size), n in counts.items():
        hit = classified.get(key)
        if hit is None:
            hit = classified[key] = classify(key, mtp_start)
        cls, layer = hit
        total = size * n
        count_by[cls] += n
        bytes_by[cls] += total
        bytes_by_dtype[dtype] = bytes_by_dtype.get(dtype, 0) + total
        role = key.rpartition(".")[2]
        if role in SCALE_ROLES or dtype in quant_dtypes:
            quant_keys.add(key)
        elif role == "weight" and dtype in FLOAT_DTYPES and len(tensors[sample[key]]["shape"]) >= 2:
            float_bytes[dtype] = float_bytes.get(dtype, 0) + total
            unquantized += n
        if layer is not None and cls not in ("mtp", "vision"):
            layer_kinds[layer].add(cls)
            key_dtypes[key.partition(f"layers.{layer}.")[2]].add(dtype)
            if cls == "moe_experts" and ".experts.E." in key:
                per_expert = True
    # Quantized modules, folded like the names: role -> [(dtype, bytes, count)] per folded module.
    quant_folded = {k.rpartition(".")[0] for k in quant_keys}
    folded_roles: dict[str, dict[str, list[tuple[str, int, int]]]] = defaultdict(lambda: defaultdict(list))
    if quant_folded:
        for (key, dtype, size), n in counts.items():
            module, _, role = key.rpartition(".")
            if module in quant_folded:
                folded_roles[module][role].append((dtype, size, n))

    def real_modules(folded: str) -> dict[str, dict[str, TensorEntry]]:
        """Every real module behind a folded module name, with its tensors by role (the slow, exact path)."""
        out: dict[str, dict[str, TensorEntry]] = defaultdict(dict)
        prefix = folded + "."
        for name, key in zip(names, canon, strict=True):
            if key.startswith(prefix) and "." not in key[len(prefix) :]:
                module, _, role = name.rpartition(".")
                out[module][role] = TensorEntry.of(tensors[name])
        return out

    lm_head_present = count_by["lm_head"] > 0
    visual = count_by["vision"]
    mtp = count_by["mtp"]

    # --- layers ---------------------------------------------------------------------------------------
    expected = set(range(cfg.num_hidden_layers))
    present = set(layer_kinds)
    gaps = sorted(expected - present)
    if gaps:
        add(
            "LAYER_GAP",
            "error",
            f"layers {_ranges(gaps)} of 0..{cfg.num_hidden_layers - 1} (num_hidden_layers) have no tensors; "
            "shards are missing or the config does not match the weights",
        )
    beyond = sorted(present - expected)
    if beyond:
        add(
            "LAYER_OUT_OF_RANGE",
            "error",
            f"tensors for layers {_ranges(beyond)} but num_hidden_layers is {cfg.num_hidden_layers}; "
            "the config does not match the weights",
        )
    mismatched: list[str] = []
    incomplete: list[str] = []
    for i in sorted(present & expected):
        kinds = layer_kinds[i]
        want = cfg.layer_types[i]
        has_full, has_lin = "attention" in kinds, "linear_attention" in kinds
        if (want == "linear_attention" and has_full) or (want != "linear_attention" and has_lin):
            mismatched.append(f"{i} ({want} in config, {'self_attn' if has_full else 'linear_attn'} tensors)")
        elif not (has_full or has_lin):
            incomplete.append(f"{i} (no attention tensors)")
        elif not kinds & {"mlp", "moe_experts", "moe_router"}:
            incomplete.append(f"{i} (no MLP tensors)")
    if mismatched:
        add(
            "LAYER_TYPE_MISMATCH",
            "error",
            f"layer kind disagrees with layer_types/full_attention_interval for layers {_examples(mismatched)}; "
            "the config does not describe these weights",
        )
    if incomplete:
        add("LAYER_INCOMPLETE", "error", f"layers missing whole modules: {_examples(incomplete)}; re-download the checkpoint")
    if count_by["embedding"] == 0:
        add("EMBEDDING_MISSING", "error", "no embed_tokens tensor; the checkpoint is incomplete")
    if not lm_head_present and not cfg.tie_word_embeddings:
        add("LM_HEAD_MISSING", "error", "no lm_head tensor and tie_word_embeddings is false; the checkpoint is incomplete")

    # --- MTP and vision ------------------------------------------------------------------------------------
    if cfg.mtp_num_hidden_layers > 0 and mtp == 0:
        add(
            "MTP_ADVERTISED_NOT_SHIPPED",
            "warning",
            f"config advertises {cfg.mtp_num_hidden_layers} MTP layer(s) but the checkpoint ships 0 mtp tensors: "
            "no speculative decoding — do not pass --speculative-config",
        )
    elif mtp > 0:
        add(
            "MTP_PRESENT",
            "info",
            f"{mtp:,} MTP tensors shipped: serve with --speculative-config "
            "'{\"method\":\"mtp\",\"num_speculative_tokens\":1}' for self-speculation",
        )
        if cfg.mtp_num_hidden_layers == 0:
            add("MTP_NOT_DECLARED", "warning", f"{mtp:,} mtp tensors but the config declares no MTP layers; vLLM may not load them")
    expected_visual = expected_vision_tensors(cfg.model_type, cfg.vision_depth)
    if cfg.has_vision_config and visual == 0:
        add(
            "VISION_CONFIG_WITHOUT_TOWER",
            "warning",
            "config declares a vision tower but the checkpoint ships no visual tensors: serve with --language-model-only",
        )
    elif visual > 0:
        if expected_visual is not None and visual != expected_visual:
            add(
                "VISION_TOWER_INCOMPLETE",
                "error",
                f"{visual} visual tensors but a {cfg.vision_depth}-block tower has {expected_visual}; "
                "vLLM will fail on uninitialized visual.* parameters — re-download the checkpoint",
            )
        else:
            add(
                "VISION_TOWER_PRESENT",
                "info",
                f"{visual} visual tensors shipped: the tower must be built — do not pass --language-model-only",
            )
        if not cfg.has_vision_config:
            add("VISION_TOWER_WITHOUT_CONFIG", "warning", f"{visual} visual tensors but config.json has no vision_config; vLLM will ignore them")

    # --- quantization -----------------------------------------------------------------------------------
    q = cfg.quantization or {}
    quant = QuantSummary(
        method=q.get("quant_method"),
        algo=q.get("quant_algo"),
        kv_cache_quant_algo=q.get("kv_cache_quant_algo"),
    )
    nvfp4_issues: list[str] = []
    fp8_unscaled: list[str] = []
    group_size = q.get("group_size") or 16
    if type(group_size) is not int or group_size <= 0:
        raise UserError(f"{model_dir / 'config.json'}: quantization_config.group_size must be a positive integer, "
                        f"got {group_size!r}")
    for folded, roles in folded_roles.items():
        weights = roles.get("weight")
        if not weights:
            continue
        n_modules = sum(n for _, _, n in weights)
        uniform = all(len(v) == 1 for v in roles.values())
        complete = all(sum(n for _, _, n in v) == n_modules for v in roles.values())
        if uniform and complete:
            # every real module behind this name has the same roles, dtypes and sizes: check one of them
            one = {role: TensorEntry.of(tensors[sample[f"{folded}.{role}"]]) for role in roles}
            kind = quant_kind(one)
            if kind == "nvfp4":
                quant.nvfp4_modules += n_modules
                issues = nvfp4_problems(sample[f"{folded}.weight"].rpartition(".")[0], one, group_size)
                nvfp4_issues += [f"{p} (and {n_modules - 1:,} more like it)" if n_modules > 1 else p for p in issues]
            elif kind == "fp8":
                quant.fp8_modules += n_modules
                if not one.keys() & {"weight_scale", "weight_scale_inv"}:
                    fp8_unscaled.append(sample[f"{folded}.weight"].rpartition(".")[0])
            continue
        for module, mroles in real_modules(folded).items():  # they differ: look at each one
            kind = quant_kind(mroles)
            if kind == "nvfp4":
                quant.nvfp4_modules += 1
                nvfp4_issues += nvfp4_problems(module, mroles, group_size)
            elif kind == "fp8":
                quant.fp8_modules += 1
                if not mroles.keys() & {"weight_scale", "weight_scale_inv"}:
                    fp8_unscaled.append(module)
    quant.unquantized_modules = unquantized
    if nvfp4_issues:
        add("NVFP4_INCOMPLETE", "error", f"{len(nvfp4_issues)} NVFP4 problem(s): {_examples(nvfp4_issues)}; the export is broken")
    if fp8_unscaled:
        add("FP8_SCALE_MISSING", "error", f"FP8 weights without weight_scale: {_examples(fp8_unscaled)}; the export is broken")
    if (quant.nvfp4_modules or quant.fp8_modules) and not q:
        add(
            "QUANT_CONFIG_MISSING",
            "error",
            f"{quant.nvfp4_modules} NVFP4 and {quant.fp8_modules} FP8 modules on disk but config.json has no "
            "quantization_config (nor hf_quant_config.json); vLLM would load packed bytes as weights",
        )
    if q and str(quant.method or "").lower() in ("modelopt", "fp8", "modelopt_fp4") and not (quant.nvfp4_modules or quant.fp8_modules):
        add("QUANT_TENSORS_MISSING", "error", f"quantization_config says {quant.method}/{quant.algo} but no quantized tensors are on disk")

    mixed_ok = str(quant.algo or "").upper() == "MIXED_PRECISION"
    inconsistent = [f"{k}: {'/'.join(sorted(d))}" for k, d in key_dtypes.items() if len(d) > 1]
    if inconsistent:
        add(
            "DTYPE_INCONSISTENT",
            "info" if mixed_ok else "warning",
            f"the same tensor has different dtypes across layers for {len(inconsistent)} name(s): {_examples(inconsistent)}"
            + ("; expected for MIXED_PRECISION" if mixed_ok else "; check the export — vLLM casts them to --dtype"),
        )
    if float_bytes:
        main = max(float_bytes, key=lambda d: float_bytes[d])
        declared = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(cfg.dtype.removeprefix("torch."))
        if declared is not None and main != declared:
            add("CONFIG_DTYPE_MISMATCH", "warning", f"config dtype is {cfg.dtype} but most weights are {main}; pass --dtype explicitly")

    # --- figures ---------------------------------------------------------------------------------------------
    from roost.plan.args import derive_vllm_args, fit_check, serve_kv_model
    from roost.plan.kv import rules_for_host

    by_class: dict[str, int] = {c: bytes_by[c] for c in TENSOR_CLASSES if bytes_by[c]}
    weight_bytes = sum(bytes_by.values())
    decode = decode_bytes_per_token(by_class, cfg, lm_head_present)
    ceiling = host.bandwidth_gb_s * GB / decode if decode else 0.0
    rules = rules_for_host(host)
    name = served_model_name or model_dir.resolve().name
    args = derive_vllm_args(
        cfg,
        rules,
        visual_tensor_count=visual,
        mtp_tensor_count=mtp,
        served_model_name=name,
        max_model_len=max_model_len,
        target_concurrency=target_concurrency,
    )
    load_bytes = weight_bytes
    if args.language_model_only:
        load_bytes -= by_class.get("vision", 0)
    if args.speculative_config is None:
        load_bytes -= by_class.get("mtp", 0)
    fit = fit_check(load_bytes, args.kv_cache_memory_bytes, host)
    if not fit.fits:
        add(
            "DOES_NOT_FIT_HOST",
            "error",
            f"weights {load_bytes / GiB:.2f} GiB + KV pool {args.kv_cache_memory_bytes / GiB:.2f} GiB + headroom "
            f"{host.headroom_bytes / GiB:.2f} GiB exceed {host.name}'s {host.usable_bytes / GiB:.2f} GiB budget; "
            "use a quantized build or a bigger host",
        )
    kv_model = serve_kv_model(cfg, rules, mtp_tensor_count=mtp)
    return AuditReport(
        path=str(model_dir),
        host=host.name,
        architecture=cfg.architecture,
        model_type=cfg.model_type,
        served_model_name=name,
        shard_count=len(to_read),
        has_index=index is not None,
        tensor_count=len(tensors),
        index_tensor_count=len(index) if index is not None else len(tensors),
        visual_tensor_count=visual,
        mtp_tensor_count=mtp,
        tensor_count_by_class={c: count_by[c] for c in TENSOR_CLASSES if count_by[c]},
        num_hidden_layers=cfg.num_hidden_layers,
        full_attention_layers=cfg.full_attention_layers,
        linear_attention_layers=cfg.linear_attention_layers,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.num_experts_per_tok,
        expert_layout=("per_expert" if per_expert else "fused") if count_by["moe_experts"] else "none",
        quantization=quant,
        weight_bytes=weight_bytes,
        weight_bytes_by_class=by_class,
        weight_bytes_by_dtype=dict(sorted(bytes_by_dtype.items(), key=lambda kv: -kv[1])),
        decode_bytes_per_token=decode,
        decode_ceiling_tok_s=ceiling,
        kv_bytes_per_token=kv_model.kv_bytes_per_token,
        max_model_len=cfg.max_position_embeddings,
        findings=findings,
        vllm_args=args.to_argv(),
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        load_weight_bytes=load_bytes,
        audit_seconds=time.perf_counter() - t0,
    )


def _ranges(nums: list[int]) -> str:
    """[1,2,3,7] -> '1-3, 7'."""
    out: list[str] = []
    start = prev = nums[0]
    for n in nums[1:]:
        if n == prev + 1:
            prev = n
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = n
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return ", ".join(out)


__all__ = ["AuditReport", "QuantSummary", "TensorClass", "audit_checkpoint", "decode_bytes_per_token"]
