"""roost.plan.kv's Spark rules against vLLM 0.24.0's own KV-sizing code (the vLLM of NGC 26.07).

``tests/support/vllm024_kv.py`` runs, in the vLLM 0.24.0 venv, the functions a CUDA server runs at
start-up (hybrid block alignment, ``FullAttentionSpec`` / ``MambaSpec``, ``get_kv_cache_configs``,
``get_kv_cache_capacity``) on the same config.json replicas roost plans from; each case here asserts
that ``plan_kv`` gives the same block size, blocks, tokens, concurrency and one-request verdict, and
that vLLM's figures are the recipes' published ones. One subprocess serves every case.

The venv is the host ``cpu-vllm-0-24``'s (``support.vllm024``: where scripts/bootstrap builds it); without
it the test fails rather than skips. The helper takes about 7 s on this 2-core machine when idle (importing vLLM
0.24.0 is most of it; 25-30 s under load with a cold file cache), so the module is not marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import replicas
from support.vllm024 import vllm024_python

from roost.checkpoint.config import parse_config
from roost.errors import UserError
from roost.plan.kv import SPARK_RULES, KvPlan, kv_model_from_config, plan_kv
from roost.units import GiB

HELPER = Path(__file__).resolve().parents[2] / "support" / "vllm024_kv.py"
L = 262144


@dataclass(frozen=True)
class Case:
    name: str
    config: dict[str, Any]
    pool: int
    kv_cache_dtype: str = "auto"
    num_speculative_tokens: int = 0
    enable_prefix_caching: bool | None = None  # None: the flag is not given

    def payload(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config,
            "dtype": "bfloat16",
            "kv_cache_dtype": self.kv_cache_dtype,
            "num_speculative_tokens": self.num_speculative_tokens,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": True if self.enable_prefix_caching else None,
            "max_model_len": L,
            "available_memory": self.pool,
            "max_num_batched_tokens": 8192,  # 0.24.0's API-server default on a >= 70 GiB device (GB10)
        }

    def plan(self) -> KvPlan:
        model = kv_model_from_config(
            parse_config(self.config),
            SPARK_RULES,
            kv_cache_dtype=self.kv_cache_dtype,
            num_speculative_tokens=self.num_speculative_tokens,
        )
        return plan_kv(model, SPARK_RULES, self.pool, L, enable_prefix_caching=self.enable_prefix_caching)


ORNITH_9B = replicas.ornith_9b().config
ORNITH_35B = replicas.ornith_35b_a3b().config
ORNITH_15_NVFP4 = replicas.nvfp4_moe_mtp().config  # same Qwen3.5-MoE shapes as the 35B, MTP, FP8 KV calibrated
CASES = {
    c.name: c
    for c in (
        Case("ornith-1.0-35b@8GiB", ORNITH_35B, 8 * GiB),
        Case("ornith-1.0-9b@12GiB", ORNITH_9B, 12 * GiB),
        Case("ornith-1.0-35b@4GiB", ORNITH_35B, 4 * GiB),
        Case("ornith-1.5-nvfp4+prefix@40GiB", ORNITH_15_NVFP4, 40 * GiB, "fp8", 1, True),
        Case("ornith-1.5-nvfp4@40GiB", ORNITH_15_NVFP4, 40 * GiB, "fp8", 1, None),
    )
}


def run_helper(python: Path, cases: list[Case], cwd: Path) -> dict[str, dict[str, Any]]:
    """vLLM 0.24.0's figures for ``cases``, by name (one run of the helper)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(
        [str(python), "-I", str(HELPER)],  # -I: no PYTHON* variables, no script directory on sys.path
        input=json.dumps([c.payload() for c in cases]),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**env, "VLLM_CONFIGURE_LOGGING": "0"},
    )
    if proc.returncode != 0:
        pytest.fail(f"{HELPER.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["vllm"] == "0.24.0"
    return {c["name"]: c for c in out["cases"]}


@pytest.fixture(scope="module")
def vllm024(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return run_helper(vllm024_python(), list(CASES.values()), tmp_path_factory.mktemp("vllm024"))


def assert_plan_matches(v: dict[str, Any], p: KvPlan) -> None:
    """Every figure vLLM 0.24.0 computed, as roost's plan has it."""
    assert (p.block_size, p.mamba_cache_mode) == (v["block_size"], v["mamba_cache_mode"])
    assert p.attn_page_bytes_per_token * p.block_size == v["attn_page_size_bytes"] == p.page_size_bytes
    assert p.mamba_page_bytes == v["mamba_page_size_bytes"]
    assert (p.mamba_padding_pct is None) == (v["mamba_page_size_padded"] is None)
    assert sorted((g.kind, g.layers) for g in p.groups) == sorted((g["kind"], g["layers"]) for g in v["groups"])
    page = v["attn_page_size_bytes"]
    assert sorted(g.blocks_per_request for g in p.groups) == sorted(
        -(-g["max_memory_usage_bytes"] // page) for g in v["groups"]
    )
    assert p.kv_needed_bytes == v["one_request_bytes"]
    assert p.fits_one_request is v["fits_one_request"]
    if v["fits_one_request"]:
        assert (p.num_blocks, p.kv_cache_tokens, p.max_concurrency) == (
            v["num_blocks"], v["kv_cache_tokens"], v["max_concurrency"])
        predicted = [line for line in p.log_lines if not line.startswith("Padding")]
        assert [line for line in v["log_lines"] if line in predicted] == predicted
    else:
        assert v["error"].startswith(p.log_lines[-1])
    padding = [line for line in v["log_lines"] if line.startswith("Padding mamba page size")]
    assert padding == [line for line in p.log_lines if line.startswith("Padding")]


@pytest.mark.parametrize(
    ("name", "block", "tokens", "concurrency"),
    [
        ("ornith-1.0-35b@8GiB", 1056, 412_980, "1.58"),  # the Ornith 1.0 35B recipe's log
        ("ornith-1.0-9b@12GiB", 528, 390_070, "1.49"),  # the Ornith 1.0 9B recipe's log
    ],
)
def test_recipe_figures(vllm024: dict[str, dict[str, Any]], name: str, block: int, tokens: int, concurrency: str) -> None:
    v = vllm024[name]
    assert (v["block_size"], v["kv_cache_tokens"], f"{v['max_concurrency']:.2f}") == (block, tokens, concurrency)
    assert (v["enable_prefix_caching"], v["mamba_cache_mode"]) == (False, "none")  # 0.24.0's default for hybrids
    assert v["block_size_by_backend"] == {"FLASH_ATTN": block, "TRITON_ATTN": block}
    assert_plan_matches(v, CASES[name].plan())


def test_35b_at_4_gib_is_refused(vllm024: dict[str, dict[str, Any]]) -> None:
    v = vllm024["ornith-1.0-35b@4GiB"]
    assert not v["fits_one_request"] and v["one_request_bytes"] == 5_449_973_760
    assert "(5.08 GiB KV cache is needed" in v["error"] and "maximum model length is 205920" in v["error"]
    p = CASES["ornith-1.0-35b@4GiB"].plan()
    assert_plan_matches(v, p)
    assert p.estimated_max_model_len == 205_920 and p.min_kv_cache_bytes == v["one_request_bytes"]


def test_nvfp4_fp8_mtp_with_prefix_caching(vllm024: dict[str, dict[str, Any]]) -> None:
    """--kv-cache-dtype fp8, MTP(1), --enable-prefix-caching: Qwen3.5 is not SupportsMambaPrefixCaching, so
    0.24.0 picks mamba cache mode "align" (two state blocks per mamba group, plus one per speculative token)."""
    v = vllm024["ornith-1.5-nvfp4+prefix@40GiB"]
    assert (v["enable_prefix_caching"], v["mamba_cache_mode"], v["mamba_block_size"]) == (True, "align", 2112)
    assert (v["full_attention_layers"], v["mamba_layers"], v["mamba_num_speculative_blocks"]) == (11, 30, 1)
    # fp8 K+V of 2 heads x 256 = 1,024 bytes a token; the MTP-widened state (4 conv rows) is 2,162,688
    # bytes = 2112 tokens of attention exactly: no padding
    assert (v["block_size"], v["mamba_page_size_bytes"], v["mamba_page_size_padded"]) == (2112, 2_162_688, None)
    assert (v["num_blocks"], v["kv_cache_tokens"], f"{v['max_concurrency']:.2f}") == (1805, 3_531_118, "13.47")
    assert "Mamba cache mode is set to 'align' for Qwen3_5MoeForConditionalGeneration by default when prefix " \
           "caching is enabled" in v["log_lines"]
    p = CASES["ornith-1.5-nvfp4+prefix@40GiB"].plan()
    assert_plan_matches(v, p)
    assert SPARK_RULES.prefix_caching_mamba_mode == v["mamba_cache_mode"]


def test_nvfp4_without_the_flag_keeps_prefix_caching_off(vllm024: dict[str, dict[str, Any]]) -> None:
    """No --enable-prefix-caching: 0.24.0 leaves it off for hybrid models, mode "none" (one state block + MTP's)."""
    v = vllm024["ornith-1.5-nvfp4@40GiB"]
    assert (v["enable_prefix_caching"], v["mamba_cache_mode"], v["block_size"]) == (False, "none", 2112)
    assert SPARK_RULES.hybrid_prefix_caching_default is v["enable_prefix_caching"]
    p = CASES["ornith-1.5-nvfp4@40GiB"].plan()
    assert_plan_matches(v, p)
    with_flag = vllm024["ornith-1.5-nvfp4+prefix@40GiB"]
    assert v["num_blocks"] == with_flag["num_blocks"] and v["kv_cache_tokens"] > with_flag["kv_cache_tokens"]


def test_missing_venv_fails_with_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No venv: a failure naming where it was looked for and how to provide it (never a skip)."""
    monkeypatch.setenv("ROOST_VLLM_VENVS", str(tmp_path / "nope"))
    with pytest.raises(UserError, match=r"nope/vllm-venv-0.24.0/bin/python not found .*cpu-vllm-0-24.*scripts/bootstrap"):
        vllm024_python()
