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
