"""``roost doctor [--host H] [--profile P] [--json]``: exit 0 ready, 1 a check failed, 2 bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.errors import assert_one_line_error
from typer.testing import CliRunner

from roost.cli import app
from roost.commands import doctor as command
from roost.doctor import Facts
from roost.hosts import HostProfile
from roost.net import free_port


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["doctor", *args])
    return result.exit_code, result.stdout, result.stderr


def recorded(facts: Facts, seen: list[tuple[str, str | None]]) -> object:
    def gather(host: HostProfile, profile: str | None) -> Facts:
        seen.append((host.name, profile))
        return facts

    return gather


def test_ready_host_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str | None]] = []
    monkeypatch.setattr(command, "gather", recorded(
        Facts(disk_path="/m", disk_free_bytes=10**11, prefect_api_url="http://127.0.0.1:4200/api"), seen))
    code, out, _ = run("--host", "cpu")
    assert code == 0, out
    assert "host cpu: ready" in out and "n/a   nvidia-driver" in out
    assert seen == [("cpu", None)]


def test_failed_check_exits_1_with_json(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str | None]] = []
    monkeypatch.setattr(command, "gather", recorded(Facts(docker_error="refused", disk_path="/m", disk_free_bytes=10**12,
                                                          need_bytes=18_800_000_000), seen))
    code, out, _ = run("--host", "spark", "--profile", "ornith-9b", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["host"] == "spark" and report["ok"] is False
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["docker"] == "fail" and status["disk"] == "ok" and status["prefect-api"] == "fail"
    assert all(c["fix"] for c in report["checks"] if c["status"] == "fail")
    assert seen == [("spark", "ornith-9b")]


def test_host_defaults_to_roost_host(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str | None]] = []
    monkeypatch.setattr(command, "gather", recorded(Facts(disk_free_bytes=10**11), seen))
    monkeypatch.setenv("ROOST_HOST", "cpu-docker")
    run("--json")
    monkeypatch.delenv("ROOST_HOST")
    run("--json")
    assert [h for h, _ in seen] == ["cpu-docker", "spark"]


@pytest.mark.parametrize("args", [("--host", "gpu9"), ("--host", "cpu", "--profile", "nope")])
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...]) -> None:
    code, _, err = run(*args)
    assert assert_one_line_error(code, err, exact=True).startswith("roost: error: unknown")


def test_doctor_on_this_machine_as_the_cpu_host(tmp_path: Path) -> None:
    """The real probes: disk under ROOST_HOME; the Prefect API on a loopback port nothing listens on."""
    env = {**os.environ, "ROOST_HOME": str(tmp_path), "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}
    r = subprocess.run([sys.executable, "-m", "roost.cli", "doctor", "--host", "cpu", "--json"],
                       capture_output=True, text=True, timeout=120, env=env, check=False)
    assert r.returncode == 1, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert {n: c["status"] for n, c in checks.items() if c["status"] == "n/a"} == {
        "docker": "n/a", "nvidia-runtime": "n/a", "nvidia-driver": "n/a", "base-image": "n/a"}
    assert checks["disk"]["status"] == "ok" and str(tmp_path / "models") in checks["disk"]["detail"]
    assert checks["prefect-api"]["status"] == "fail" and "refused" in checks["prefect-api"]["detail"].lower()
