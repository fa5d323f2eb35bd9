"""``roost bench`` end to end (the real console script) against the synthetic streaming server:
the JSON contract, the key from VLLM_API_KEY, exit 0 / 1 / 2. Measured figures are set against the
server's record of the same requests (``bench_synthetic.disagreements``), not its nominal rate."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bench_synthetic import Synthetic, disagreements, start_synthetic
from support.cli import ROOST

from roost.commands.bench import parse_int_list
from roost.errors import UserError
from roost.net import free_port
from roost.records import STATISTICS
from roost.vllm.stream import RequestRecord

KEY = "cli-bench-key-" + os.urandom(4).hex()


@pytest.fixture
def synthetic_cli() -> Iterator[Synthetic]:
    syn = start_synthetic("--tokens-per-s", "300", "--ttft-s", "0.01", "--max-model-len", "2048", api_key=KEY)
    try:
        yield syn
    finally:
        syn.stop()


@pytest.fixture
def server(synthetic_cli: Synthetic) -> str:
    return synthetic_cli.base_url


def roost_bench(*args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("VLLM_API_KEY", None)
    if key is not None:
        env["VLLM_API_KEY"] = key
    return subprocess.run([ROOST, "bench", *args], env=env, capture_output=True, text=True, timeout=300)


def test_json_contract(synthetic_cli: Synthetic, tmp_path: Path) -> None:
    out_file = tmp_path / "full.json"
    r = roost_bench(synthetic_cli.base_url + "/v1", "--model", "synthetic", "--prompt-lengths", "128,max,9000",
                    "--output-tokens", "32", "--concurrency", "1,4", "--repeats", "2", "--json", "--output", str(out_file))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc.keys() == {"base_url", "model", "status", "max_model_len", "errors", "notes", "knee", "points"}
    assert doc["status"] == "completed" and doc["max_model_len"] == 2048
    assert [(p["kind"], p["prompt_tokens"], p["concurrency"]) for p in doc["points"]] == [
        ("prompt_length", 128, 1), ("prompt_length", 2016, 1), ("concurrency", 512, 1), ("concurrency", 512, 4)]
    for p in doc["points"]:
        assert p["requests"] > 0 and p["errors"] == 0
        # schema 2: each metric a distribution
        for metric in ("ttft_s", "tpot_s", "itl_s", "e2el_s", "decode_tok_s", "output_tok_s", "request_rate"):
            assert p[metric].keys() == set(STATISTICS), metric
        d = p["decode_tok_s"]
        assert d["count"] == p["requests"] and 0 < d["min"] <= d["median"] <= d["max"]
        assert p["output_tok_s"]["count"] == 2  # one value per repeat
        assert p["metrics_delta"]["generation_tokens"] == p["requests"] * 32  # the server's own count
    assert any("9000" in n for n in doc["notes"])
    assert doc["knee"].keys() == {"concurrency", "output_tok_s", "peak_concurrency", "peak_output_tok_s",
                                  "tolerance", "saturated"}
    # 4 users on a server without contention: 4x one user's aggregate (the knee needs 90% of the peak)
    assert doc["knee"]["concurrency"] == 4 and doc["knee"]["tolerance"] == pytest.approx(0.1)
    full = json.loads(out_file.read_text())
    assert len(full["requests"]) == 2 * 2 + 2 + 8 + 2  # two lengths, 1 user, 4 users (x2 repeats), 2 warm-up
    records = [RequestRecord.model_validate(x) for x in full["requests"]]
    assert disagreements(records, synthetic_cli.record()) == []
    assert "roost: benchmark of synthetic: 5/5 (100%):" in r.stderr  # points measured of all, plain lines when piped
    assert KEY not in r.stdout + r.stderr + out_file.read_text()


def test_table_output_and_key_from_the_option(server: str) -> None:
    r = roost_bench(server, "--model", "synthetic", "--api-key", KEY, "--prompt-lengths", "64", "--concurrency", "",
                    "--output-tokens", "16", "--repeats", "1", "--warmup", "0", "--quiet", key=None)
    assert r.returncode == 0, r.stderr
    assert "prompt_length" in r.stdout and "decode tok/s p50" in r.stdout and r.stderr == ""
    assert "TTFT p50 (s)" in r.stdout and "aggregate output tok/s" in r.stdout


def test_user_errors_exit_2(server: str) -> None:
    r = roost_bench(server, "--model", "synthetic", "--prompt-lengths", "512,abc")
    assert r.returncode == 2 and "--prompt-lengths: 'abc' is not a whole number" in r.stderr
    r = roost_bench(server, "--model", "synthetic", "--quiet", key="wrong")
    assert r.returncode == 2 and "rejected the API key" in r.stderr and "wrong" not in r.stderr
    r = roost_bench(server, "--model", "nope", "--quiet")
    assert r.returncode == 2 and "serves: synthetic" in r.stderr
    r = roost_bench(server, "--model", "synthetic", "--repeats", "0", "--quiet")
    assert r.returncode == 2 and "repeats" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_dead_server_exits_1_with_what_was_measured(server: str) -> None:
    httpx.post(f"{server}/_control", json={"faults": ["ok", "ok", "die"]}, timeout=10).raise_for_status()
    r = roost_bench(server, "--model", "synthetic", "--prompt-lengths", "64,128", "--concurrency", "",
                    "--output-tokens", "16", "--repeats", "1", "--warmup", "1", "--json", "--quiet")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "failed" and "stopped answering" in doc["errors"][0]
    assert [p["errors"] for p in doc["points"]] == [0, 1]


def test_nothing_listening_exits_1() -> None:
    r = roost_bench(f"http://127.0.0.1:{free_port()}", "--model", "m", "--quiet")
    assert r.returncode == 1 and "not reachable" in r.stdout


def test_parse_int_list() -> None:
    assert parse_int_list("512, 2_048,max", "--x", allow_max=True) == [512, 2048, 0]
    assert parse_int_list("", "--x") == []
    with pytest.raises(UserError, match="must be from 1 to"):
        parse_int_list("0", "--x")
    with pytest.raises(UserError, match="must be from 1 to 8"):
        parse_int_list("4,9", "--x", limit=8)
