"""``roost plan PATH --kv-cache-memory-bytes N [--max-model-len L] [--host] [--json]``: the JSON contract."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import replicas
from support.cli import ROOST, roost_exe
from support.contract import PLAN_JSON_KEYS
from support.errors import assert_one_line_error
from typer.testing import CliRunner

from roost.cli import app
from roost.hosts import GB10_CUDA_TOTAL_BYTES
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo
from roost.profiles import LOCAL


@pytest.fixture(scope="module")
def ornith_35b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.ornith_35b_a3b(), tmp_path_factory.mktemp("cli-plan") / "ornith-35b")


def test_json_contract_8_gib(ornith_35b: Path) -> None:
    r = subprocess.run([ROOST, "plan", str(ornith_35b), "--kv-cache-memory-bytes", "8589934592", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == PLAN_JSON_KEYS
    assert (out["block_size"], out["kv_cache_tokens"], round(out["max_concurrency"], 2)) == (1056, 412_980, 1.58)
    assert isinstance(out["max_concurrency"], float) and out["fits_one_request"] is True
    assert out["min_kv_cache_bytes"] == 5_449_973_760  # the "5.xx GiB" of the Ornith 1.0 35B recipe
    assert out["vllm_args"] == ["--served-model-name", "ornith-35b", "--max-model-len", "262144",
                                "--kv-cache-memory-bytes", "8589934592"]


def test_4_gib_does_not_fit_exit_1(ornith_35b: Path) -> None:
    r = CliRunner().invoke(app, ["plan", str(ornith_35b), "--kv-cache-memory-bytes", str(4 * 1024**3)])
    assert r.exit_code == 1
    assert "DOES NOT FIT" in r.stdout and "GiB KV cache is needed" in r.stdout


def test_max_model_len(ornith_35b: Path) -> None:
    r = CliRunner().invoke(app, ["plan", str(ornith_35b), "--kv-cache-memory-bytes", str(4 * 1024**3),
                                 "--max-model-len", "131072", "--json"])
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["fits_one_request"] and out["max_model_len"] == 131072
    assert out["min_kv_cache_bytes"] == (125 + 3) * 10 * 1056 * 2 * 2 * 256 * 2  # 125 attention + 3 mamba blocks


def test_bad_input(ornith_35b: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["plan", str(ornith_35b)])
    assert r.exit_code == 2 and "--kv-cache-memory-bytes" in r.stderr  # required option
    r = CliRunner().invoke(app, ["plan", str(tmp_path / "nope"), "--kv-cache-memory-bytes", "1"])
    assert r.exit_code == 2 and r.stderr.startswith("roost: error: ") and "no such directory" in r.stderr
    r = CliRunner().invoke(app, ["plan", str(ornith_35b), "--kv-cache-memory-bytes", "1", "--max-model-len", "999999"])
    assert r.exit_code == 2 and "exceeds the model's native window" in r.stderr


def test_too_small_pool_says_what_to_use(ornith_35b: Path) -> None:
    r = CliRunner().invoke(app, ["plan", str(ornith_35b), "--kv-cache-memory-bytes", str(4 * 1024**3), "--json"])
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and out["fits_one_request"] is False
    assert r.stderr.strip() == (
        f"roost: error: {ornith_35b}: a 4,294,967,296-byte KV pool cannot hold one 262,144-token request; "
        f"use --kv-cache-memory-bytes {out['min_kv_cache_bytes']} or more"
    )


# --- --profile: the server's whole argument list, reviewed before any GPU minute ---------------------

PROFILE_REPLICAS = {
    "ornith-35b": replicas.ornith_35b_a3b,
    "ornith-9b": replicas.ornith_9b,
    "ornith-1.5-35b-a3b-nvfp4": replicas.nvfp4_moe_mtp,
}


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


RECIPE_CLIENT_FLAGS = ["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"]


@pytest.mark.parametrize(("profile", "served", "pool", "seqs", "batched"), [
    ("ornith-35b", "ornith", 8 * 1024**3, "16", "8192"),
    ("ornith-9b", "ornith9b", 12 * 1024**3, None, None),
    ("ornith-1.5-35b-a3b-nvfp4", "ornith-1.5-35b-a3b", None, "20", None),
])
def test_profile_plans_the_servers_whole_argument_list(tmp_path: Path, profile: str, served: str, pool: int | None,
                                                       seqs: str | None, batched: str | None) -> None:
    model = replicas.write_replica(PROFILE_REPLICAS[profile](), tmp_path / profile)
    r = subprocess.run([ROOST, "plan", str(model), "--profile", profile, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == PLAN_JSON_KEYS and out["host"] == "spark"  # the profile's host
    args = out["vllm_args"]
    assert _flag(args, "--served-model-name") == served
    assert _flag(args, "--max-num-seqs") == seqs and out["max_num_seqs"] == (int(seqs) if seqs else None)
    assert _flag(args, "--max-num-batched-tokens") == batched
    assert out["max_num_batched_tokens"] == (int(batched) if batched else None)
    assert out["fits_host"] is True
    # every seed model is a Qwen3.5-family reasoning coder: the recipe's client reads message.reasoning and
    # the coding tools send tools
    at = args.index("--reasoning-parser")
    assert args[at:at + len(RECIPE_CLIENT_FLAGS)] == RECIPE_CLIENT_FLAGS
    if pool is not None:  # the BF16 recipes pin their pools: exact
        assert _flag(args, "--kv-cache-memory-bytes") == str(pool) and out["kv_cache_memory_bytes"] == pool
        assert "--gpu-memory-utilization" not in args and out["gpu_memory_utilization"] is None
        assert out["pool"]["low_bytes"] == out["pool"]["high_bytes"] == pool
        assert "--enable-prefix-caching" not in args  # vLLM 0.24.0's default for a hybrid model: off
        return
    # the NVFP4 recipe: one 0.70-utilization server, chunked prefill and prefix cache, no pinned pool
    assert "--kv-cache-memory-bytes" not in args and _flag(args, "--gpu-memory-utilization") == "0.7"
    assert {"--enable-prefix-caching", "--enable-chunked-prefill"} <= set(args)
    assert _flag(args, "--speculative-config") == '{"method":"mtp","num_speculative_tokens":1}'
    p = out["pool"]
    assert out["gpu_memory_utilization"] == 0.7 and p["requested_bytes"] == math.ceil(0.7 * GB10_CUDA_TOTAL_BYTES)
    assert p["low_bytes"] < p["predicted_bytes"] == out["kv_cache_memory_bytes"] < p["high_bytes"] < p["requested_bytes"]
    # an order of magnitude above the old 4 GiB pin's 360,197 tokens, as the recipe's "headroom" says
    assert out["kv_cache_tokens"] > 10 * 360_197 and out["max_concurrency"] > 10
    assert "Estimate" in p["exactness"] and "determine_available_memory" in p["source"]


def test_profile_overrides_come_last_and_win(plan_profile_9b: Path) -> None:
    r = CliRunner().invoke(app, ["plan", str(plan_profile_9b), "--profile", "ornith-9b", "--kv-cache-memory-bytes",
                                 str(9 * 1024**3), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["kv_cache_memory_bytes"] == 9 * 1024**3 and _flag(out["vllm_args"], "--kv-cache-memory-bytes") == str(9 * 1024**3)


@pytest.fixture(scope="module")
def plan_profile_9b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.ornith_9b(), tmp_path_factory.mktemp("cli-plan") / "ornith-9b")


def test_neither_pool_nor_profile_is_one_line_exit_2(ornith_35b: Path) -> None:
    r = subprocess.run([ROOST, "plan", str(ornith_35b)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["roost: error: give --kv-cache-memory-bytes N, or --profile P to plan as "
                                             "that profile lands"]


def test_unknown_profile_is_one_line_exit_2(ornith_35b: Path) -> None:
    r = roost_exe("plan", str(ornith_35b), "--profile", "ornith-70b", timeout=60)
    assert_one_line_error(r.returncode, r.stderr, "ornith-70b")


# --- hf://OWNER/NAME[@REVISION] and --profile P alone: the plan read from a Hub on loopback (olah) -----

HUB_PLAN_KEYS = [*PLAN_JSON_KEYS, "repo_id", "commit", "bytes_fetched"]


@pytest.fixture(scope="module")
def plan_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubMirror, Path, str]]:
    base = tmp_path_factory.mktemp("plan-hub")
    src = replicas.write_replica(replicas.tiny_qwen3(num_shards=2), base / "src" / "acme--tiny")
    commit = publish_repo(src, base / "mirrors", "acme/tiny")
    with HubMirror(base / "mirrors", workdir=base / "olah") as mirror:
        yield mirror, src, commit


@pytest.fixture
def plan_env(plan_hub: tuple[HubMirror, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("HF_ENDPOINT", plan_hub[0].endpoint)
    monkeypatch.setenv("ROOST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return dict(os.environ)


def _without(doc: dict[str, object], *keys: str) -> dict[str, object]:
    return {k: v for k, v in doc.items() if k not in keys}


def test_hub_plan_json_real_entry_point(plan_hub: tuple[HubMirror, Path, str], plan_env: dict[str, str]) -> None:
    """``roost plan hf://... --kv-cache-memory-bytes N --json``: the local plan's keys and values, then the Hub's three."""
    _, src, commit = plan_hub
    r = subprocess.run([ROOST, "plan", "hf://acme/tiny", "--kv-cache-memory-bytes", str(64 * 1024**2), "--json"],
                       capture_output=True, text=True, timeout=120, env=plan_env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == HUB_PLAN_KEYS
    assert (out["repo_id"], out["commit"], out["path"]) == ("acme/tiny", commit, f"hf://acme/tiny@{commit}")
    assert 0 < out["bytes_fetched"] < sum(p.stat().st_size for p in src.glob("*.safetensors"))
    local = CliRunner().invoke(app, ["plan", str(src), "--kv-cache-memory-bytes", str(64 * 1024**2), "--json"])
    assert local.exit_code == 0, local.stderr
    assert _without(out, "path", "repo_id", "commit", "bytes_fetched") == _without(json.loads(local.stdout), "path")


def test_hub_plan_refusal_is_the_local_one(plan_hub: tuple[HubMirror, Path, str], plan_env: dict[str, str]) -> None:
    _, src, commit = plan_hub
    remote = CliRunner().invoke(app, ["plan", f"hf://acme/tiny@{commit}", "--kv-cache-memory-bytes", "4096"])
    local = CliRunner().invoke(app, ["plan", str(src), "--kv-cache-memory-bytes", "4096"])
    assert remote.exit_code == local.exit_code == 1 and "DOES NOT FIT" in remote.stdout
    assert remote.stderr.strip().splitlines() == [local.stderr.strip().replace(str(src), f"hf://acme/tiny@{commit}")]


@pytest.mark.parametrize(("url", "fragment"), [
    ("hf://acme/tiny@v9", "revision 'v9' does not exist in acme/tiny"),
    ("hf://acme/nope", "repository acme/nope does not exist"),
    ("hf://acme", "is not a Hub repository URL"),
])
def test_hub_plan_bad_input_is_one_line(plan_env: dict[str, str], url: str, fragment: str) -> None:
    r = CliRunner().invoke(app, ["plan", url, "--kv-cache-memory-bytes", "1"])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert_one_line_error(r.exit_code, r.stderr, fragment, exact=True)


@pytest.mark.slow
def test_profile_local_alone_plans_the_demo_from_its_own_mirror(tmp_path: Path) -> None:
    """``roost plan --profile local --json`` with no path: the demo checkpoint is generated, published and
    served by a mirror the command starts and stops (~8 s)."""
    env = {**os.environ, "ROOST_HOME": str(tmp_path / "home")}
    env.pop("HF_ENDPOINT", None)
    t0 = time.monotonic()
    r = subprocess.run([ROOST, "plan", "--profile", "local", "--json"], capture_output=True, text=True, timeout=180,
                       env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == HUB_PLAN_KEYS and out["repo_id"] == "roost-demo/tiny-qwen3"
    assert len(out["commit"]) == 40 and out["path"] == f"hf://roost-demo/tiny-qwen3@{out['commit']}"
    assert out["host"] == "cpu" and out["kv_cache_memory_bytes"] == 1024**3 and out["max_model_len"] == 2048
    assert out["bytes_fetched"] > 0 and out["fits_one_request"] is True
    overrides = LOCAL.vllm_overrides  # the profile's overrides come last
    assert "--served-model-name" in out["vllm_args"] and out["vllm_args"][-len(overrides):] == overrides
    assert (tmp_path / "home" / "preflight" / "roost-demo--tiny-qwen3" / out["commit"] / "listing.json").is_file()
    assert time.monotonic() - t0 < 120
