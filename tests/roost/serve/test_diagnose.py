"""The cold-load failure classifier on log excerpts.

Excerpts in tests/roost/serve/logs/ were captured from real runs (named by what produced them);
the others are vLLM 0.32's own message formats (vllm/v1/core/kv_cache_utils.py,
model_executor/model_loader/default_loader.py, model_executor/models/utils.py) and the recipes'
troubleshooting quotes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.serve.diagnose import RETRYABLE, compile_cache_entry, diagnose, diagnose_exit

LOGS = Path(__file__).parent / "logs"

# vLLM 0.32's text (note the stray "(" before the size, from its f-string).
KV_032 = (
    "(EngineCore pid=231) ERROR 11-30 08:41:07 [core.py:1099] ValueError: To serve at least one request with the "
    "model's max seq len (262144), (5.12 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(4.0 GiB). Based on the available memory, the estimated maximum model length is 204800. Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when "
    "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
# The recipes' quote (older vLLM, no stray parenthesis, unspecified decimals).
KV_RECIPE = (
    "To serve at least one request with the model's max seq len (262144), 5.xx GiB KV cache is needed, which is "
    "larger than the available KV cache memory (4.0 GiB)."
)
KV_ORNITH_9B_RECIPE = (
    "To serve at least one request with the model's max seq len (262144), 8.13 GiB KV cache is needed, which is "
    "larger than the available KV cache memory"
)
VISUAL_UNINIT = (
    "(EngineCore pid=90) ERROR 11-30 09:02:11 [core.py:1099] ValueError: Following weights were not initialized from "
    "checkpoint: {'visual.blocks.0.attn.qkv.weight', 'visual.blocks.0.norm1.weight', 'visual.merger.linear_fc1.bias', "
    "'visual.patch_embed.proj.weight'}"
)
NO_VISUAL = (
    "(EngineCore pid=90) ERROR 11-30 09:03:40 [core.py:1099] ValueError: There is no module or parameter named "
    "'visual' in Qwen3_5ForConditionalGeneration. The available parameters belonging to  (Qwen3_5ForConditionalGeneration) "
    "are: {'language_model.model.embed_tokens.weight'}"
)
NO_VISUAL_RECIPE = "ValueError: There is no module or parameter named visual in Qwen3_5ForConditionalGeneration"
MTP_MISSING = (
    "(EngineCore pid=77) INFO 11-30 09:10:01 [gpu_model_runner.py:5071] Loading drafter model...\n"
    "(EngineCore pid=77) ERROR 11-30 09:10:03 [core.py:1099] ValueError: Following weights were not initialized from "
    "checkpoint: {'model.fc.weight', 'model.pre_fc_norm_embedding.weight', 'model.pre_fc_norm_hidden.weight', "
    "'model.layers.0.self_attn.qkv_proj.weight'}"
)
CUDA_OOM = (
    "(EngineCore pid=12) ERROR 11-30 09:20:00 [core.py:1099] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 2.00 GiB. GPU 0 has a total capacity of 119.70 GiB of which 1.02 GiB is free."
)
CPU_MEM = (
    "ValueError: Available memory on node 0 (3.1/23.54 GiB) on kv cache allocation is less than requested memory "
    "for kv (8.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes."
)
PORT_VLLM = "OSError: [Errno 98] Address already in use"
STILL_LOADING = (
    "(EngineCore pid=5) INFO 11-30 10:00:00 [default_loader.py:300] Loading safetensors checkpoint shards:  40% "
    "Completed | 6/15 [03:01<04:32, 30.21s/it]"
)
HEALTHY = "(APIServer pid=1) INFO:     Application startup complete.\n"


def test_kv_pool_too_small_032_text_parses_needed_and_available() -> None:
    d = diagnose(KV_032, 1)
    assert d is not None and d.failure_class == "kv_pool_too_small" and not d.retryable
    assert (d.needed_kv_gib, d.available_kv_gib, d.max_model_len) == (5.12, 4.0, 262144)
    assert d.suggested_kv_cache_bytes == 6 * 1024**3 and d.estimated_max_model_len == 204800
    assert "--kv-cache-memory-bytes" in d.remediation and "6442450944" in d.remediation
    assert d.evidence.startswith("(EngineCore pid=231) ERROR") and "5.12 GiB KV cache is needed" in d.evidence


def test_kv_pool_too_small_recipe_quotes() -> None:
    d = diagnose(KV_RECIPE)
    assert d is not None and d.failure_class == "kv_pool_too_small"
    assert d.needed_kv_gib is None and d.available_kv_gib == 4.0 and d.suggested_kv_cache_bytes is None
    d9 = diagnose(KV_ORNITH_9B_RECIPE)
    assert d9 is not None and d9.needed_kv_gib == 8.13 and d9.suggested_kv_cache_bytes == 9 * 1024**3


def test_kv_real_cpu_capture() -> None:
    text = (LOGS / "kv-too-small.cpu-container.log").read_text()
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == "kv_pool_too_small"
    # --kv-cache-memory-bytes 1048576 on the tiny model: vLLM prints both sizes rounded to 0.0 GiB
    assert (d.needed_kv_gib, d.available_kv_gib, d.max_model_len) == (0.0, 0.0, 2048)
    assert d.estimated_max_model_len == 384  # vLLM's own estimate for a 1 MiB pool
    assert d.suggested_kv_cache_bytes == 1024**3  # never below 1 GiB, never below what was printed
    assert "EngineCore failed to start" not in d.evidence and "KV cache is needed" in d.evidence


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        (VISUAL_UNINIT, "visual_uninitialized"),
        (NO_VISUAL, "language_model_only_with_tower"),
        (NO_VISUAL_RECIPE, "language_model_only_with_tower"),
        (MTP_MISSING, "mtp_weights_missing"),
        (CUDA_OOM, "out_of_memory"),
        (CPU_MEM, "out_of_memory"),
        (PORT_VLLM, "port_in_use"),
    ],
)
def test_each_class_from_its_line(text: str, cls: str) -> None:
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == cls
    assert d.retryable is RETRYABLE[cls]
    assert d.evidence == text.splitlines()[-1].strip()  # the deciding line, whole
    assert d.remediation.endswith(".") and d.remediation.count(". ") == 0  # one sentence


def test_visual_remediation_names_the_flag_both_ways() -> None:
    uninit, tower = diagnose(VISUAL_UNINIT, 1), diagnose(NO_VISUAL, 1)
    assert uninit is not None and "serve it with --language-model-only" in uninit.remediation
    assert tower is not None and "drop --language-model-only" in tower.remediation


def test_not_initialized_without_visual_or_mtp_is_unknown() -> None:
    text = "ValueError: Following weights were not initialized from checkpoint: {'model.layers.3.mlp.gate_proj.weight'}"
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == "unknown" and not d.retryable
    assert d.evidence == text


def test_oom_killed_container_without_log_line() -> None:
    d = diagnose("Loading weights...\n", 137, oom_killed=True)
    assert d is not None and d.failure_class == "out_of_memory" and d.retryable
    assert d.evidence == "container exited with status 137 and OOMKilled=true" and d.exit_code == 137


def test_exit_137_without_oom_flag_is_not_called_oom() -> None:
    d = diagnose("Loading weights...\n", 137)
    assert d is not None and d.failure_class == "unknown"


def test_docker_port_errors() -> None:
    for text in [
        "driver failed programming external connectivity on endpoint roost-cpu-tiny: Error starting userland proxy: "
        "listen tcp4 127.0.0.1:8000: bind: address already in use",
        "Bind for 127.0.0.1:8000 failed: port is already allocated",
    ]:
        d = diagnose(text)
        assert d is not None and d.failure_class == "port_in_use" and d.retryable and d.evidence == text


def test_health_timeout_only_when_nothing_failed() -> None:
    d = diagnose(STILL_LOADING, None, timed_out=True)
    assert d is not None and d.failure_class == "health_timeout" and d.retryable
    assert d.evidence == STILL_LOADING  # the last line it logged
    crashed = diagnose(STILL_LOADING + "\nTraceback (most recent call last):\nRuntimeError: boom\n", None, timed_out=True)
    assert crashed is not None and crashed.failure_class == "unknown"
    assert crashed.evidence == "RuntimeError: boom"


def test_specific_line_beats_exit_status_and_generic_failure() -> None:
    text = "Traceback (most recent call last):\n" + KV_032 + "\nRuntimeError: Engine core initialization failed. See root cause above."
    d = diagnose(text, 1, oom_killed=False)
    assert d is not None and d.failure_class == "kv_pool_too_small"


def test_no_failure_is_none() -> None:
    assert diagnose(HEALTHY, None) is None
    assert diagnose(HEALTHY, 0) is None
    assert diagnose("", None) is None


def test_unknown_failure_reports_the_error_line() -> None:
    text = "INFO starting\nTraceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'rope_scaling'\n"
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == "unknown" and d.evidence == "KeyError: 'rope_scaling'"


# One real line per wording and the release it comes from; each built from the format string in vLLM's
# source at that tag (file and tag in the comment), with the values of a plausible failing start.
WORDINGS: list[tuple[str, str, str]] = [
    # v0.7.3 vllm/v1/core/kv_cache_utils.py: "models's", sizes in "GB" (divided by 1024**3), no estimate
    ("kv_pool_too_small", "v0.7.3",
     "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GB KV cache is needed, "
     "which is larger than the available KV cache memory (9.81 GB). Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine."),
    # v0.8.5 vllm/v1/core/kv_cache_utils.py: GiB, and the estimate's f-string dropped by a missing parenthesis
    ("kv_pool_too_small", "v0.8.5",
     "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
     "needed, which is larger than the available KV cache memory (9.81 GiB). Based on the available memory,  Try "
     "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."),
    # v0.11.0 vllm/v1/core/kv_cache_utils.py (same text in v0.10.2): "%.2f" sizes and the estimate
    ("kv_pool_too_small", "v0.11.0",
     "(EngineCore_DP0 pid=812) ValueError: To serve at least one request with the models's max seq len (131072), "
     "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.81 GiB). Based on the "
     "available memory, the estimated maximum model length is 80352. Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine."),
    # v0.18.0 vllm/v1/core/kv_cache_utils.py (same in v0.14.0): format_gib() rounds ("16.0"), docs link
    ("kv_pool_too_small", "v0.18.0",
     "(EngineCore_DP0 pid=812) ValueError: To serve at least one request with the models's max seq len (131072), "
     "(16.0 GiB KV cache is needed, which is larger than the available KV cache memory (9.81 GiB). Based on the "
     "available memory, the estimated maximum model length is 80352. Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine. See "
     "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    # v0.24.0 vllm/v1/core/kv_cache_utils.py (NGC 26.07): "model's", the CPU note
    ("kv_pool_too_small", "v0.24.0",
     "(EngineCore pid=231) ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB "
     "KV cache is needed, which is larger than the available KV cache memory (9.81 GiB). Based on the available "
     "memory, the estimated maximum model length is 80352. Try increasing `gpu_memory_utilization` (which also "
     "controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See "
     "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    # v0.7.3 vllm/worker/worker.py raise_if_cache_size_invalid (V0 engine, to v0.10.2): the pool in tokens
    ("kv_pool_too_small", "v0.7.3",
     "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in "
     "KV cache (80352). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
     "engine."),
    # v0.9.2 vllm/worker/cpu_worker.py (V0 CPU)
    ("kv_pool_too_small", "v0.9.2",
     "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in "
     "KV cache (80352). Try increasing `VLLM_CPU_KVCACHE_SPACE` or decreasing `max_model_len` when initializing the "
     "engine."),
    # v0.8.5 vllm/worker/cpu_worker.py
    ("kv_pool_too_small", "v0.8.5",
     "ValueError: No available memory for the cache blocks. Try increasing `VLLM_CPU_KVCACHE_SPACE` when "
     "initializing the engine."),
    # v0.24.0 vllm/v1/core/kv_cache_utils.py
    ("kv_pool_too_small", "v0.24.0",
     "(EngineCore pid=231) ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the "
     "CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
     "details."),
    # v0.24.0 vllm/v1/core/kv_cache_utils.py (auto-fit, from v0.14.0)
    ("kv_pool_too_small", "v0.24.0",
     "(EngineCore pid=231) ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even "
     "a single token. Try increasing `gpu_memory_utilization`."),
    # v0.7.3 vllm/model_executor/model_loader/loader.py (the same text in every loader to v0.32)
    ("visual_uninitialized", "v0.7.3",
     "ValueError: Following weights were not initialized from checkpoint: {'visual.blocks.0.attn.qkv.weight', "
     "'visual.merger.mlp.0.weight'}"),
    # v0.7.3 vllm/model_executor/models/utils.py AutoWeightsLoader (quoted prefix, no parameter list before v0.18)
    ("language_model_only_with_tower", "v0.7.3",
     "ValueError: There is no module or parameter named 'visual' in Qwen2_5_VLForConditionalGeneration"),
    # v0.24.0 vllm/model_executor/models/utils.py ({prefix!r}, the available parameters listed)
    ("language_model_only_with_tower", "v0.24.0",
     "(EngineCore pid=90) ValueError: There is no module or parameter named 'model.visual' in "
     "Qwen3_5MoeForConditionalGeneration. The available parameters belonging to model (Qwen3_5MoeModel) are: "
     "{'model.language_model.embed_tokens.weight'}"),
    # v0.7.3 vllm/model_executor/models/qwen2.py Qwen2Model.load_weights: `param = params_dict[name]`
    ("language_model_only_with_tower", "v0.7.3", "KeyError: 'visual.blocks.0.attn.qkv.weight'"),
    # v0.18.0 vllm/model_executor/models/deepseek_mtp.py (also v0.24.0)
    ("mtp_weights_missing", "v0.18.0",
     "(EngineCore_DP0 pid=77) ValueError: MTP speculative decoding layer 61 weights missing from checkpoint. The "
     "checkpoint may have been quantized without including the MTP layers. Use a checkpoint that includes MTP layer "
     "weights, or disable speculative decoding."),
    # torch >= 2.5 (every vLLM from v0.7): the allocator's own error
    ("out_of_memory", "v0.7.3",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacity of 119.70 "
     "GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 118.30 GiB memory in use."),
    # v0.24.0 vllm/v1/worker/gpu_model_runner.py load_model (from v0.14.0)
    ("out_of_memory", "v0.24.0",
     "(EngineCore pid=231) ERROR 07-27 10:00:00 [gpu_model_runner.py:5253] Failed to load model - not enough GPU "
     "memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, "
     "or using --quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. "
     "(original error: CUDA out of memory. Tried to allocate 2.00 GiB.)"),
    # v0.9.2 vllm/v1/worker/gpu_worker.py init_device (v0.14.0+ adds the device: "on device cuda:0 (...)")
    ("out_of_memory", "v0.9.2",
     "ValueError: Free memory on device (10.2/119.7 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 107.73 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    # v0.24.0 vllm/v1/worker/utils.py request_memory
    ("out_of_memory", "v0.24.0",
     "(EngineCore pid=231) ValueError: Free memory on device cuda:0 (10.2/119.7 GiB) on startup is less than desired "
     "GPU memory utilization (0.9, 107.73 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
     "processes."),
    # v0.24.0 vllm/v1/worker/cpu_worker.py (CPU build, no --kv-cache-memory-bytes)
    ("out_of_memory", "v0.24.0",
     "(EngineCore pid=25) ValueError: Available memory on node 0 (3.1/23.54 GiB) on startup is less than desired CPU "
     "memory utilization (0.9, 21.19 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the "
     "fraction of CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. "
     "`--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes."),
    # v0.11.0 vllm/attention/layer.py (and model_executor/layers/linear.py: "... to allocate the weight.")
    ("out_of_memory", "v0.11.0",
     "RuntimeError: Failed to initialize q/k/v range constants. This may be caused by insufficient memory to "
     "allocate kv cache."),
    # v0.7.3 vllm/v1/worker/gpu_worker.py determine_num_available_blocks
    ("out_of_memory", "v0.7.3",
     "AssertionError: Error in memory profiling. Initial free memory 120312168448, current free memory 121345234944. "
     "This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance."),
    # v0.24.0 vllm/v1/worker/gpu_worker.py determine_available_memory
    ("out_of_memory", "v0.24.0",
     "AssertionError: Error in memory profiling. Initial free memory 10.2 GiB, current free memory 11.5 GiB. This "
     "happens when other processes sharing the same container release GPU memory while vLLM is profiling during "
     "initialization. To fix this, ensure consistent GPU memory allocation or isolate vLLM in its own container."),
    # v0.24.0 vllm/third_party/pynvml.py: NVML_ERROR_MEMORY's text
    ("out_of_memory", "v0.24.0", "vllm.third_party.pynvml.NVMLError_Memory: Insufficient Memory"),
]


@pytest.mark.parametrize(("cls", "release", "line"), WORDINGS, ids=[f"{c}-{r}-{i}" for i, (c, r, _) in enumerate(WORDINGS)])
def test_every_release_wording_is_recognised(cls: str, release: str, line: str) -> None:
    text = "Traceback (most recent call last):\n  File \"core.py\", line 1\n" + line + "\n"
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == cls, (release, line)
    assert d.retryable is RETRYABLE[cls]
    assert d.evidence == (line if len(line) <= 500 else line[:497] + "...")  # the deciding line, capped
    assert d.remediation.endswith(".") and d.remediation.count(". ") == 0


@pytest.mark.parametrize(
    ("release", "need", "avail", "estimate"),
    [("v0.7.3", 16.0, 9.81, None), ("v0.8.5", 16.0, 9.81, None), ("v0.11.0", 16.0, 9.81, 80352),
     ("v0.18.0", 16.0, 9.81, 80352), ("v0.24.0", 16.0, 9.81, 80352)],
)
def test_kv_sizes_parse_in_every_release(release: str, need: float, avail: float, estimate: int | None) -> None:
    line = next(t for c, r, t in WORDINGS if r == release and "To serve at least one request" in t)
    d = diagnose(line, 1)
    assert d is not None and (d.needed_kv_gib, d.available_kv_gib, d.max_model_len) == (need, avail, 131072)
    assert d.estimated_max_model_len == estimate
    assert d.suggested_kv_cache_bytes == 17 * 1024**3 and "18253611008" in d.remediation


def test_v0_kv_wording_keeps_the_window_and_what_fits() -> None:
    line = next(t for c, r, t in WORDINGS if "can be stored in KV cache" in t)
    d = diagnose(line, 1)
    assert d is not None and (d.max_model_len, d.estimated_max_model_len) == (131072, 80352)
    assert d.needed_kv_gib is None and d.suggested_kv_cache_bytes is None
    assert "131072-token request" in d.remediation and "holds 80352" in d.remediation


def test_keyerror_on_a_tower_weight_names_both_ways_out() -> None:
    d = diagnose("KeyError: 'visual.blocks.0.attn.qkv.weight'", 1)
    assert d is not None and d.failure_class == "language_model_only_with_tower"
    assert "drop --language-model-only" in d.remediation and "vision-language architecture" in d.remediation
    other = diagnose("KeyError: 'model.layers.40.mlp.gate.weight'", 1)  # not a tower weight: not this class
    assert other is not None and other.failure_class == "unknown"


def test_an_argument_the_release_does_not_know_is_unknown_with_argparse_line() -> None:
    # vLLM before v0.18.0 has no --language-model-only (vllm/engine/arg_utils.py): argparse exits with status 2
    text = ("usage: api_server.py [-h] [--host HOST] [--port PORT]\n"
            "api_server.py: error: unrecognized arguments: --language-model-only\n")
    d = diagnose(text, 2)
    assert d is not None and d.failure_class == "unknown"
    assert d.evidence == "api_server.py: error: unrecognized arguments: --language-model-only"


def test_unexpected_keyword_argument_is_unknown_with_its_line() -> None:
    text = ("Traceback (most recent call last):\n"
            "TypeError: Qwen3_5MoeForConditionalGeneration.__init__() got an unexpected keyword argument 'prefix'\n")
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == "unknown" and "unexpected keyword argument" in d.evidence


# Captured here: vllm-cpu 0.32 started on a compile cache (VLLM_CACHE_ROOT=/tmp/race/c1) that an earlier
# server of the same configuration, stopped 25 s into "Warming up model for the compilation", had left
# with a 0-byte kernel library; every later start of that configuration died the same way.
CACHE_HASH_DIR = "/tmp/race/c1/torch_compile_cache/torch_aot_compile/37a562c7c621a2c60a9afb5f2f696d6c8fa11dc5ae50b6a83b361a96371cf54e"


def test_half_written_compile_cache_real_cpu_capture() -> None:
    text = (LOGS / "compile-cache-half-written.cpu.log").read_text()
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == "compile_cache_corrupt" and d.retryable
    assert d.compile_cache_entry == CACHE_HASH_DIR
    # the error itself, not vLLM's "Worker failed with error ..." / "See root cause above" wrappers quoting it
    assert d.evidence.startswith("(Worker pid=3364) ERROR") and d.evidence.endswith(".main.so: file too short")
    assert "InductorError: ImportError" in d.evidence
    assert CACHE_HASH_DIR in d.remediation and d.remediation.count(". ") == 0


def test_an_unrecognised_engine_failure_names_the_root_cause_not_the_wrapper() -> None:
    text = (LOGS / "compile-cache-half-written.cpu.log").read_text().replace("file too short", "bad magic")
    d = diagnose(text, 1)
    assert d is not None and d.failure_class == "unknown"
    assert "Engine core initialization failed" in text and "Worker failed with error" in text
    assert d.evidence.endswith(".main.so: bad magic") and "InductorError: ImportError" in d.evidence


@pytest.mark.parametrize(
    ("path", "entry"),
    [
        (f"{CACHE_HASH_DIR}/inductor_cache/cw/c.main.so", CACHE_HASH_DIR),
        ("/root/.cache/vllm/torch_compile_cache/0123456789abcdef01/rank_0_0/backbone/x.py",
         "/root/.cache/vllm/torch_compile_cache/0123456789abcdef01"),  # vLLM before AOT compile
        ("/tmp/torchinductor_root/cw/ccw6.main.so", "/tmp/torchinductor_root/cw"),  # inductor's own cache
        ("/tmp/torchinductor_root/ccw6.main.so", None),  # the bucket would be the whole cache
        ("/root/.cache/vllm/torch_compile_cache/torch_aot_compile/x.so", None),  # no hash entry
        ("/tmp/torchinductor_root/../etc/passwd", None),
        ("/etc/ld.so.cache", None),
    ],
)
def test_the_entry_removed_is_the_hash_directory_or_inductor_bucket(path: str, entry: str | None) -> None:
    assert compile_cache_entry(path) == entry


def test_a_truncated_file_outside_any_compile_cache_is_not_a_cache_fault() -> None:
    d = diagnose("OSError: /models/m/model-00001.safetensors: file too short", 1)
    assert d is not None and d.failure_class == "unknown" and d.compile_cache_entry is None


def test_a_server_killed_mid_run_is_server_died_naming_the_signal() -> None:
    """A process's negative status and a container's 128 + N name the signal; nothing in the log is needed."""
    healthy = "INFO:     Application startup complete.\n"
    for code in (-9, 137):
        d = diagnose_exit(code, diagnose(healthy, code))
        assert (d.failure_class, d.retryable, d.exit_code) == ("server_died", False, code)
        assert d.evidence == f"killed by SIGKILL (exit status {code})" and "OOM killer" in d.remediation
    d = diagnose_exit(-15, diagnose(healthy, -15))
    assert d.evidence == "stopped by SIGTERM (exit status -15)" and "outside vLLM" in d.remediation


def test_a_server_exiting_mid_run_on_an_error_or_out_of_memory() -> None:
    log = "INFO:     Application startup complete.\nRuntimeError: engine core died unexpectedly\n"
    d = diagnose_exit(1, diagnose(log, 1))
    assert d.failure_class == "server_died" and d.evidence == "RuntimeError: engine core died unexpectedly"
    oom = diagnose_exit(137, diagnose("INFO:     Application startup complete.\n", 137, oom_killed=True))
    assert oom.failure_class == "out_of_memory" and oom.retryable
    assert diagnose_exit(1).evidence == "exited with status 1"
