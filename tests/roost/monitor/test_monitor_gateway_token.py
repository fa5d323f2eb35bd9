"""A real Prometheus (Debian's package, as a process) scraping a real ``roost gateway serve`` that
requires a metrics token (``ROOST_GATEWAY_METRICS_TOKEN``), with the files ``roost monitor`` rendered
from the same variable: the gateway target is up and its series arrive; rendered again without the
token, the same Prometheus is refused (401), so the token is what made the scrape work. The token is
in neither Prometheus's loaded configuration, its log, nor the gateway's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.gateway import GatewayProcess
from support.prometheus import PrometheusProcess, have_prometheus
from support.secret_scan import SecretScan

from roost.gateway.access import TOKEN_ENV
from roost.monitor import queries as q
from roost.monitor.prometheus import PrometheusAPI
from roost.monitor.state import MonitorState, save_state
from roost.monitor.sync import sync

pytestmark = pytest.mark.skipif(not have_prometheus(), reason="Debian's prometheus package (scripts/test installs it)")

TOKEN = "scrape-" + "5d1e8b20" * 5


def test_prometheus_scrapes_the_gateway_with_its_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOST_GATEWAY_BACKENDS_DIR", str(tmp_path / "backends"))
    monkeypatch.setenv("ROOST_MONITOR_STATE", str(tmp_path / "monitor.json"))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # for the gateway and for the render alike
    gw = GatewayProcess(f"sqlite:///{tmp_path / 'usage.db'}", [], log_path=tmp_path / "gateway.log", registry=True,
                        env={TOKEN_ENV: TOKEN, "ROOST_GATEWAY_BACKENDS_DIR": str(tmp_path / "backends")})
    prom: PrometheusProcess | None = None
    try:
        gw.start()
        address = f"127.0.0.1:{gw.port}"
        state = MonitorState(out=str(tmp_path / "files"), gateway=address, scrape_interval="1s",
                             evaluation_interval="1s", gateway_token=True)
        first = sync(state)
        assert first is not None and first.rendered.gateway_token
        prom = PrometheusProcess(tmp_path / "files" / "prometheus" / "prometheus.yml", tmp_path / "tsdb").start()
        state.prometheus_url = prom.url
        save_state(state)
        api = PrometheusAPI(prom.url)
        assert prom.wait("the gateway scraped with its token", lambda: prom.up(q.GATEWAY_JOB).get(address) == 1.0)
        pending = prom.wait("the gateway's series in Prometheus",
                            lambda: prom.query(f'roost_gateway_usage_pending_rows{{job="{q.GATEWAY_JOB}"}}'))
        assert pending[0]["metric"]["instance"] == address
        loaded = api.loaded_config()
        assert TOKEN not in json.dumps(loaded)
        (gateway_job,) = [j for j in loaded["scrape_configs"] if j["job_name"] == q.GATEWAY_JOB]
        assert gateway_job["authorization"]["credentials_file"].endswith("/prometheus/gateway-metrics-token")

        # rendered without the token (and reloaded): the same Prometheus is refused
        monkeypatch.delenv(TOKEN_ENV)
        state.gateway_token = False
        dropped = sync(state, force_reload=True)
        assert dropped is not None and dropped.method == "lifecycle-reload" and not dropped.rendered.gateway_token
        refused = prom.wait("the gateway's scrape refused without the token", lambda: [
            t for t in api.targets() if t.job == q.GATEWAY_JOB and t.health == "down" and "401" in t.last_error])
        assert refused[0].address == address
    finally:
        if prom is not None:
            prom.stop()
        gw.stop()
    scan = SecretScan({"metrics token": TOKEN})
    scan.text("gateway log", str(gw.log_path), gw.log())
    if prom is not None:
        scan.text("prometheus log", str(prom.log_path), prom.log_path.read_text(errors="replace"))
    scan.text("monitor state", "monitor.json", (tmp_path / "monitor.json").read_text())
    scan.text("prometheus.yml", "prometheus.yml", (tmp_path / "files" / "prometheus" / "prometheus.yml").read_text())
    assert not scan.hits, scan.report()
