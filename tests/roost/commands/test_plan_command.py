"""``roost plan PATH --kv-cache-memory-bytes N [--max-model-len L] [--host] [--json]``: the JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import replicas
from support.contract import PLAN_JSON_KEYS
from typer.testing import CliRunner

from roost.cli import app

ROOST = str(Path(sys.executable).parent / "roost")


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


@pytest.mark.parametrize(("profile", "served", "pool", "seqs", "batched"), [
    ("ornith-35b", "ornith", 8 * 1024**3, "16", "8192"),
    ("ornith-9b", "ornith9b", 12 * 1024**3, None, None),
    ("ornith-1.5-35b-a3b-nvfp4", "ornith-1.5-35b-a3b", 4 * 1024**3, "20", None),
])
def test_profile_plans_the_servers_whole_argument_list(tmp_path: Path, profile: str, served: str, pool: int,
                                                       seqs: str | None, batched: str | None) -> None:
    model = replicas.write_replica(PROFILE_REPLICAS[profile](), tmp_path / profile)
    r = subprocess.run([ROOST, "plan", str(model), "--profile", profile, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == PLAN_JSON_KEYS and out["host"] == "spark"  # the profile's host
    args = out["vllm_args"]
    assert _flag(args, "--served-model-name") == served
    assert _flag(args, "--kv-cache-memory-bytes") == str(pool) and out["kv_cache_memory_bytes"] == pool
    assert _flag(args, "--max-num-seqs") == seqs and out["max_num_seqs"] == (int(seqs) if seqs else None)
    assert _flag(args, "--max-num-batched-tokens") == batched
    assert out["max_num_batched_tokens"] == (int(batched) if batched else None)
    assert out["fits_host"] is True


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
    r = subprocess.run([ROOST, "plan", str(ornith_35b), "--profile", "ornith-70b"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "ornith-70b" in r.stderr
