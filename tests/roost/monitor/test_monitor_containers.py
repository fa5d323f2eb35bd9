"""``roost monitor up`` on a real Docker engine, and the reload path ``sync`` picks for how Prometheus
was started (the recipe's lesson: a single-file bind mount of ``prometheus.yml`` keeps the old file
after an atomic rewrite, so a reload reads stale content and the container must be restarted).

This machine reaches no image registry, so ``prom/prometheus`` cannot be pulled: the stand-in image
is the test rootfs with Debian's ``prometheus`` binary at the official image's ``/bin/prometheus``
(``--prometheus-image``); likewise ``prom/alertmanager``'s stand-in carries Debian's
``prometheus-alertmanager`` at ``/bin/alertmanager`` (``--alertmanager-image``), started beside it,
answering ``status`` and removed by ``down``. Grafana cannot be run here at all (``--no-grafana``; see the README).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.alertmanager import have_alertmanager
from support.cli import run_roost as _roost
from support.monitor_images import build_alertmanager_image, build_prometheus_image
from support.prometheus import have_prometheus
from support.wait import poll

from roost.gateway import registry
from roost.monitor import queries as q
from roost.monitor.alertmanager import AlertmanagerAPI
from roost.monitor.containers import ALERTMANAGER_NAME, PROMETHEUS_NAME
from roost.monitor.prometheus import PrometheusAPI
from roost.monitor.render import render
from roost.monitor.state import load_state
from roost.monitor.sync import sync
from roost.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.docker,
              pytest.mark.skipif(not have_prometheus(), reason="Debian's prometheus package (scripts/test installs it)"),
              pytest.mark.skipif(not have_alertmanager(), reason="Debian's prometheus-alertmanager (scripts/test "
                                 "installs it)")]

METRICS = b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="fake"} 0\n'


@pytest.fixture(scope="module")
def prometheus_image(docker_engine: Any, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_prometheus_image(docker_engine, tmp_path_factory.mktemp("prom-image"))


@pytest.fixture(scope="module")
def alertmanager_image(docker_engine: Any, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_alertmanager_image(docker_engine, tmp_path_factory.mktemp("am-image"))


class Exporter:
    """A stand-in scrape target (FAKE: serves a fixed /metrics page) on 127.0.0.1."""

    def __init__(self) -> None:
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(METRICS)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), H)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, docker_engine: Any) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("monitor-up")
    saved = {k: os.environ.get(k) for k in ("ROOST_GATEWAY_BACKENDS_DIR", "ROOST_MONITOR_STATE")}
    os.environ["ROOST_GATEWAY_BACKENDS_DIR"] = str(where / "backends")
    os.environ["ROOST_MONITOR_STATE"] = str(where / "monitor.json")
    try:
        yield where
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for name in (PROMETHEUS_NAME, ALERTMANAGER_NAME):
            with contextlib.suppress(Exception):
                docker_engine.containers.get(name).remove(force=True)
        for volume in ("roost-prometheus-data", "roost-alertmanager-data"):
            with contextlib.suppress(Exception):
                docker_engine.volumes.get(volume).remove(force=True)




def _up(api: PrometheusAPI, address: str, timeout_s: float = 60) -> None:
    if not poll(lambda: any(t.job == q.VLLM_JOB and t.address == address and t.health == "up" for t in api.targets()),
                timeout_s=timeout_s):
        raise AssertionError(f"{address} not scraped: {api.targets()}")


def _last_reload(url: str) -> tuple[float, float]:
    """Prometheus's own account of its last configuration load: (when it last succeeded, whether the last
    one did: 1 or 0), from its ``/metrics``."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("prometheus_config_last_reload_success_timestamp_seconds", "prometheus_config_last_reload_successful"):
            values[name] = float(value)
    return (values["prometheus_config_last_reload_success_timestamp_seconds"],
            values["prometheus_config_last_reload_successful"])


def _started_at(docker_engine: Any) -> str:
    return str(docker_engine.containers.get(PROMETHEUS_NAME).attrs["State"]["StartedAt"])


def test_folder_mount_takes_a_new_target_by_reload(env: Path, prometheus_image: str, alertmanager_image: str,
                                                   docker_engine: Any, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    listen, am = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    code, out, err = _roost(capsys, monkeypatch, "monitor", "up", "--out", str(env / "files"), "--no-grafana",
                            "--prometheus-image", prometheus_image, "--listen", listen, "--scrape-interval", "1s",
                            "--evaluation-interval", "1s", "--gateway", f"127.0.0.1:{free_port()}",
                            "--alertmanager-image", alertmanager_image, "--alertmanager", am, "--no-slack")
    assert code == 0, err
    assert f"Prometheus http://{listen} ({PROMETHEUS_NAME}, dir mount)" in out
    assert f"Alertmanager http://{am} ({ALERTMANAGER_NAME})" in out and "alerts go nowhere" in out
    assert AlertmanagerAPI(f"http://{am}").ready()
    mounts = {m["Destination"]: m for m in docker_engine.containers.get(ALERTMANAGER_NAME).attrs["Mounts"]}
    assert mounts["/etc/alertmanager"]["Source"] == str((env / "files" / "alertmanager").resolve())
    api = PrometheusAPI(f"http://{listen}")
    started = _started_at(docker_engine)
    exporter = Exporter()
    registry.register(f"http://{exporter.address}", "fake", "spark", "run-1")  # as a kept landing does
    result = sync()
    assert result is not None and result.method == "lifecycle-reload" and result.targets == [exporter.address]
    _up(api, exporter.address)
    assert _started_at(docker_engine) == started  # nobody restarted it


def test_single_file_mount_is_restarted_because_a_reload_reads_the_old_file(
        env: Path, prometheus_image: str, alertmanager_image: str, docker_engine: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    state = load_state()
    assert state is not None
    listen = state.prometheus_url.removeprefix("http://")
    code, out, err = _roost(capsys, monkeypatch, "monitor", "up", "--out", state.out, "--no-grafana", "--mount", "file",
                            "--prometheus-image", prometheus_image, "--listen", listen, "--scrape-interval", "1s",
                            "--evaluation-interval", "1s", "--gateway", state.gateway, "--alertmanager-image",
                            alertmanager_image, "--alertmanager", state.alertmanager, "--no-slack")
    assert code == 0 and "file mount" in out, err
    api = PrometheusAPI(state.prometheus_url)
    second = Exporter()
    registry.register(f"http://{second.address}", "fake-2", "spark-2", "run-2")
    # the lesson, shown: the file is rewritten atomically (as roost and `sed -i` do) ...
    rendered = render(Path(state.out), state.options())
    assert "prometheus/prometheus.yml" in rendered.changed
    container = docker_engine.containers.get(PROMETHEUS_NAME)
    inside = container.exec_run(["cat", "/etc/prometheus/prometheus.yml"]).output.decode()
    assert second.address in (Path(state.out) / "prometheus" / "prometheus.yml").read_text()
    assert second.address not in inside  # ... but the container still sees the old file
    loaded_at, _ = _last_reload(state.prometheus_url)
    api.reload()
    # Prometheus did reload (its own record of it moved on, and says it succeeded) ...
    reloaded_at, ok = _last_reload(state.prometheus_url)
    assert reloaded_at > loaded_at and ok == 1, (loaded_at, reloaded_at, ok)
    loaded = api.loaded_config()
    assert second.address not in str(loaded)  # ... and "succeeded" with the old targets
    # sync tells the mount apart and restarts the container
    started = _started_at(docker_engine)
    result = sync(force_reload=True)
    assert result is not None and result.method == "container-restart", result
    assert second.address in result.targets and "single file" in result.note
    assert _started_at(docker_engine) != started
    _up(api, second.address)


def test_status_and_down(env: Path, docker_engine: Any, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    deadline = time.monotonic() + 30
    while True:  # no gateway runs at the address it scrapes: GatewayDown goes pending at the next evaluation
        code, out, err = _roost(capsys, monkeypatch, "monitor", "status", "--json")
        assert code == 0, err
        doc = json.loads(out)
        if any(a["name"] == "GatewayDown" for a in doc["alerts"]) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {t["job"] for t in doc["targets"]} == {q.VLLM_JOB, q.GATEWAY_JOB}
    assert any(a["name"] == "GatewayDown" for a in doc["alerts"]), doc["alerts"]
    assert doc["alertmanager"]["error"] is None, doc["alertmanager"]  # it answers (holding GatewayDown once firing)
    code, out, err = _roost(capsys, monkeypatch, "monitor", "down")
    assert code == 0 and PROMETHEUS_NAME in out and ALERTMANAGER_NAME in out, err
    assert not docker_engine.containers.list(all=True, filters={"name": PROMETHEUS_NAME})
    assert not docker_engine.containers.list(all=True, filters={"name": ALERTMANAGER_NAME})
    with pytest.raises(httpx.HTTPError):
        httpx.get(doc["prometheus"] + "/-/ready", timeout=2)
    code, _, err = _roost(capsys, monkeypatch, "monitor", "down")
    assert code == 2 and "has not started" in err


def test_an_image_that_cannot_be_pulled_is_one_line(env: Path, docker_engine: Any, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = _roost(capsys, monkeypatch, "monitor", "up", "--out", str(env / "other"), "--no-grafana",
                          "--prometheus-image", "roost-test/no-such-prometheus:0", "--listen",
                          f"127.0.0.1:{free_port()}")
    assert code == 2 and err.count("\n") == 1, err
    assert "cannot pull roost-test/no-such-prometheus:0" in err and "--prometheus-image" in err
    assert not docker_engine.containers.list(all=True, filters={"name": PROMETHEUS_NAME})
