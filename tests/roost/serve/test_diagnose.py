"""The cold-load failure classifier on log excerpts.

Excerpts in tests/roost/serve/logs/ were captured from real runs (named by what produced them);
the others are vLLM 0.32's own message formats (vllm/v1/core/kv_cache_utils.py,
model_executor/model_loader/default_loader.py, model_executor/models/utils.py) and the recipes'
troubleshooting quotes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.serve.diagnose import RETRYABLE, diagnose

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
