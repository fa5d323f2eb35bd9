"""``roost diagnose LOGFILE [--json]``: exit 0 failure found, 1 none, 2 unreadable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.errors import assert_one_line_error

REAL_KV_LOG = Path(__file__).parents[1] / "serve" / "logs" / "kv-too-small.cpu-container.log"
REAL_OK_LOG = Path(__file__).parents[1] / "serve" / "logs" / "serve-ok.cpu-container.ts.log"
REAL_CACHE_LOG = Path(__file__).parents[1] / "serve" / "logs" / "compile-cache-half-written.cpu.log"


def roost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roost.cli", *args], capture_output=True, text=True, timeout=60)


def test_json_for_a_real_failed_start() -> None:
    r = roost("diagnose", str(REAL_KV_LOG), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["failure_class"] == "kv_pool_too_small" and out["retryable"] is False
    assert out["remediation"] == (
        "Raise --kv-cache-memory-bytes to at least 1073741824 (1 GiB): one 2048-token request needs 0.0 GiB of KV "
        "cache; lower --max-model-len only if memory is truly scarce.")
    assert out["evidence"].startswith("ValueError: To serve at least one request with the model's max seq len (2048), "
                                      "(0.0 GiB KV cache is needed")
    assert (out["max_model_len"], out["estimated_max_model_len"], out["suggested_kv_cache_bytes"]) == (2048, 384, 1024**3)


def test_json_names_the_compile_cache_entry_to_remove() -> None:
    r = roost("diagnose", str(REAL_CACHE_LOG), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["failure_class"], out["retryable"]) == ("compile_cache_corrupt", True)
    assert out["compile_cache_entry"].startswith("/tmp/race/c1/torch_compile_cache/torch_aot_compile/")
    assert f"remove {out['compile_cache_entry']} and start again" in out["remediation"]


def test_healthy_log_exits_1() -> None:
    r = roost("diagnose", str(REAL_OK_LOG), "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["failure_class"] is None


def test_text_output_and_exit_status_options(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO Loading weights...\n")
    r = roost("diagnose", str(log), "--exit-code", "137", "--oom-killed")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "failure_class: out_of_memory",
        "retryable:     true",
        "remediation:   The container was OOM-killed: free host memory or lower the KV pool, --max-model-len or "
        "--max-num-seqs.",
        "evidence:      container exited with status 137 and OOMKilled=true",
    ]


def test_unreadable_file_exits_2_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    r = roost("diagnose", str(missing))
    assert_one_line_error(r.returncode, r.stderr, str(missing))
    r = roost("diagnose", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr
