"""The audit report for a host: what ``roost audit --json`` prints and the audit task returns.

A checkpoint audit (:func:`roost.checkpoint.audit.audit_checkpoint`: headers, config, findings) knows
nothing of hosts. ``audit_report`` adds what serving on one host means: the vLLM arguments the
checkpoint needs (with the smallest KV pool for a target concurrency at the window served), the
weights vLLM will load with them, the fit on the host (DOES_NOT_FIT_HOST), the decode ceiling against
the host's bandwidth, and the KV bytes per token as vLLM will store them. ``audit_for_host`` does both.

Given what a profile asks for (:class:`~roost.plan.inputs.PlanInputs`), the report names the model and
the window as the plan and the landing will serve them (:func:`roost.plan.args.served_as`: the
overrides, then the profile's settings, then the checkpoint's own), so an audit never says 4,096 tokens
where the server gets 2,048; ``native_max_model_len`` keeps the config's window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from roost.catalogue import DECODE_CEILING
from roost.checkpoint.audit import CheckpointAudit, audit_checkpoint
from roost.checkpoint.config import ModelConfigInfo
from roost.checkpoint.files import CheckpointFiles
from roost.checkpoint.findings import Finding
from roost.checkpoint.layout import TENSOR_CLASSES
from roost.checkpoint.model import ExpertLayout, QuantSummary
from roost.hosts import HostProfile
from roost.plan.args import derive_vllm_args, serve_kv_model, served_as
from roost.plan.fit import decode_ceiling_tok_s, fit_check, fit_findings, load_weight_bytes
from roost.plan.inputs import PlanInputs
from roost.plan.kv import rules_for_host
from roost.units import GB, KiB, format_bytes, format_memory


class AuditReport(BaseModel):
    """Everything the audit established about one checkpoint directory for one host.

    ``config`` (what the plan sizes the KV cache from) rides along for :func:`roost.plan.preflight.plan_checkpoint`;
    it is not part of the JSON document (``to_json``, ``model_dump``), and pickling keeps it.
    """

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
    decode_bytes_per_token: int = Field(description="Weight bytes one decode step reads (see roost.checkpoint.model.decode_bytes_per_token).")
    decode_ceiling_tok_s: float = Field(description="host bandwidth / decode_bytes_per_token.")
    kv_bytes_per_token: int = Field(description="K+V of one token over all full-attention layers as vLLM will store it.")
    max_model_len: int = Field(description="The window served: the overrides' --max-model-len, else the profile's "
                               "max_model_len, else the native window (as the plan and the landing use it).")
    findings: list[Finding]
    vllm_args: list[str]
    kv_cache_memory_bytes: int = Field(description="The pool in vllm_args: smallest for the target concurrency.")
    load_weight_bytes: int = Field(description="Weights vLLM will load with vllm_args (tower/MTP dropped when unused).")
    audit_seconds: float
    native_max_model_len: int = Field(default=0, description="The checkpoint's own window (max_position_embeddings).")
    repo_id: str | None = Field(default=None, description="Preflight from the Hub: the repository read.")
    commit: str | None = Field(default=None, description="Preflight from the Hub: the commit the revision resolved to.")
    bytes_fetched: int | None = Field(default=None, description="Preflight from the Hub: every byte read from the network.")
    config: ModelConfigInfo = Field(exclude=True, repr=False)

    @property
    def errors(self) -> list[Finding]:
        """The findings with severity ``error`` (any one stops a landing; ``roost audit`` exits 1)."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def has_errors(self) -> bool:
        return bool(self.errors)

    def to_json(self) -> dict[str, Any]:
        """``roost audit --json``: the Hub fields (repo_id, commit, bytes_fetched) only for a preflight."""
        return without_unset_source(self.model_dump(mode="json"))

    def from_hub(self, repo_id: str, commit: str, bytes_fetched: int) -> AuditReport:
        """This report, marked as read from the Hub (a preflight): the JSON then carries the three fields."""
        return self.model_copy(update={"repo_id": repo_id, "commit": commit, "bytes_fetched": bytes_fetched})

    def summary(self) -> str:
        lines = [
            f"{self.path}: {self.architecture} ({self.model_type}), {self.shard_count} shard(s)"
            + (f", read from the Hub ({format_bytes(self.bytes_fetched)} fetched)" if self.bytes_fetched is not None
               else ""),
            f"  tensors: {self.tensor_count:,} (index {self.index_tensor_count:,}, visual {self.visual_tensor_count:,}, "
            f"mtp {self.mtp_tensor_count:,})",
            f"  layers: {self.num_hidden_layers} ({self.full_attention_layers} full attention, "
            f"{self.linear_attention_layers} linear)"
            + (f"; MoE {self.num_experts} experts top-{self.num_experts_per_tok} ({self.expert_layout})" if self.num_experts else ""),
            f"  weights: {format_memory(self.weight_bytes)} ({self.weight_bytes:,} bytes)",
        ]
        for cls, b in sorted(self.weight_bytes_by_class.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {cls:<20} {format_memory(b):>12}")
        lines += [
            f"  decode reads {self.decode_bytes_per_token / GB:.2f} GB/token -> ceiling "
            f"{DECODE_CEILING.format(self.decode_ceiling_tok_s)} on {self.host}",
            f"  KV cache: {self.kv_bytes_per_token / KiB:.0f} KiB/token",
            "  findings:" if self.findings else "  findings: none",
        ]
        lines += [f"    [{f.severity}] {f.code}: {f.message}" for f in self.findings]
        lines.append("  vllm args: " + " ".join(_quote(a) for a in self.vllm_args))
        return "\n".join(lines)


SOURCE_FIELDS = ("repo_id", "commit", "bytes_fetched")
"""What a report read from the Hub adds to the JSON of a local one."""


def without_unset_source(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without the Hub fields when they are unset (a local audit's JSON is unchanged)."""
    for key in SOURCE_FIELDS:
        if doc.get(key) is None:
            doc.pop(key, None)
    return doc


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in " {}\"") else arg


def audit_report(
    audit: CheckpointAudit,
    host: HostProfile,
    *,
    inputs: PlanInputs | None = None,
    served_model_name: str | None = None,
    max_model_len: int | None = None,
    target_concurrency: float = 1.0,
) -> AuditReport:
    """The report for serving the audited checkpoint on ``host``: with ``inputs`` (a profile's plan inputs),
    their name, window and target concurrency as the plan takes them (:func:`roost.plan.args.served_as`);
    else ``served_model_name`` (the directory's name), ``max_model_len`` (the native window) and
    ``target_concurrency``."""
    t0 = time.perf_counter()
    ck = audit.checkpoint
    cfg = ck.config
    rules = rules_for_host(host)
    if inputs is not None:
        served_model_name, max_model_len = served_as(inputs, native_window=cfg.max_position_embeddings,
                                                     default_name=served_model_name or ck.name)
        target_concurrency = inputs.target_concurrency
    args = derive_vllm_args(
        cfg,
        rules,
        visual_tensor_count=ck.visual_tensor_count,
        mtp_tensor_count=ck.mtp_tensor_count,
        served_model_name=served_model_name or ck.name,
        max_model_len=max_model_len,
        target_concurrency=target_concurrency,
    )
    stats = ck.tensors
    load_bytes = load_weight_bytes(stats.bytes_by_class, args)
    fit = fit_check(load_bytes, args.kv_cache_memory_bytes, host)
    return AuditReport(
        path=ck.location,
        host=host.name,
        architecture=cfg.architecture,
        model_type=cfg.model_type,
        served_model_name=args.served_model_name,
        shard_count=len(ck.shards_read),
        has_index=ck.has_index,
        tensor_count=stats.count,
        index_tensor_count=ck.index_tensor_count,
        visual_tensor_count=ck.visual_tensor_count,
        mtp_tensor_count=ck.mtp_tensor_count,
        tensor_count_by_class={c: stats.count_by_class[c] for c in TENSOR_CLASSES if stats.count_by_class[c]},
        num_hidden_layers=cfg.num_hidden_layers,
        full_attention_layers=cfg.full_attention_layers,
        linear_attention_layers=cfg.linear_attention_layers,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.num_experts_per_tok,
        expert_layout=ck.expert_layout,
        quantization=stats.quantization,
        weight_bytes=ck.weight_bytes,
        weight_bytes_by_class={c: b for c, b in stats.bytes_by_class.items()},
        weight_bytes_by_dtype=stats.bytes_by_dtype,
        decode_bytes_per_token=ck.decode_bytes_per_token,
        decode_ceiling_tok_s=decode_ceiling_tok_s(ck.decode_bytes_per_token, host),
        kv_bytes_per_token=serve_kv_model(cfg, rules, mtp_tensor_count=ck.mtp_tensor_count).kv_bytes_per_token,
        max_model_len=args.max_model_len,
        native_max_model_len=cfg.max_position_embeddings,
        findings=[*audit.findings, *fit_findings(fit, host)],
        vllm_args=args.to_argv(),
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        load_weight_bytes=load_bytes,
        audit_seconds=audit.seconds + time.perf_counter() - t0,
        config=cfg,
    )


def audit_for_host(
    path: Path | CheckpointFiles,
    host: HostProfile,
    *,
    inputs: PlanInputs | None = None,
    expected_headers: Mapping[str, str] | None = None,
) -> AuditReport:
    """Audit the checkpoint (a directory, or what a Hub preflight fetched; headers and config only) for
    serving on ``host``, as ``inputs`` ask (a profile's: its name and window; None: the directory's name
    and the native window). ``expected_headers``: the header digests a preflight read (HEADER_CHANGED)."""
    return audit_report(audit_checkpoint(path, expected_headers=expected_headers), host, inputs=inputs)
