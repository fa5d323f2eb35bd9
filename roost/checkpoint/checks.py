"""The audit's checks: each reads a :class:`~roost.checkpoint.model.Checkpoint` and returns findings.

``CHECKS`` runs in this order (the order findings are reported in); codes are stable, scripts match
on them:

- ``check_shards``: MISSING_SHARD (error), UNINDEXED_SHARD (warning), INDEX_MISSING (warning),
  HEADER_CHANGED (error: a shard's header on disk is not the one the Hub preflight read)
- ``check_duplicates``: DUPLICATE_TENSOR (error)
- ``check_index_entries``: INDEX_SHARD_MISMATCH (error)
- ``check_layers``: LAYER_GAP, LAYER_OUT_OF_RANGE, LAYER_TYPE_MISMATCH, LAYER_INCOMPLETE (errors)
- ``check_embedding_and_head``: EMBEDDING_MISSING, LM_HEAD_MISSING (errors)
- ``check_mtp``: MTP_ADVERTISED_NOT_SHIPPED (warning), MTP_PRESENT (info), MTP_NOT_DECLARED (warning)
- ``check_vision``: VISION_CONFIG_WITHOUT_TOWER (warning), VISION_TOWER_INCOMPLETE (error),
  VISION_TOWER_PRESENT (info), VISION_TOWER_WITHOUT_CONFIG (warning)
- ``check_quantization``: NVFP4_INCOMPLETE, FP8_SCALE_MISSING, QUANT_CONFIG_MISSING,
  QUANT_TENSORS_MISSING (errors)
- ``check_dtypes``: DTYPE_INCONSISTENT (warning; info for MIXED_PRECISION), CONFIG_DTYPE_MISMATCH (warning)

What depends on the host (DOES_NOT_FIT_HOST) is the plan's: :mod:`roost.plan.report`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from roost.checkpoint.findings import Finding, Severity
from roost.checkpoint.layout import expected_vision_tensors, nvfp4_problems
from roost.checkpoint.model import Checkpoint
from roost.checkpoint.safetensors_header import INDEX_NAME

Check = Callable[[Checkpoint], list[Finding]]

_EXAMPLES = 3


def _finding(code: str, severity: Severity, message: str) -> Finding:
    return Finding(code=code, severity=severity, message=message)


def _examples(items: Iterable[str]) -> str:
    """The first three (sorted), and how many more."""
    ordered = sorted(items)
    more = f" (+{len(ordered) - _EXAMPLES} more)" if len(ordered) > _EXAMPLES else ""
    return ", ".join(ordered[:_EXAMPLES]) + more


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


def check_shards(ck: Checkpoint) -> list[Finding]:
    """The shards the index names against the shards on disk."""
    out = [
        _finding("MISSING_SHARD", "error", f"{s} is named by the index for {n:,} tensors but is not in {ck.location}; re-download it")
        for s, n in ck.missing_shards.items()
    ]
    if ck.unindexed_shards:
        out.append(_finding(
            "UNINDEXED_SHARD",
            "warning",
            f"{len(ck.unindexed_shards)} shard(s) not named by the index ({_examples(ck.unindexed_shards)}); "
            "vLLM ignores them — remove stray files",
        ))
    if ck.index is None and len(ck.shards_on_disk) > 1:
        out.append(_finding(
            "INDEX_MISSING", "warning",
            f"{len(ck.shards_on_disk)} shards but no {INDEX_NAME}; vLLM will load every *.safetensors file",
        ))
    if ck.header_changed:
        out.append(_finding(
            "HEADER_CHANGED", "error",
            f"{len(ck.header_changed)} shard(s) in {ck.location} ({_examples(ck.header_changed)}) have a header other "
            "than the one the preflight read from the Hub: what was downloaded is not what was audited — delete "
            "them and run again",
        ))
    return out


def check_duplicates(ck: Checkpoint) -> list[Finding]:
    if not ck.duplicates:
        return []
    return [_finding(
        "DUPLICATE_TENSOR", "error",
        f"{len(ck.duplicates)} tensor(s) stored in two shards: {_examples(ck.duplicates)}; the shards are from different exports",
    )]


def check_index_entries(ck: Checkpoint) -> list[Finding]:
    """The tensors the index places in each shard read against the tensors that shard holds."""
    out: list[Finding] = []
    if ck.index_absent:
        out.append(_finding(
            "INDEX_SHARD_MISMATCH",
            "error",
            f"{len(ck.index_absent):,} indexed tensor(s) are absent from the shard the index names: "
            f"{_examples(ck.index_absent)}; the index and shards are from different exports — re-download both",
        ))
    if ck.index_extra:
        out.append(_finding(
            "INDEX_SHARD_MISMATCH",
            "error",
            f"{len(ck.index_extra):,} tensor(s) in the shards are not in the index: {_examples(ck.index_extra)}; "
            "vLLM would not load them — re-download the index",
        ))
    return out


def check_layers(ck: Checkpoint) -> list[Finding]:
    """Every layer 0..num_hidden_layers-1 present, of the kind the config says, with attention and MLP."""
    cfg = ck.config
    layer_classes = ck.tensors.layer_classes
    out: list[Finding] = []
    expected = set(range(cfg.num_hidden_layers))
    present = set(layer_classes)
    gaps = sorted(expected - present)
    if gaps:
        out.append(_finding(
            "LAYER_GAP",
            "error",
            f"layers {_ranges(gaps)} of 0..{cfg.num_hidden_layers - 1} (num_hidden_layers) have no tensors; "
            "shards are missing or the config does not match the weights",
        ))
    beyond = sorted(present - expected)
    if beyond:
        out.append(_finding(
            "LAYER_OUT_OF_RANGE",
            "error",
            f"tensors for layers {_ranges(beyond)} but num_hidden_layers is {cfg.num_hidden_layers}; "
            "the config does not match the weights",
        ))
    mismatched: list[str] = []
    incomplete: list[str] = []
    for i in sorted(present & expected):
        kinds = layer_classes[i]
        want = cfg.layer_types[i]
        has_full, has_lin = "attention" in kinds, "linear_attention" in kinds
        if (want == "linear_attention" and has_full) or (want != "linear_attention" and has_lin):
            mismatched.append(f"{i} ({want} in config, {'self_attn' if has_full else 'linear_attn'} tensors)")
        elif not (has_full or has_lin):
            incomplete.append(f"{i} (no attention tensors)")
        elif not kinds & {"mlp", "moe_experts", "moe_router"}:
            incomplete.append(f"{i} (no MLP tensors)")
    if mismatched:
        out.append(_finding(
            "LAYER_TYPE_MISMATCH",
            "error",
            f"layer kind disagrees with layer_types/full_attention_interval for layers {_examples(mismatched)}; "
            "the config does not describe these weights",
        ))
    if incomplete:
        out.append(_finding(
            "LAYER_INCOMPLETE", "error",
            f"layers missing whole modules: {_examples(incomplete)}; re-download the checkpoint",
        ))
    return out


def check_embedding_and_head(ck: Checkpoint) -> list[Finding]:
    out: list[Finding] = []
    if ck.tensors.count_by_class["embedding"] == 0:
        out.append(_finding("EMBEDDING_MISSING", "error", "no embed_tokens tensor; the checkpoint is incomplete"))
    if not ck.lm_head_present and not ck.config.tie_word_embeddings:
        out.append(_finding(
            "LM_HEAD_MISSING", "error",
            "no lm_head tensor and tie_word_embeddings is false; the checkpoint is incomplete",
        ))
    return out


def check_mtp(ck: Checkpoint) -> list[Finding]:
    """The MTP draft the config advertises against the mtp tensors shipped (the index is the fact)."""
    declared, mtp = ck.config.mtp_num_hidden_layers, ck.mtp_tensor_count
    if declared > 0 and mtp == 0:
        return [_finding(
            "MTP_ADVERTISED_NOT_SHIPPED",
            "warning",
            f"config advertises {declared} MTP layer(s) but the checkpoint ships 0 mtp tensors: "
            "no speculative decoding — do not pass --speculative-config",
        )]
    if mtp == 0:
        return []
    out = [_finding(
        "MTP_PRESENT",
        "info",
        f"{mtp:,} MTP tensors shipped: serve with --speculative-config "
        "'{\"method\":\"mtp\",\"num_speculative_tokens\":1}' for self-speculation",
    )]
    if declared == 0:
        out.append(_finding(
            "MTP_NOT_DECLARED", "warning",
            f"{mtp:,} mtp tensors but the config declares no MTP layers; vLLM may not load them",
        ))
    return out


def check_vision(ck: Checkpoint) -> list[Finding]:
    """The vision tower the config declares against the visual tensors shipped."""
    cfg, visual = ck.config, ck.visual_tensor_count
    if cfg.has_vision_config and visual == 0:
        return [_finding(
            "VISION_CONFIG_WITHOUT_TOWER",
            "warning",
            "config declares a vision tower but the checkpoint ships no visual tensors: serve with --language-model-only",
        )]
    if visual == 0:
        return []
    expected = expected_vision_tensors(cfg.model_type, cfg.vision_depth)
    if expected is not None and visual != expected:
        out = [_finding(
            "VISION_TOWER_INCOMPLETE",
            "error",
            f"{visual} visual tensors but a {cfg.vision_depth}-block tower has {expected}; "
            "vLLM will fail on uninitialized visual.* parameters — re-download the checkpoint",
        )]
    else:
        out = [_finding(
            "VISION_TOWER_PRESENT",
            "info",
            f"{visual} visual tensors shipped: the tower must be built — do not pass --language-model-only",
        )]
    if not cfg.has_vision_config:
        out.append(_finding(
            "VISION_TOWER_WITHOUT_CONFIG", "warning",
            f"{visual} visual tensors but config.json has no vision_config; vLLM will ignore them",
        ))
    return out


def check_quantization(ck: Checkpoint) -> list[Finding]:
    """Quantized modules complete (NVFP4 scales of the right dtype and shape, FP8 scales) and declared."""
    q = ck.config.quantization or {}
    group_size = q.get("group_size")  # an int or None: roost.checkpoint.config checked it (-1: per channel)
    if type(group_size) is not int or group_size <= 0:
        group_size = 16
    nvfp4_issues: list[str] = []
    fp8_unscaled: list[str] = []
    for m in ck.tensors.quant_modules:
        if m.kind == "nvfp4":
            issues = nvfp4_problems(m.name, m.roles, group_size)
            nvfp4_issues += [f"{p} (and {m.count - 1:,} more like it)" if m.count > 1 else p for p in issues]
        elif m.kind == "fp8" and not m.roles.keys() & {"weight_scale", "weight_scale_inv"}:
            fp8_unscaled.append(m.name)
    quant = ck.tensors.quantization
    out: list[Finding] = []
    if nvfp4_issues:
        out.append(_finding(
            "NVFP4_INCOMPLETE", "error",
            f"{len(nvfp4_issues)} NVFP4 problem(s): {_examples(nvfp4_issues)}; the export is broken",
        ))
    if fp8_unscaled:
        out.append(_finding(
            "FP8_SCALE_MISSING", "error",
            f"FP8 weights without weight_scale: {_examples(fp8_unscaled)}; the export is broken",
        ))
    if (quant.nvfp4_modules or quant.fp8_modules) and not q:
        out.append(_finding(
            "QUANT_CONFIG_MISSING",
            "error",
            f"{quant.nvfp4_modules} NVFP4 and {quant.fp8_modules} FP8 modules on disk but config.json has no "
            "quantization_config (nor hf_quant_config.json); vLLM would load packed bytes as weights",
        ))
    if q and str(quant.method or "").lower() in ("modelopt", "fp8", "modelopt_fp4") and not (
        quant.nvfp4_modules or quant.fp8_modules
    ):
        out.append(_finding(
            "QUANT_TENSORS_MISSING", "error",
            f"quantization_config says {quant.method}/{quant.algo} but no quantized tensors are on disk",
        ))
    return out


_CONFIG_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def check_dtypes(ck: Checkpoint) -> list[Finding]:
    """One dtype per tensor name across layers, and the weights' dtype matching the config's."""
    out: list[Finding] = []
    mixed_ok = str(ck.tensors.quantization.algo or "").upper() == "MIXED_PRECISION"
    inconsistent = [f"{k}: {'/'.join(sorted(d))}" for k, d in ck.tensors.layer_name_dtypes.items() if len(d) > 1]
    if inconsistent:
        out.append(_finding(
            "DTYPE_INCONSISTENT",
            "info" if mixed_ok else "warning",
            f"the same tensor has different dtypes across layers for {len(inconsistent)} name(s): {_examples(inconsistent)}"
            + ("; expected for MIXED_PRECISION" if mixed_ok else "; check the export — vLLM casts them to --dtype"),
        ))
    float_bytes = ck.tensors.float_weight_bytes
    if float_bytes:
        main = max(float_bytes, key=lambda d: float_bytes[d])
        declared = _CONFIG_DTYPES.get(ck.config.dtype.removeprefix("torch."))
        if declared is not None and main != declared:
            out.append(_finding(
                "CONFIG_DTYPE_MISMATCH", "warning",
                f"config dtype is {ck.config.dtype} but most weights are {main}; pass --dtype explicitly",
            ))
    return out


CHECKS: tuple[Check, ...] = (
    check_shards,
    check_duplicates,
    check_index_entries,
    check_layers,
    check_embedding_and_head,
    check_mtp,
    check_vision,
    check_quantization,
    check_dtypes,
)
