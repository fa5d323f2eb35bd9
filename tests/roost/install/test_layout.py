"""The box's parts as ``roost install`` renders them (``roost.install.layout``), files written only when they
differ (``roost.install.system``), and the units as systemd itself reads them (``systemd-analyze verify``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from roost.gateway.install import env_text
from roost.install.layout import (
    MASK,
    Box,
    BoxFile,
    Monitoring,
    Ports,
    gateway_files,
    monitor_up_args,
    prefect_server_files,
    results_files,
    worker_command,
)
from roost.install.system import env_values, write_file

REPO = Path(__file__).resolve().parents[3]
ENV = REPO / ".venv"


def box(tmp_path: Path, **kw: object) -> Box:
    base: dict[str, object] = {"host": "spark", "user": "root", "address": "100.64.0.7", "env_dir": ENV, "repo": REPO,
                               "roost_home": tmp_path / "home", "etc": tmp_path / "etc", "unit_dir": tmp_path / "units",
                               "data": tmp_path / "data"}
    return Box(**(base | kw))  # type: ignore[arg-type]


def test_urls_are_the_address_the_tailnet_reaches_and_services_talk_over_loopback(tmp_path: Path) -> None:
    b = box(tmp_path, ports=Ports(prefect=4300, gateway=8081, results=8766))
    assert (b.prefect_ui, b.prefect_ui_api, b.prefect_api) == (
        "http://100.64.0.7:4300", "http://100.64.0.7:4300/api", "http://127.0.0.1:4300/api")
    assert (b.gateway_url, b.gateway_local, b.results_url) == (
        "http://100.64.0.7:8081/v1", "http://127.0.0.1:8081", "http://100.64.0.7:8766/")
    assert box(tmp_path, address="fd7a:115c::1").prefect_ui == "http://[fd7a:115c::1]:4200"
    assert box(tmp_path, monitoring=Monitoring(grafana=False)).grafana_url == ""


def test_the_database_password_and_the_vllm_key_live_only_in_mode_600_files(tmp_path: Path) -> None:
    b = box(tmp_path, postgres=True)
    unit, env = prefect_server_files(b, "pw-123")
    assert "pw-123" not in unit.text and env.mode == 0o600
    assert env_values_of(env)["PREFECT_API_DATABASE_CONNECTION_URL"] == (
        "postgresql+asyncpg://roost_prefect:pw-123@127.0.0.1:5432/roost_prefect")
    assert "pw-123" not in env.shown() and MASK in env.shown()
    assert "After=network-online.target postgresql.service" in unit.text
    sqlite_env = prefect_server_files(box(tmp_path), "")[1]
    assert "DATABASE" not in sqlite_env.text and sqlite_env.secrets == ()

    gw_unit, gw_env = gateway_files(b, "k" * 43)
    assert "k" * 43 not in gw_unit.text and gw_env.mode == 0o600
    assert env_values_of(gw_env) == {"VLLM_API_KEY": "k" * 43, "ROOST_GATEWAY_DB": f"sqlite:///{b.data}/gateway/gateway.db",
                                     "ROOST_HOME": str(b.roost_home), "PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    assert f"EnvironmentFile=-{b.gateway_env}" in gw_unit.text and "User=root" in gw_unit.text
    assert "k" * 43 not in gw_env.shown()


def env_values_of(f: BoxFile) -> dict[str, str]:
    f.path.parent.mkdir(parents=True, exist_ok=True)
    f.path.write_text(f.text)
    return env_values(f.path)


def test_worker_and_monitoring_commands(tmp_path: Path) -> None:
    b = box(tmp_path, monitoring=Monitoring(grafana=False, prometheus_image="p:1"),
            ports=Ports(gateway=9000, prometheus="127.0.0.1:19090"))
    assert worker_command(b, "roost")[1:] == ["--host", "spark", "--pool", "roost", "--skip-doctor", "--skip-env",
                                              "--results-dir", f"{b.data}/results"]
    assert monitor_up_args(b) == ["monitor", "up", "--host", "spark", "--gateway", "127.0.0.1:9000", "--listen",
                                  "127.0.0.1:19090", "--alertmanager", "127.0.0.1:9093", "--grafana-port", "3000",
                                  "--json", "--no-grafana", "--prometheus-image", "p:1"]


def test_write_file_rewrites_only_what_differs(tmp_path: Path) -> None:
    f = BoxFile(tmp_path / "etc" / "a.env", env_text({"A": "1 2", "B": "x"}), 0o600)
    assert write_file(f) == "created"
    assert write_file(f) == "unchanged"
    assert env_values(f.path) == {"A": "1 2", "B": "x"}
    f.path.chmod(0o644)
    assert write_file(f) == "updated" and f.path.stat().st_mode & 0o777 == 0o600
    assert write_file(BoxFile(f.path, "A=3\n", 0o600)) == "updated" and env_values(f.path) == {"A": "3"}
    assert [p.name for p in f.path.parent.iterdir()] == ["a.env"]  # no temporary file left
    assert env_values(tmp_path / "missing.env") == {}


def test_systemd_reads_every_unit_the_box_writes(tmp_path: Path) -> None:
    """``systemd-analyze verify`` (Debian's systemd; scripts/test installs it): every unit parses with no unknown
    key and its ExecStart exists."""
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze not found: install Debian's systemd package (scripts/test does)"
    b = box(tmp_path, postgres=True)
    units = [f for f in [*prefect_server_files(b, "pw"), *gateway_files(b, "key"), *results_files(b)]]
    for f in units:
        write_file(f)
    paths = [str(f.path) for f in units if f.path.suffix == ".service"]
    check = subprocess.run([analyze, "verify", *paths], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    problems = [line for line in check.stderr.splitlines() if any(Path(p).name in line for p in paths)]
    assert problems == [], check.stderr


@pytest.mark.parametrize("name", ["roost-prefect-server.service", "roost-gateway.service", "roost-results.service"])
def test_units_start_at_boot_and_come_back(tmp_path: Path, name: str) -> None:
    b = box(tmp_path)
    text = next(f.text for f in [*prefect_server_files(b), *gateway_files(b, "k"), *results_files(b)]
                if f.path.name == name)
    assert "WantedBy=multi-user.target" in text and "Restart=always" in text and "User=root" in text
