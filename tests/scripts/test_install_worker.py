"""scripts/install-worker --dry-run: the worker's environment comes from uv.lock without the demo extra
and the dev group, still imports every flow and the CLI, and the systemd unit it would write runs the
host's work queue."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-worker"
NOT_ON_A_WORKER = {"olah", "tokenizers", "pytest", "ruff", "mypy", "playwright"}


def install(tmp_path: Path, *args: str, api_url: str | None = "http://prefect.example:4200/api") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "VIRTUAL_ENV")}
    env["ROOST_WORKER_ENV"] = str(tmp_path / "env")
    if api_url is not None:
        env["PREFECT_API_URL"] = api_url
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.slow  # uv links ~125 packages from its cache, then the worker env imports the flows: ~10-25 s
def test_dry_run_installs_the_worker_environment_only(tmp_path: Path) -> None:
    r = install(tmp_path, "--dry-run", "--host", "spark")
    assert r.returncode == 0, r.stderr
    python = tmp_path / "env" / "bin" / "python"
    listing = subprocess.run(
        [str(python), "-c", "import importlib.metadata as md, json; "
         "import re; print(json.dumps(sorted({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower() for d in md.distributions()})))"],
        capture_output=True, text=True, timeout=120, check=True)
    installed = set(json.loads(listing.stdout))
    assert {"roost", "prefect", "huggingface-hub", "docker", "typer"} <= installed
    assert not installed & NOT_ON_A_WORKER, installed & NOT_ON_A_WORKER
    assert not {n for n in installed if n == "torch" or n.startswith("nvidia-")}

    imports = subprocess.run([str(python), "-c", "import flows.land, flows.audit, tasks.local_hub, roost.cli"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert imports.returncode == 0, imports.stderr[-2000:]

    out = r.stdout
    assert "would run: PREFECT_API_URL=http://prefect.example:4200/api" in out and "doctor --host spark" in out
    assert "would write /etc/systemd/system/roost-worker@.service" in out
    assert (f"ExecStart={tmp_path / 'env'}/bin/prefect worker start --pool ${{ROOST_POOL}} --work-queue %i "
            "$ROOST_EXTRA_QUEUES --name roost-%i-%H") in out
    assert "WantedBy=multi-user.target" in out and "Restart=always" in out
    # no --pool: the pool roost's deployments are in, asked of the server (roost here, without one)
    assert "would ask the server for the pool roost's deployments are in" in out
    assert "ROOST_POOL=roost\nROOST_EXTRA_QUEUES=\nROOST_HOST=spark" in out  # the host's queue only
    assert "systemctl enable --now roost-worker@spark.service" in out
    assert f"dry run: environment in {tmp_path / 'env'}" in out

    # the host whose worker also takes the sweeps (roost setup names it), in an earlier release's pool
    sweep = install(tmp_path, "--dry-run", "--host", "spark", "--pool", "roost-spark", "--sweep")
    assert sweep.returncode == 0, sweep.stderr
    assert "ROOST_POOL=roost-spark\nROOST_EXTRA_QUEUES=--work-queue sweep\nROOST_HOST=spark" in sweep.stdout
    assert "would ask the server" not in sweep.stdout

    # for real, no --pool and no server to ask: one line asking for --pool, nothing installed (the env is the above)
    unasked = install(tmp_path, "--force", "--host", "spark", api_url="http://127.0.0.1:9/api")
    assert unasked.returncode == 1 and "would write" not in unasked.stdout
    (error,) = [line for line in unasked.stderr.splitlines() if "error" in line]
    assert error.startswith("install-worker: error: could not ask the server which pool roost's deployments are in (")
    assert error.endswith("): pass --pool POOL") and unasked.stderr.endswith(error + "\n")


@pytest.mark.parametrize(("args", "api_url", "message"), [
    (("--host",), "http://p/api", "--host needs a host profile name"),
    (("--host", "Bad Host"), "http://p/api", "is not a host profile name"),
    (("--bogus",), "http://p/api", "unknown argument '--bogus'"),
    (("--pool", ""), "http://p/api", "--pool needs a work pool name"),
    ((), None, "set PREFECT_API_URL"),
])
def test_bad_input_exits_2_before_installing(tmp_path: Path, args: tuple[str, ...], api_url: str | None,
                                             message: str) -> None:
    r = install(tmp_path, *args, api_url=api_url)
    assert r.returncode == 2
    assert message in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "env").exists()


def test_script_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, timeout=30).returncode == 0
    assert os.access(SCRIPT, os.X_OK)


def test_help_is_the_header_comment_only() -> None:
    r = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0 and r.stdout.startswith("Install roost as a Prefect worker on a serving host")
    assert r.stdout.rstrip().endswith("ROOST_PYTHON (interpreter for uv).") and "set -euo" not in r.stdout
