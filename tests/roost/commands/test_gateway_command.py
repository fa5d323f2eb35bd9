"""``roost gateway`` keys, usage, tailnet device keys and the systemd unit, through the CLI's own entry
point (in this process), and its unusable inputs: one line, exit 2."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_roost as roost

from roost.gateway.db import GatewayDB


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gateway.db'}"


def insert_usage(url: str, rows: list[dict[str, Any]]) -> None:
    async def go() -> None:
        store = await GatewayDB(url).connect()
        try:
            await store.insert_usage(rows)
        finally:
            await store.close()

    asyncio.run(go())


def row(key: str, kind: str, model: str, prompt: int, completion: int, ts: float, user: str | None = None) -> dict[str, Any]:
    return {"request_id": f"{key}-{ts}-{prompt}", "ts": ts, "day": time.strftime("%Y-%m-%d", time.gmtime(ts)),
            "key_name": key, "kind": kind, "user": user, "model": model, "backend": "http://127.0.0.1:8004",
            "endpoint": "chat", "stream": True, "status": "ok", "http_status": 200, "prompt_tokens": prompt,
            "completion_tokens": completion, "prompt_source": "usage", "completion_source": "usage", "ttft_s": 0.1,
            "duration_s": 1.0, "added_s": 0.0004, "gateway": "test:1"}


def test_key_add_list_revoke(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, db: str) -> None:
    code, out, err = roost(capsys, monkeypatch, "gateway", "key", "add", "alice", "--db", db, "--json")
    assert code == 0, err
    made = json.loads(out)
    assert set(made) == {"name", "kind", "key", "trusted"} and made["kind"] == "user" and made["key"].startswith("rk-")
    code, out, _ = roost(capsys, monkeypatch, "gateway", "key", "add", "laptop", "--kind", "device", "--db", db)
    assert code == 0 and out.strip().startswith("rk-")
    code, out, _ = roost(capsys, monkeypatch, "gateway", "key", "list", "--db", db, "--json")
    listed = json.loads(out)
    assert [(k["name"], k["kind"], k["revoked"]) for k in listed] == [("alice", "user", False), ("laptop", "device", False)]
    assert made["key"] not in out and "digest" not in out
    assert roost(capsys, monkeypatch, "gateway", "key", "revoke", "alice", "--db", db)[0] == 0
    code, out, _ = roost(capsys, monkeypatch, "gateway", "key", "list", "--db", db)
    assert code == 0 and "alice" in out and "revoked" in out and made["key"] not in out
    # the same name again: refused while active, a new key once revoked
    assert roost(capsys, monkeypatch, "gateway", "key", "add", "laptop", "--db", db)[0] == 2
    assert roost(capsys, monkeypatch, "gateway", "key", "add", "alice", "--db", db)[0] == 0


def test_usage_by_key_kind_model_day_and_since(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                               db: str) -> None:
    now = time.time()
    insert_usage(db, [row("alice", "user", "tiny", 10, 5, now - 60), row("alice", "user", "tiny", 20, 7, now - 30),
                      row("alice", "user", "big", 1, 1, now - 3 * 86400), row("laptop", "device", "tiny", 4, 2, now)])
    code, out, err = roost(capsys, monkeypatch, "gateway", "usage", "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out) == [
        {"key": "alice", "kind": "user", "model": "tiny", "requests": 2, "prompt_tokens": 30, "completion_tokens": 12},
        {"key": "laptop", "kind": "device", "model": "tiny", "requests": 1, "prompt_tokens": 4, "completion_tokens": 2},
        {"key": "alice", "kind": "user", "model": "big", "requests": 1, "prompt_tokens": 1, "completion_tokens": 1},
    ]
    by_kind = json.loads(roost(capsys, monkeypatch, "gateway", "usage", "--db", db, "--by", "kind", "--json")[1])
    assert by_kind == [{"kind": "user", "requests": 3, "prompt_tokens": 31, "completion_tokens": 13},
                       {"kind": "device", "requests": 1, "prompt_tokens": 4, "completion_tokens": 2}]
    recent = json.loads(roost(capsys, monkeypatch, "gateway", "usage", "--db", db, "--since", "1d", "--json")[1])
    assert sum(r["requests"] for r in recent) == 3
    days = json.loads(roost(capsys, monkeypatch, "gateway", "usage", "--db", db, "--by", "day", "--json")[1])
    assert [d["requests"] for d in days] == [1, 3] and days[0]["day"] < days[1]["day"]
    code, out, _ = roost(capsys, monkeypatch, "gateway", "usage", "--db", db, "--by", "model")
    assert code == 0 and out.splitlines()[0].split() == ["model", "requests", "prompt_tokens", "completion_tokens"]


def test_sync_tailscale_makes_one_device_key_per_node_once(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch, db: str,
                                                           tmp_path: Path) -> None:
    status = {
        "Self": {"ID": "n1", "HostName": "spark", "DNSName": "spark.tail1234.ts.net.", "OS": "linux",
                 "TailscaleIPs": ["100.64.0.1", "fd7a::1"], "Online": True},
        "Peer": {
            "nodekey:a": {"ID": "n2", "HostName": "Ana's MacBook Pro", "DNSName": "anas-macbook-pro.tail1234.ts.net.",
                          "OS": "macOS", "TailscaleIPs": ["100.64.0.2"], "Online": True},
            "nodekey:b": {"ID": "n3", "HostName": "pixel-7", "DNSName": "pixel-7.tail1234.ts.net.", "OS": "android",
                          "TailscaleIPs": ["100.64.0.3"], "Online": False},
        },
    }
    status_file = tmp_path / "status.json"
    status_file.write_text(json.dumps(status))
    out_csv = tmp_path / "keys" / "tailnet-keys.csv"
    code, out, err = roost(capsys, monkeypatch, "gateway", "key", "sync-tailscale", "--status-json", str(status_file),
                           "--csv", str(out_csv), "--db", db, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [c["name"] for c in report["created"]] == ["ts-spark", "ts-ana-s-macbook-pro", "ts-pixel-7"]
    assert all("key" not in c for c in report["created"])  # the keys went to the CSV, not the terminal
    with out_csv.open() as f:
        handed = list(csv.DictReader(f))
    assert [(r["name"], r["kind"], r["tailscale_ip"], r["dns_name"]) for r in handed] == [
        ("ts-spark", "device", "100.64.0.1", "spark.tail1234.ts.net"),
        ("ts-ana-s-macbook-pro", "device", "100.64.0.2", "anas-macbook-pro.tail1234.ts.net"),
        ("ts-pixel-7", "device", "100.64.0.3", "pixel-7.tail1234.ts.net")]
    assert all(r["key"].startswith("rk-") for r in handed) and out_csv.stat().st_mode & 0o777 == 0o600
    # a second sync with one new node: only that node gets a key
    status["Peer"]["nodekey:c"] = {"ID": "n4", "HostName": "ci-runner", "TailscaleIPs": ["100.64.0.4"]}
    status_file.write_text(json.dumps(status))
    code, out, _ = roost(capsys, monkeypatch, "gateway", "key", "sync-tailscale", "--status-json", str(status_file),
                         "--db", db, "--json")
    report = json.loads(out)
    assert [c["name"] for c in report["created"]] == ["ts-ci-runner"] and len(report["existing"]) == 3
    assert report["created"][0]["key"].startswith("rk-")  # no --csv: the key is printed once
    listed = json.loads(roost(capsys, monkeypatch, "gateway", "key", "list", "--db", db, "--json")[1])
    assert {k["kind"] for k in listed} == {"device"} and len(listed) == 4


def test_install_writes_a_unit_systemd_accepts(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                               db: str, tmp_path: Path) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "upstream-not-for-the-unit")
    monkeypatch.setenv("ROOST_GATEWAY_METRICS_USERS", "0")  # no forwarded e-mail in its /metrics
    code, _, err = roost(capsys, monkeypatch, "gateway", "install", "--no-start", "--db", db, "--unit-dir",
                         str(tmp_path / "units"), "--env-file", str(tmp_path / "gateway.env"), "--backend",
                         "127.0.0.1:8004/v1", "--port", "8080")
    assert code == 0, err
    unit = (tmp_path / "units" / "roost-gateway.service").read_text()
    assert "gateway serve --host 0.0.0.0 --port 8080 --backend http://127.0.0.1:8004" in unit
    assert f"EnvironmentFile=-{tmp_path / 'gateway.env'}" in unit and "upstream-not-for-the-unit" not in unit
    service = unit.split("[Service]")[1].split("[Install]")[0]
    assert "\nLimitNOFILE=65536\n" in service  # 2 files a connection: --max-connections 4096 fits
    env = (tmp_path / "gateway.env")
    assert "VLLM_API_KEY=upstream-not-for-the-unit" in env.read_text() and env.stat().st_mode & 0o777 == 0o600
    assert f"ROOST_GATEWAY_DB={db}" in env.read_text() and "ROOST_GATEWAY_METRICS_USERS=0\n" in env.read_text()
    # systemd itself: the unit parses, with no unknown key, and its ExecStart exists (Debian's systemd package;
    # scripts/test installs it when missing)
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze not found: install Debian's systemd package (scripts/test does)"
    # a user manager needs a runtime directory; without one verify fails before it reads the unit, naming none
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    check = subprocess.run([analyze, "verify", "--user", str(tmp_path / "units" / "roost-gateway.service")],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    assert check.returncode == 0, check.stderr  # the unit was read and verified ...
    problems = [line for line in check.stderr.splitlines() if "roost-gateway.service" in line]
    assert problems == [], check.stderr  # ... and systemd had nothing to say of it (warnings included)


@pytest.mark.parametrize(("args", "line"), [
    (["gateway", "usage", "--by", "month"], "roost: error: --by 'month': use one of key, kind, model, day, user"),
    (["gateway", "usage", "--since", "yesterday"],
     "roost: error: --since 'yesterday': give a duration (30m, 24h, 7d) or a date (2026-12-01, 2026-12-01T08:00)"),
    (["gateway", "key", "add", "bad name!"], "roost: error: NAME 'bad name!': a key name is 1-128 letters, digits or "
     ". _ @ + - (starting with a letter or digit)"),
    (["gateway", "key", "add", "x", "--kind", "robot"], "roost: error: --kind 'robot': use one of user, device, app"),
    (["gateway", "key", "revoke", "nobody"], "roost: error: NAME 'nobody': no such key (roost gateway key list shows them)"),
    (["gateway", "usage", "--db", "mysql://u@h/db"],
     "roost: error: --db: 'mysql' databases are not supported; use sqlite:///PATH or postgresql://USER@HOST/DB"),
    (["gateway", "key", "list", "--db", "nonsense"],
     "roost: error: --db: not a database URL; use sqlite:///PATH or postgresql://USER@HOST/DB"),
    (["gateway", "serve", "--prot", "8080"],
     "roost: error: No such option: --prot (Possible options: --host, --port) (see `roost gateway serve --help`)"),
    (["gateway", "serve", "--port", "99999"], "roost: error: Invalid value for '--port': Input should be less than or "
     "equal to 65535 (see `roost gateway serve --help`)"),
    (["gateway", "serve", "--max-header-kb", "2048"], "roost: error: Invalid value for '--max-header-kb': Input "
     "should be less than or equal to 1024 (see `roost gateway serve --help`)"),
    (["gateway", "serve", "--max-connections-per-client", "0"], "roost: error: Invalid value for "
     "'--max-connections-per-client': Input should be greater than or equal to 1 (see `roost gateway serve --help`)"),
    (["gateway", "key", "sync-tailscale", "--status-json", "/nonexistent.json"],
     "roost: error: --status-json /nonexistent.json: no such file"),
])
def test_unusable_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           db: str, args: list[str], line: str) -> None:
    extra = [] if "--db" in args or args[1] == "serve" else ["--db", db]
    code, out, err = roost(capsys, monkeypatch, *args, *extra)
    assert (code, err, out) == (2, line + "\n", "")


def test_serve_refuses_a_port_in_use_and_a_database_it_cannot_open(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = roost(capsys, monkeypatch, "gateway", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--backend", "http://127.0.0.1:1", "--db", f"sqlite:///{tmp_path / 'g.db'}")
    assert (code, err) == (2, f"roost: error: --port {port}: already in use on 127.0.0.1; stop what listens there "
                              "or pass another --port\n")
    (tmp_path / "dir.db").mkdir()
    code, _, err = roost(capsys, monkeypatch, "gateway", "serve", "--host", "127.0.0.1", "--port", "0",
                         "--db", f"sqlite:///{tmp_path / 'dir.db'}")
    assert code == 2 and err.startswith("roost: error: --db: ") and "is not a file" in err and err.count("\n") == 1
