"""The preflight plan for one checkpoint, pool and host: what vLLM will log, and whether it fits.

``plan_checkpoint`` takes an audit report (:func:`roost.plan.report.audit_for_host`: the headers are
read once), builds the KV spec vLLM will use with the derived arguments and the profile's overrides,
predicts the KV-cache lines for the pool and window asked for (:class:`PlanInputs`), and checks
weights + pool + headroom against the host's budget.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from roost.catalogue import DECODE_CEILING, KV_CACHE_TOKENS, MAX_CONCURRENCY
from roost.errors import StageFailed
from roost.hosts import HostProfile
from roost.plan.args import (
    VllmOverrides,
    derive_vllm_args,
    kv_cache_dtype_for,
    parse_overrides,
    serve_kv_model,
    served_as,
)
from roost.plan.fit import FitCheck, fit_check
from roost.plan.inputs import PlanInputs, ServingSettings
from roost.plan.kv import (
    KvModelSpec,
    KvPlan,
    KvRules,
    effective_pool,
    kv_model_from_config,
    plan_kv,
    pool_for_concurrency,
    rules_for_host,
)
from roost.plan.pool import (
    CPU_BACKEND_KVCACHE_GIB,
    ActivationDims,
    PoolPrediction,
    exact_pool,
    predict_cpu_pool,
    predict_pool,
)
from roost.plan.report import AuditReport, without_unset_source
from roost.units import format_memory
from roost.vllm import wordings as W


class PlanReport(BaseModel):
    """``roost plan --json``: the KV figures vLLM will log and the fit on the host."""

    path: str
    host: str
    rules: str = Field(description="Which vLLM build's sizing rules were applied.")
    architecture: str
    max_model_len: int = Field(description="The window the server serves (--max-model-len).")
    kv_cache_memory_bytes: int
    block_size: int
    kv_cache_tokens: int
    max_concurrency: float
    min_kv_cache_bytes: int = Field(description="Smallest pool that holds one request at max_model_len.")
    fits_one_request: bool
    fits_host: bool
    decode_ceiling_tok_s: float
    kv_bytes_per_token: int
    max_num_seqs: int | None = Field(default=None, description="The scheduler's cap on running requests (None: vLLM's default).")
    max_num_batched_tokens: int | None = Field(default=None, description="Tokens per scheduler step (None: vLLM's default).")
    kv: KvPlan
    fit: FitCheck
    vllm_args: list[str] = Field(description="The whole argument list a server gets: derived, the profile's settings, "
                                 "then the overrides (last one wins).")
    predicted_log_lines: list[str]
    gpu_memory_utilization: float | None = Field(
        default=None, description="The share of the device's memory vLLM sizes the pool from (None: a pinned pool).")
    pool: PoolPrediction = Field(description="How the pool is known: pinned (exact), or predicted from the "
                                 "utilization with its terms and range (vLLM logs the figure it took).")
    served_model_name: str = Field(default="", description="The name the server answers to (--served-model-name).")
    repo_id: str | None = Field(default=None, description="Planned from the Hub: the repository read.")
    commit: str | None = Field(default=None, description="Planned from the Hub: the commit the revision resolved to.")
    bytes_fetched: int | None = Field(default=None, description="Planned from the Hub: every byte read from the network.")

    def to_json(self) -> dict[str, Any]:
        """``roost plan --json``: the Hub fields (repo_id, commit, bytes_fetched) only for a preflight."""
        return without_unset_source(self.model_dump(mode="json"))

    def refusal(self) -> tuple[str, str] | None:
        """Why vLLM would refuse to start (or run out of memory) with this plan: a failure class
        (as ``roost.serve.diagnose`` names them) and what to change; None when it fits."""
        if self.pool.refusal is not None:
            return ("out_of_memory", f"vLLM would refuse to start: {self.pool.refusal}")
        if not self.fits_one_request:
            remedy = (f"raise --gpu-memory-utilization above {self.gpu_memory_utilization:g} or pin "
                      if self.gpu_memory_utilization is not None else "use ")
            return ("kv_pool_too_small",
                    f"a {self.kv_cache_memory_bytes:,}-byte KV pool cannot hold one {self.max_model_len:,}-token "
                    f"request; {remedy}--kv-cache-memory-bytes {self.min_kv_cache_bytes} or more")
        if not self.fits_host:
            return ("out_of_memory",
                    f"weights + KV pool + headroom need {self.fit.total_bytes:,} bytes, more than {self.host}'s "
                    f"{self.fit.usable_bytes:,}; use a smaller pool, a quantized build or a bigger host")
        return None

    def summary(self) -> str:
        lines = [
            f"{self.path} on {self.host} ({self.rules}): served as {self.served_model_name or '-'}, "
            f"max_model_len {self.max_model_len:,}, "
            f"pool {self.kv_cache_memory_bytes:,} bytes ({format_memory(self.kv_cache_memory_bytes)})"
            + (f", predicted from --gpu-memory-utilization {self.gpu_memory_utilization:g}"
               if self.gpu_memory_utilization is not None else ""),
            *([f"  pool: {format_memory(self.pool.low_bytes)} to {format_memory(self.pool.high_bytes)}; "
               f"{self.pool.exactness}"] if self.pool.low_bytes != self.pool.high_bytes else []),
            f"  block size {self.block_size}, {self.kv.num_blocks:,} blocks of {self.kv.bytes_per_block:,} bytes, "
            f"{self.kv.blocks_per_request} per request, {len(self.kv.groups)} group(s)",
            W.KV_CACHE_SIZE.line(f" {KV_CACHE_TOKENS.format(self.kv_cache_tokens)}; max concurrency "
                                 f"{MAX_CONCURRENCY.format(self.max_concurrency)}",
                                 before="  "),
            f"  one full request needs a pool of {self.min_kv_cache_bytes:,} bytes ({format_memory(self.min_kv_cache_bytes)}): "
            + ("fits" if self.fits_one_request else "DOES NOT FIT"),
            f"  host: weights {format_memory(self.fit.weight_bytes)} + pool {format_memory(self.fit.kv_cache_memory_bytes)} + "
            f"headroom {format_memory(self.fit.headroom_bytes)} = {format_memory(self.fit.total_bytes)} of "
            f"{format_memory(self.fit.usable_bytes)}: "
            + ("fits" if self.fits_host else "DOES NOT FIT"),
            f"  decode ceiling {DECODE_CEILING.format(self.decode_ceiling_tok_s)}",
            f"  scheduler: max-num-seqs {self.max_num_seqs or 'vLLM default'}, "
            f"max-num-batched-tokens {self.max_num_batched_tokens or 'vLLM default'}",
            "  vLLM args: " + " ".join(shlex.quote(a) for a in self.vllm_args),
            "  vLLM will log:",
            *[f"    {line}" for line in self.predicted_log_lines],
        ]
        return "\n".join(lines)


class PlanRefused(StageFailed):
    """The plan says vLLM cannot start as asked: caught before a cold load is spent on it."""

    def __init__(self, failure_class: str, remediation: str) -> None:
        super().__init__("audit", f"vLLM would not start: {remediation}")
        self.failure_class = failure_class
        self.remediation = remediation


def _utilization_pool(host: HostProfile, utilization: float, audit: AuditReport, *, env: Mapping[str, str] | None,
                      num_speculative_tokens: int, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                      enforce_eager: bool) -> PoolPrediction:
    """The pool vLLM sizes from ``utilization`` on ``host``: from the device's memory on a GPU host
    (:func:`roost.plan.pool.predict_pool`), from ``VLLM_CPU_KVCACHE_SPACE`` on a CPU host (the process
    backend sets it to ``CPU_BACKEND_KVCACHE_GIB`` for a server started without a pinned pool)."""
    if host.device_memory_bytes is None:
        cpu_env = {"VLLM_CPU_KVCACHE_SPACE": str(CPU_BACKEND_KVCACHE_GIB)} | dict(env or {})
        return predict_cpu_pool(cpu_env, gpu_memory_utilization=utilization)
    return predict_pool(device_total_bytes=host.device_memory_bytes, gpu_memory_utilization=utilization,
                        weight_bytes=audit.load_weight_bytes, dims=ActivationDims.from_config(audit.config), max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=max_num_batched_tokens, num_speculative_tokens=num_speculative_tokens,
                        multimodal=audit.visual_tensor_count > 0, enforce_eager=enforce_eager, env=env)


def _pinned_pool(pool: int, env_name: str | None) -> PoolPrediction:
    """A pool vLLM takes as given: ``--kv-cache-memory-bytes``, or the environment variable that replaces it."""
    how = f"{env_name} replaces --kv-cache-memory-bytes" if env_name else "--kv-cache-memory-bytes pins it"
    return exact_pool(pool, f"Exact: {how}.", "pinned")


def plan_checkpoint(
    audit: AuditReport,
    host: HostProfile,
    inputs: PlanInputs,
    env: Mapping[str, str] | None = None,
) -> PlanReport:
    """Predict vLLM's KV sizing and the host fit for the checkpoint ``audit`` describes.

    ``inputs.kv_cache_memory_bytes=None`` plans the smallest pool reaching ``target_concurrency``
    full-length requests. ``inputs.max_num_seqs`` / ``max_num_batched_tokens`` (a profile's serving
    settings) join the derived arguments. ``inputs.vllm_overrides`` (appended after those, so they win) may
    change the window, the pool, ``--dtype``, ``--kv-cache-dtype``, ``--block-size`` or prefix
    caching; the plan follows them. ``env`` is the server's environment: on the CPU backend
    ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) replaces ``--kv-cache-memory-bytes``, and the plan uses
    what vLLM will.
    """
    ov = parse_overrides(list(inputs.vllm_overrides))
    rules = rules_for_host(host)
    if ov.block_size is not None:
        rules = rules.model_copy(update={"default_block_size": ov.block_size})
    prefix = next((p for p in (ov.enable_prefix_caching, inputs.enable_prefix_caching) if p is not None), None)
    name, L = served_as(inputs, native_window=audit.config.max_position_embeddings, default_name=audit.served_model_name)
    kv_model = _served_kv_model(audit, rules, ov)
    min_pool = pool_for_concurrency(kv_model, rules, 1.0, L, enable_prefix_caching=prefix)
    sizing = _size_pool(audit, host, inputs, ov, env, rules=rules, kv_model=kv_model, max_model_len=L, prefix=prefix)
    kv = plan_kv(kv_model, rules, sizing.pool, L, enable_prefix_caching=prefix)
    argv = _server_argv(audit, inputs, rules, served_model_name=name, max_model_len=L, sizing=sizing, min_pool=min_pool)
    fit = fit_check(audit.load_weight_bytes, sizing.pool, host)
    return PlanReport(
        path=audit.path,
        host=host.name,
        rules=rules.name,
        architecture=audit.architecture,
        served_model_name=name,
        max_model_len=kv.max_model_len,
        kv_cache_memory_bytes=sizing.pool,
        block_size=kv.block_size,
        kv_cache_tokens=kv.kv_cache_tokens,
        max_concurrency=kv.max_concurrency,
        min_kv_cache_bytes=min_pool,
        fits_one_request=kv.fits_one_request,
        fits_host=fit.fits,
        decode_ceiling_tok_s=audit.decode_ceiling_tok_s,
        kv_bytes_per_token=kv.kv_bytes_per_token,
        max_num_seqs=ov.max_num_seqs or inputs.max_num_seqs,
        max_num_batched_tokens=ov.max_num_batched_tokens or inputs.max_num_batched_tokens,
        kv=kv,
        fit=fit,
        vllm_args=argv,
        # a GPU sizes a utilization pool itself and says so first (vLLM's KV_POOL_GPU line, roost.vllm.wordings)
        predicted_log_lines=([sizing.prediction.log_line, *kv.log_lines] if sizing.utilization and host.device_memory_bytes
                             else kv.log_lines),
        gpu_memory_utilization=sizing.utilization,
        pool=sizing.prediction,
        repo_id=audit.repo_id,
        commit=audit.commit,
        bytes_fetched=audit.bytes_fetched,
    )


def _served_kv_model(audit: AuditReport, rules: KvRules, ov: VllmOverrides) -> KvModelSpec:
    """The KV spec of the model as served: the derived arguments' speculative tokens, the overrides'
    ``--dtype`` / ``--kv-cache-dtype`` (else the checkpoint's)."""
    cfg = audit.config
    base = serve_kv_model(cfg, rules, mtp_tensor_count=audit.mtp_tensor_count)
    return kv_model_from_config(
        cfg,
        rules,
        dtype=ov.dtype if ov.dtype not in (None, "auto") else None,
        kv_cache_dtype=ov.kv_cache_dtype or kv_cache_dtype_for(cfg),
        num_speculative_tokens=base.num_speculative_tokens,
    )


class _PoolSizing(NamedTuple):
    """How the plan's pool was chosen."""

    requested: int
    """The pool asked for: pinned, predicted from the utilization, or the smallest for the target concurrency."""
    pool: int
    """The pool vLLM will use (on the CPU backend ``VLLM_CPU_KVCACHE_SPACE`` replaces ``requested``)."""
    utilization: float | None
    """The ``--gpu-memory-utilization`` vLLM sizes the pool from (None: the pool is pinned)."""
    prediction: PoolPrediction


def _size_pool(audit: AuditReport, host: HostProfile, inputs: PlanInputs, ov: VllmOverrides,
               env: Mapping[str, str] | None, *, rules: KvRules, kv_model: KvModelSpec, max_model_len: int,
               prefix: bool | None) -> _PoolSizing:
    """The pool: a pinned one as given; else one vLLM sizes from the utilization; else the smallest
    reaching ``inputs.target_concurrency`` full-length requests (pinned in the arguments)."""
    requested = ov.kv_cache_memory_bytes or inputs.kv_cache_memory_bytes
    utilization = (ov.gpu_memory_utilization or inputs.gpu_memory_utilization) if requested is None else None
    if utilization is not None:
        prediction = _utilization_pool(
            host, utilization, audit, env=env, num_speculative_tokens=kv_model.num_speculative_tokens,
            max_num_seqs=ov.max_num_seqs or inputs.max_num_seqs, enforce_eager=bool(ov.enforce_eager),
            max_num_batched_tokens=ov.max_num_batched_tokens or inputs.max_num_batched_tokens)
        requested = prediction.predicted_bytes
    elif requested is None:
        requested = pool_for_concurrency(kv_model, rules, inputs.target_concurrency, max_model_len,
                                         enable_prefix_caching=prefix)
    pool = effective_pool(rules, requested, env)
    if utilization is None:
        prediction = _pinned_pool(pool, rules.pool_env if pool != requested else None)
    return _PoolSizing(requested, pool, utilization, prediction)


def _server_argv(audit: AuditReport, inputs: PlanInputs, rules: KvRules, *, served_model_name: str, max_model_len: int,
                 sizing: _PoolSizing, min_pool: int) -> list[str]:
    """The whole argument list a server gets: derived, the profile's settings, then the overrides."""
    args = derive_vllm_args(
        audit.config,
        rules,
        visual_tensor_count=audit.visual_tensor_count,
        mtp_tensor_count=audit.mtp_tensor_count,
        served_model_name=served_model_name,
        max_model_len=max_model_len,
        kv_cache_memory_bytes=max(sizing.requested, min_pool),
        max_num_seqs=inputs.max_num_seqs,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        serving=ServingSettings.model_validate(inputs.model_dump(include=set(ServingSettings.model_fields))
                                               | {"gpu_memory_utilization": sizing.utilization}),
    )
    # The pool asked for stays in the args even when it is too small (derived at the minimum to pass
    # its own check): the plan reports the refusal.
    return [*args.model_copy(update={"kv_cache_memory_bytes": sizing.requested}).to_argv(), *inputs.vllm_overrides]
