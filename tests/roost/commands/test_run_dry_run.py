"""``roost run --profile P --dry-run [--model-dir D] [--json]``: the full serve specification of each
Ornith recipe, planned from a header-exact replica, with nothing downloaded, built or started."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import replicas
from support.cli import ROOST


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dry-run")
    return {
        "ornith-35b": replicas.write_replica(replicas.ornith_35b_a3b(), root / "35b"),
        "ornith-1.5-35b-a3b-nvfp4": replicas.write_replica(replicas.nvfp4_moe_mtp(), root / "nvfp4"),
    }


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.run([ROOST, "run", "--dry-run", *args], capture_output=True, text=True, timeout=120, env=env)


def spec_of(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_ornith_35b_serves_what_the_recipe_serves(models: dict[str, Path]) -> None:
    out = spec_of(dry_run("--profile", "ornith-35b", "--model-dir", str(models["ornith-35b"]), "--json"))
    serve = out["serve"]
    cmd = serve["command"]
    assert cmd[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert (flag(cmd, "--max-num-seqs"), flag(cmd, "--max-num-batched-tokens")) == ("16", "8192")
    assert flag(cmd, "--kv-cache-memory-bytes") == str(8 * 1024**3) and flag(cmd, "--max-model-len") == "262144"
    assert cmd[cmd.index("--served-model-name"):] == out["vllm_args"]  # the plan's list, verbatim, last
    assert serve["bind_addrs"] == ["127.0.0.1", "172.17.0.1"]  # the recipe's BIND_ADDRS
    assert serve["restart_policy"] == "no" and serve["fixed_port"] is False  # a one-off run by default
    assert serve["devices"] == ["all GPUs (--gpus all)"]
    assert serve["mounts"] == [f"{models['ornith-35b'].resolve()} -> /model (ro)"]
    assert "VLLM_API_KEY" in serve["env_names"] and out["fits_host"] is True and out["refusal"] is None


def test_nvfp4_production_landing_on_its_fixed_port(models: dict[str, Path]) -> None:
    out = spec_of(dry_run("--profile", "ornith-1.5-35b-a3b-nvfp4", "--model-dir",
                          str(models["ornith-1.5-35b-a3b-nvfp4"]), "--json"))  # production: kept by default
    serve = out["serve"]
    cmd = serve["command"]
    assert (serve["port"], serve["fixed_port"], flag(cmd, "--port")) == (8004, True, "8004")
    assert serve["restart_policy"] == "unless-stopped"  # production: survives a reboot
    assert flag(cmd, "--max-num-seqs") == "20" and flag(cmd, "--gpu-memory-utilization") == "0.7"
    assert "--kv-cache-memory-bytes" not in cmd
    assert flag(cmd, "--reasoning-parser") == "qwen3" and flag(cmd, "--tool-call-parser") == "qwen3_coder"
    assert flag(cmd, "--speculative-config") == '{"method":"mtp","num_speculative_tokens":1}'
    assert flag(cmd, "--kv-cache-dtype") == "fp8"


def test_one_off_tears_the_production_model_down(models: dict[str, Path]) -> None:
    """The recipe's RESTART=no: --one-off serves with restart policy no; it contradicts --keep-serving."""
    out = spec_of(dry_run("--profile", "ornith-1.5-35b-a3b-nvfp4", "--model-dir",
                          str(models["ornith-1.5-35b-a3b-nvfp4"]), "--one-off", "--json"))
    assert out["serve"]["restart_policy"] == "no"
    r = subprocess.run([ROOST, "run", "--dry-run", "--profile", "ornith-1.5-35b-a3b-nvfp4", "--model-dir",
                        str(models["ornith-1.5-35b-a3b-nvfp4"]), "--one-off", "--keep-serving"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "contradict" in r.stderr, r.stderr
    other = spec_of(dry_run("--profile", "ornith-35b", "--model-dir", str(models["ornith-35b"]), "--json"))
    assert other["serve"]["restart_policy"] == "no"  # not production: a landing is a one-off unless kept


def test_text_names_everything_and_no_secret(models: dict[str, Path]) -> None:
    key = "sk-dry-run-secret-0123456789"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"VLLM_API_KEY": key}
    r = subprocess.run([ROOST, "run", "--dry-run", "--profile", "ornith-1.5-35b-a3b-nvfp4", "--model-dir",
                        str(models["ornith-1.5-35b-a3b-nvfp4"]), "--keep-serving", "--restart-policy", "no",
                        "--vllm-arg=--max-num-seqs=24"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "nothing started" in text and "127.0.0.1:8004, 172.17.0.1:8004 (fixed port), restart policy no" in text
    assert "--max-num-seqs 20" in text and text.rstrip().count("--max-num-seqs=24") == 1  # the override, last
    assert "VLLM_API_KEY" in text and key not in text + r.stderr


def test_missing_checkpoint_is_one_line_exit_2(tmp_path: Path) -> None:
    r = dry_run("--profile", "ornith-9b", "--model-dir", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"roost: error: {tmp_path / 'nowhere'}: no checkpoint there; download it first "
        "(roost download deep-reinforce/Ornith-1.0-9B) or pass --model-dir DIR"]


def test_model_dir_without_dry_run_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    r = subprocess.run([ROOST, "run", "--model-dir", str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--dry-run" in r.stderr
