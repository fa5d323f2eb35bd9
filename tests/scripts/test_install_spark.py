"""``scripts/install-spark`` (``roost install``): the whole serving box from one command, on a machine with
systemd as its init (``support.systemd_box``: a container booted with ``/sbin/init``).

End to end: the install starts every service; a second run changes nothing; a landing triggered through
the installed Prefect server's API lands, registers with the installed gateway, is scraped by the installed
Prometheus and its report is served at the recorded ``results_url``; a restart of the machine brings every
service back; ``--uninstall`` leaves no unit and no process (data kept), and ``--postgres`` then ``--uninstall
--purge`` put the server's database in Debian's PostgreSQL and take everything away. Also: the dry run (every
unit, environment file with secrets masked, command and container), bad flags (one line, exit 2) and a failed
doctor check (one line, exit 1, nothing written).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from docker_fixtures import REPO
from support.monitor_images import build_alertmanager_image, build_prometheus_image
from support.prefect_server import using_api
from support.systemd_box import CA_BUNDLE, PYTHON_ROOT, SystemdBox, build_box_image, systemd_box
from support.wait import wait_for
from support.workers import wait_final

from roost.install.layout import GATEWAY_UNIT, PREFECT_UNIT, RESULTS_UNIT
from roost.monitor.prometheus import PrometheusAPI
from roost.net import free_port

ROOST = REPO / ".venv" / "bin" / "roost"
SCRIPT = REPO / "scripts" / "install-spark"
UNITS = [PREFECT_UNIT, "roost-worker@cpu.service", GATEWAY_UNIT, RESULTS_UNIT]
LANDING_TIMEOUT_S = 900
SHORT = {"timeout": 120, "capture_output": True, "text": True, "check": False}


# --- without a machine: the dry run and bad input ---------------------------------------------------


def roost_install(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROOST_HOME": str(home), "ROOST_WORKER_ENV": str(REPO / ".venv")}
    return subprocess.run([str(ROOST), "install", *args], env=env, cwd=REPO, **SHORT)  # type: ignore[call-overload, no-any-return]


def test_dry_run_shows_every_unit_env_file_command_and_container_and_writes_nothing(tmp_path: Path) -> None:
    r = roost_install("--dry-run", "--json", "--host", "cpu", "--demo", "--postgres", "--address", "100.64.0.7",
                      home=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    files = {f["path"]: f for f in doc["files"]}
    assert set(files) == {"/etc/systemd/system/roost-prefect-server.service", "/etc/roost/prefect-server.env",
                          "/etc/systemd/system/roost-gateway.service", "/etc/roost/gateway.env",
                          "/etc/systemd/system/roost-results.service"}
    assert {p: f["mode"] for p, f in files.items() if p.endswith(".env")} == {"/etc/roost/prefect-server.env": "600",
                                                                             "/etc/roost/gateway.env": "600"}
    server_env = files["/etc/roost/prefect-server.env"]["text"]
    assert "PREFECT_UI_API_URL=http://100.64.0.7:4200/api" in server_env  # the address the tailnet reaches
    assert ("PREFECT_API_DATABASE_CONNECTION_URL='postgresql+asyncpg://roost_prefect:********@127.0.0.1:5432/"
            "roost_prefect'") in server_env
    assert "VLLM_API_KEY='********'" in files["/etc/roost/gateway.env"]["text"]
    assert Path(doc["env"]).name == ".venv"  # this command's environment (a worktree's .venv may be a link)
    assert f"ExecStart={doc['env']}/bin/prefect server start --host 0.0.0.0 --port 4200" in \
        files["/etc/systemd/system/roost-prefect-server.service"]["text"]
    assert "gateway serve --host 0.0.0.0 --port 8080" in files["/etc/systemd/system/roost-gateway.service"]["text"]
    assert "results --dir /var/lib/roost/results serve --bind 0.0.0.0 --port 8765" in \
        files["/etc/systemd/system/roost-results.service"]["text"]
    for f in files.values():  # system units, started at boot, run as the user who ran sudo (root here)
        if f["path"].endswith(".service"):
            assert "WantedBy=multi-user.target" in f["text"] and "User=root" in f["text"], f["text"]
    commands = "\n".join(doc["commands"])
    for expected in ("roost doctor --host cpu", "CREATE DATABASE roost_prefect", "VLLM_API_KEY=******** roost setup "
                     "--hosts cpu --store-vllm-api-key", "results_url http://100.64.0.7:8765/",
                     "install-worker --host cpu", "--skip-env --results-dir /var/lib/roost/results",
                     "roost gateway key add admin", "roost monitor up --host cpu --gateway 127.0.0.1:8080"):
        assert expected in commands, (expected, commands)
    assert "would write /etc/systemd/system/roost-worker@.service" in doc["worker"]
    assert "ROOST_RESULTS_DIR=/var/lib/roost/results" in doc["worker"]
    assert [(c["name"], c["image"]) for c in doc["containers"]] == [
        ("roost-prometheus", "prom/prometheus:v3.5.0"), ("roost-alertmanager", "prom/alertmanager:v0.28.1"),
        ("roost-grafana", "grafana/grafana:11.6.0")]
    assert not Path("/etc/systemd/system/roost-prefect-server.service").exists()
    assert not (tmp_path / "monitor").exists()

    text = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--host", "cpu", "--demo", "--no-grafana"],
                          env={**os.environ, "ROOST_WORKER_ENV": str(REPO / ".venv"), "ROOST_HOME": str(tmp_path)},
                          **SHORT)  # type: ignore[call-overload]
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("roost install --dry-run: host cpu, services run as root")
    for expected in ("would write /etc/systemd/system/roost-prefect-server.service (mode 644):",
                     "would write /etc/roost/gateway.env (mode 600):", "  its dry run:",
                     "would start containers (restart unless-stopped): roost-prometheus (prom/prometheus:v3.5.0"):
        assert expected in text.stdout, expected
    assert "grafana" not in text.stdout.split("would start containers")[1]


@pytest.mark.parametrize(("args", "message"), [
    (("--hots", "cpu"), "No such option: --hots"),
    (("--purge",), "--purge goes with --uninstall"),
    (("--host", "nosuch"), "unknown host profile 'nosuch'"),
    (("--prometheus-listen", "nope"), "--prometheus-listen 'nope': give HOST:PORT"),
    (("--gateway-port", "4200"), "must differ"),
    (("--host", "cpu"), "needs the demo extra: run scripts/install-spark --host cpu, which installs it"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    r = roost_install("--dry-run", *args, home=tmp_path) if args != ("--host", "cpu") else roost_install(
        "--dry-run", "--host", "cpu", "--env", str(_env_without_demo(tmp_path)), home=tmp_path)
    assert r.returncode == 2, r
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    script = subprocess.run(["bash", str(SCRIPT), "--bogus"],  # checked before the environment is installed
                            env={**os.environ, "ROOST_WORKER_ENV": str(REPO / ".venv")}, **SHORT)  # type: ignore[call-overload]
    assert script.returncode == 2 and script.stderr.count("\n") == 1 and "--bogus" in script.stderr, script.stderr


def _env_without_demo(tmp_path: Path) -> Path:
    """An environment with bin/roost and bin/prefect but no demo extra (no olah)."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    for name in ("roost", "prefect"):
        (env / "bin" / name).symlink_to(REPO / ".venv" / "bin" / name)
    return env


def test_script_is_valid_bash_and_its_help_is_its_header() -> None:
    for script in (SCRIPT, REPO / "scripts" / "service-env"):
        assert subprocess.run(["bash", "-n", str(script)], **SHORT).returncode == 0  # type: ignore[call-overload]
        assert os.access(script, os.X_OK)
    r = subprocess.run(["bash", str(SCRIPT), "--help"], **SHORT)  # type: ignore[call-overload]
    assert r.returncode == 0 and r.stdout.startswith("One Spark, one command")
    assert "set -euo" not in r.stdout


# --- on a machine with systemd --------------------------------------------------------------------


@pytest.fixture(scope="module")
def machine(docker_engine: Any, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The box image, the monitoring stand-ins, a work directory (the box's ROOST_HOME, with the vLLM CPU venv)
    and free ports on this host's network, then the booted box."""
    build_box_image(docker_engine, tmp_path_factory.mktemp("box-image"))
    prometheus = build_prometheus_image(docker_engine, tmp_path_factory.mktemp("prom-image"))
    alertmanager = build_alertmanager_image(docker_engine, tmp_path_factory.mktemp("am-image"))
    work = Path(tmp_path_factory.mktemp("spark")).resolve()
    vllm_venv = Path(os.environ["ROOST_VLLM_PYTHON"]).parents[1].resolve()
    (work / "home").mkdir()
    (work / "home" / "vllm-venv").symlink_to(vllm_venv)
    ports = {"prefect": free_port(), "gateway": free_port(), "results": free_port(), "prometheus": free_port(),
             "alertmanager": free_port()}
    uv_cache = Path.home() / ".cache" / "uv"
    with systemd_box(docker_engine, f"roost-test-spark-{os.getpid()}", work, [vllm_venv, uv_cache]) as box:
        args = ["--host", "cpu", "--address", "127.0.0.1", "--prefect-port", str(ports["prefect"]),
                "--gateway-port", str(ports["gateway"]), "--results-port", str(ports["results"]),
                "--prometheus-listen", f"127.0.0.1:{ports['prometheus']}",
                "--alertmanager", f"127.0.0.1:{ports['alertmanager']}", "--no-grafana",
                "--prometheus-image", prometheus, "--alertmanager-image", alertmanager]
        env = {"ROOST_WORKER_ENV": "/opt/roost-env", "ROOST_PYTHON": str(PYTHON_ROOT / "bin" / "python3"),
               "ROOST_HOME": str(work / "home"), "SSL_CERT_FILE": str(CA_BUNDLE),
               "PATH": f"{PYTHON_ROOT / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        try:
            yield {"box": box, "args": args, "env": env, "ports": ports, "work": work, "client": docker_engine}
        finally:
            box.run([str(SCRIPT), "--uninstall", "--purge", *args[:2]], env=env, timeout_s=300)


def spark(m: dict[str, Any], *extra: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return m["box"].run([str(SCRIPT), *m["args"], *extra], env=m["env"], timeout_s=timeout_s)


def _active(box: SystemdBox, unit: str) -> bool:
    return box.run(["systemctl", "is-active", "--quiet", unit], timeout_s=30).returncode == 0


def test_the_box_installs_lands_comes_back_after_a_restart_and_uninstalls(machine: dict[str, Any]) -> None:
    _a_failed_doctor_check_writes_nothing(machine)
    started = time.monotonic()
    doc = _installs_then_changes_nothing(machine)
    print(f"install: {time.monotonic() - started:.0f} s")
    report_link = _lands_through_the_box(machine, doc["admin_key"])
    print(f"install to landed and checked: {time.monotonic() - started:.0f} s")
    _comes_back_after_a_restart(machine, report_link)
    _uninstalls_keeping_data_then_postgres_then_purge(machine)


def _a_failed_doctor_check_writes_nothing(machine: dict[str, Any]) -> None:
    """One line, exit 1, nothing written (this box has no GPU for the spark host)."""
    box: SystemdBox = machine["box"]
    gpu = box.run([str(SCRIPT), "--host", "spark"], env=machine["env"])
    assert gpu.returncode == 1, gpu
    assert gpu.stderr.splitlines()[-1].startswith("roost: error: doctor: ") and "nvidia" in gpu.stderr, gpu.stderr
    assert [ln for ln in gpu.stderr.splitlines() if not ln.startswith("install-spark: ")] == \
        [gpu.stderr.splitlines()[-1]]
    assert "No such file" in box.sh("ls /etc/roost /etc/systemd/system/roost-prefect-server.service")


def _installs_then_changes_nothing(machine: dict[str, Any]) -> dict[str, Any]:
    box: SystemdBox = machine["box"]
    first = spark(machine, "--json")
    assert first.returncode == 0, (first.stderr[-3000:], box.journal(PREFECT_UNIT))
    doc: dict[str, Any] = json.loads(first.stdout)
    assert doc["changed"] and doc["admin_key"] and doc["doctor"] == {"ok": True, "failed": []}, doc
    assert {s["name"]: s["status"] for s in doc["steps"]} == {
        "directories": "created", "prefect-server": "created", "roost setup": "updated", "vllm-api-key": "created",
        "host block": "updated", "worker": "created", "gateway": "created", "admin key": "created",
        "report server": "created", "monitoring": "created"}
    assert all(_active(box, u) for u in UNITS), box.sh("systemctl status 'roost*' --no-pager")
    assert box.sh("stat -c '%a %n' /etc/roost/gateway.env /etc/roost/prefect-server.env").split() == [
        "600", "/etc/roost/gateway.env", "600", "/etc/roost/prefect-server.env"]
    vllm_key = box.sh("sed -n 's/^VLLM_API_KEY=//p' /etc/roost/gateway.env").strip()
    assert len(vllm_key) >= 32
    logs = box.sh("journalctl --no-pager; cat /etc/systemd/system/roost-*.service") + first.stdout + first.stderr
    assert vllm_key not in logs

    again = spark(machine, "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout)
    assert not second["changed"] and second["admin_key"] is None, second["steps"]
    assert {s["status"] for s in second["steps"]} == {"unchanged"}
    return doc


def _lands_through_the_box(machine: dict[str, Any], admin_key: str) -> str:
    """A landing through the installed server's API: kept, behind the installed gateway, scraped by the installed
    Prometheus, its report at the recorded results_url (returned)."""
    box: SystemdBox = machine["box"]
    ports = machine["ports"]
    with using_api(f"http://127.0.0.1:{ports['prefect']}/api"):
        from prefect.deployments import run_deployment

        fr = run_deployment("land/cpu", parameters={"keep_serving": True}, timeout=0)
        fr = wait_final(fr.id, LANDING_TIMEOUT_S)
        assert fr.state.is_completed(), (fr.state, box.journal("roost-worker@cpu", 60))
        report_link = _report_link(fr.id)
    gateway = f"http://127.0.0.1:{ports['gateway']}"
    headers = {"Authorization": f"Bearer {admin_key}"}
    models = wait_for("the kept server behind the installed gateway", lambda: [
        m["id"] for m in httpx.get(f"{gateway}/v1/models", headers=headers, timeout=10).json().get("data", [])],
        timeout_s=60, every_s=1)
    assert models == ["tiny"], models
    chat = httpx.post(f"{gateway}/v1/chat/completions", headers=headers, timeout=120, json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert chat.status_code == 200, chat.text[:500]
    prometheus = PrometheusAPI(f"http://127.0.0.1:{ports['prometheus']}")
    vllm_targets = wait_for("the kept server among the installed Prometheus's targets, up", lambda: [
        t for t in prometheus.targets() if t.job == "vllm" and t.health == "up"], timeout_s=120, every_s=2)
    assert len(vllm_targets) == 1, vllm_targets
    assert report_link.startswith(f"http://127.0.0.1:{ports['results']}/"), report_link
    page = httpx.get(report_link, timeout=10)
    assert page.status_code == 200 and "tiny" in page.text, (report_link, page.status_code)
    return report_link


def _comes_back_after_a_restart(machine: dict[str, Any], report_link: str) -> None:
    """A reboot: every service comes back by itself, and a run then finds everything up."""
    box: SystemdBox = machine["box"]
    ports = machine["ports"]
    box.restart()
    wait_for("every unit active after the restart", lambda: all(_active(box, u) for u in UNITS), timeout_s=120,
             every_s=1)
    for what, url in (("the Prefect server", f"http://127.0.0.1:{ports['prefect']}/api/health"),
                      ("the gateway", f"http://127.0.0.1:{ports['gateway']}/health"), ("the report server", report_link)):
        wait_for(f"{what} after the restart", lambda url=url: _answers(url), timeout_s=180, every_s=1)
    assert PrometheusAPI(f"http://127.0.0.1:{ports['prometheus']}").ready()
    after = spark(machine, "--json")
    assert after.returncode == 0 and not json.loads(after.stdout)["changed"], after.stdout[-3000:]


def _uninstalls_keeping_data_then_postgres_then_purge(machine: dict[str, Any]) -> None:
    box: SystemdBox = machine["box"]
    gone = spark(machine, "--uninstall", "--json", timeout_s=300)
    assert gone.returncode == 0, gone.stderr[-3000:]
    assert box.sh("ls /etc/systemd/system | grep -c roost || true").strip() == "0"
    assert box.sh("systemctl list-units --all --no-legend 'roost*' | wc -l").strip() == "0"
    left = box.sh("ps -eo args --no-headers | grep -E 'prefect|roost|vllm' | grep -v grep || true").strip()
    assert left == "", left
    assert box.sh("ls /etc/roost /var/lib/roost/results").count("gateway.env") == 1  # data and keys kept
    assert not machine["client"].containers.list(all=True, filters={"label": "ai.roost.monitor"})

    # the database in Debian's PostgreSQL, then everything away
    pg = spark(machine, "--postgres", "--json")
    assert pg.returncode == 0, (pg.stderr[-3000:], box.journal(PREFECT_UNIT))
    steps = {s["name"]: s["status"] for s in json.loads(pg.stdout)["steps"]}
    assert steps["postgresql"] == "created" and steps["admin key"] == "unchanged", steps
    assert box.sh("runuser -u postgres -- psql -tAc \"SELECT datname FROM pg_database WHERE datname = "
                  "'roost_prefect'\"").strip() == "roost_prefect"
    password = box.sh("sed -n 's/^PREFECT_API_DATABASE_CONNECTION_URL=.*roost_prefect:\\([^@]*\\)@.*/\\1/p' "
                      "/etc/roost/prefect-server.env").strip()
    assert len(password) >= 24, password  # made for this box, in the server's environment file only
    assert password not in box.sh("journalctl --no-pager; cat /etc/systemd/system/roost-*.service") + pg.stdout + pg.stderr
    purged = spark(machine, "--uninstall", "--purge", "--json", timeout_s=300)
    assert purged.returncode == 0, purged.stderr[-3000:]
    assert "No such file" in box.sh("ls /etc/roost /var/lib/roost")
    assert box.sh("runuser -u postgres -- psql -tAc \"SELECT count(*) FROM pg_roles WHERE rolname = "
                  "'roost_prefect'\"").strip() == "0"
    assert not re.search(r"roost-(prometheus|alertmanager)-data",
                         " ".join(v.name for v in machine["client"].volumes.list()))


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _report_link(flow_run_id: Any) -> str:
    """The report's address in the run's report artifact (the results URL the install recorded)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[flow_run_id])))
    report = next(a for a in arts if a.type == "markdown" and (a.key or "").startswith("roost-report-"))
    links = re.findall(r"\((http://[^)\s]+/report\.html)\)", str(report.data))
    assert links, str(report.data)[:2000]
    return links[0]
