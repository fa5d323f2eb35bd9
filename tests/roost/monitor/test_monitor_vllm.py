"""A real Prometheus (Debian's package, as a process) scraping the session's real vLLM CPU server and
a real gateway in front of it, with the files ``roost monitor render`` wrote:

- a server registered the way a landing registers it is scraped after ``sync`` reloads Prometheus
  through its lifecycle API (nobody restarts it), and dropped when deregistered;
- under a short run of traffic through the gateway, every dashboard panel's query returns data from
  that Prometheus (draft acceptance only where speculative decoding runs: here its series are absent,
  and the query is checked to be valid);
- the gateway-bypass alert stays quiet for traffic through the gateway, stays quiet for direct
  traffic while a roost benchmark has marked the server (the gateway exports the mark), and fires
  for direct traffic otherwise.

The bypass window is shortened to 10 s and its ``for`` to 3 s (scrape and rule evaluation every
second) so the alert's life fits in a test; the rule is the one rendered for production otherwise.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.cli import run_roost
from support.gateway import GatewayProcess, add_key
from support.prometheus import PrometheusProcess, have_prometheus

from roost.gateway import registry
from roost.monitor import queries as q
from roost.monitor.dashboard import dashboard, panel_queries
from roost.monitor.state import MonitorState, save_state
from roost.monitor.sync import sync

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not have_prometheus(), reason="Debian's prometheus package (scripts/test installs it)")]

WINDOW_S = 10


class Stack:
    def __init__(self, prom: PrometheusProcess, gw: GatewayProcess, state: MonitorState, keys: dict[str, str]) -> None:
        self.prom, self.gw, self.state, self.keys = prom, gw, state, keys


@pytest.fixture(scope="module")
def stack(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    where = tmp_path_factory.mktemp("monitor-vllm")
    saved = {k: os.environ.get(k) for k in ("ROOST_GATEWAY_BACKENDS_DIR", "ROOST_MONITOR_STATE")}
    os.environ["ROOST_GATEWAY_BACKENDS_DIR"] = str(where / "backends")
    os.environ["ROOST_MONITOR_STATE"] = str(where / "monitor.json")
    gw = GatewayProcess(f"sqlite:///{where / 'usage.db'}", [], log_path=where / "gateway.log", registry=True,
                        extra=["--poll-interval", "0.5"],
                        env={"VLLM_API_KEY": vllm_server.api_key, "ROOST_GATEWAY_BACKENDS_DIR": str(where / "backends")})
    prom: PrometheusProcess | None = None
    try:
        gw.start()
        state = MonitorState(out=str(where / "files"), gateway=f"127.0.0.1:{gw.port}", scrape_interval="1s",
                             evaluation_interval="1s",
                             rules={"bypass_window": f"{WINDOW_S}s", "bypass_for": "3s", "down_for": "5s"})
        first = sync(state)  # nothing kept yet: the files only
        assert first is not None and first.method == "none" and first.rendered.targets.vllm == []
        prom = PrometheusProcess(where / "files" / "prometheus" / "prometheus.yml", where / "tsdb").start()
        state.prometheus_url = prom.url
        save_state(state)
        keys = {"ana": add_key(gw.db_url, "ana", "user"), "laptop": add_key(gw.db_url, "laptop", "device")}
        yield Stack(prom, gw, state, keys)
    finally:
        if prom is not None:
            prom.stop()
        gw.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _through_gateway(stack: Stack, n: int) -> None:
    from openai import OpenAI

    def worker(key: str) -> None:
        client = OpenAI(base_url=f"{stack.gw.url}/v1", api_key=key, max_retries=0)
        for i in range(n):
            for _ in client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": f"say something {i}"}], max_tokens=12,
                    temperature=0, extra_body={"ignore_eos": True}, stream=True):
                pass

    threads = [threading.Thread(target=worker, args=(k,)) for k in stack.keys.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _direct(vllm_server: Any, n: int) -> None:
    with httpx.Client(base_url=vllm_server.base_url, headers={"Authorization": f"Bearer {vllm_server.api_key}"},
                      timeout=60) as c:
        for i in range(n):
            r = c.post("/v1/completions", json={"model": "tiny", "prompt": f"direct {i}", "max_tokens": 4})
            assert r.status_code == 200, r.text


def _bypass(stack: Stack) -> list[dict[str, Any]]:
    """The bypass alert when firing (pending is the rule's ``for`` at work: a request finished after
    the gateway's last scrape shows on vLLM's counter a scrape earlier)."""
    return [a for a in stack.prom.alerts().get("GatewayBypass", []) if a["state"] == "firing"]


def _scrapes_since(stack: Stack, since: float) -> int:
    """The fewest scrapes any target of the vLLM and gateway jobs has had that started after ``since`` (wall
    time: Prometheus stamps each scrape's ``up`` sample with its start, on this machine's clock)."""
    now = time.time()
    window_ms = int((now - since) * 1000)
    if window_ms <= 0:
        return 0
    counts = {job: [int(float(r["value"][1])) for r in stack.prom.query(f'count_over_time(up{{job="{job}"}}[{window_ms}ms])')]
              for job in (q.VLLM_JOB, q.GATEWAY_JOB)}
    return min((min(c) if c else 0) for c in counts.values())


def _evaluations(stack: Stack) -> float:
    """How many times Prometheus has evaluated its rule groups (its own ``/metrics``)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in httpx.get(f"{stack.prom.url}/metrics", timeout=10).text.splitlines()
               if line.startswith("prometheus_rule_group_iterations_total"))


def _quiet_for(stack: Stack, seconds: float) -> None:
    """The bypass alert never fires while ``seconds`` pass and, as many times at least (every second), both
    jobs are scraped and the rules evaluated: a loaded machine that delays them lengthens the watch instead
    of leaving the rule unevaluated."""
    since, evaluated = time.time(), _evaluations(stack)
    deadline = time.monotonic() + seconds
    hard = time.monotonic() + 4 * seconds + 60  # bounds a failure only
    while time.monotonic() < deadline or _evaluations(stack) - evaluated < seconds or _scrapes_since(stack, since) < seconds:
        if time.monotonic() > hard:
            raise AssertionError(f"Prometheus evaluated its rules {_evaluations(stack) - evaluated:.0f} times and "
                                 f"scraped {_scrapes_since(stack, since)} times in {4 * seconds + 60:.0f} s")
        fired = _bypass(stack)
        if fired:
            end = time.time()
            lag = f"{WINDOW_S + 2}s"
            sides = {"vllm": f"sum by (model_name) (increase({q.REQUEST_SUCCESS}[{WINDOW_S}s]))",
                     "gateway": f"sum by (model) (increase(roost_gateway_model_requests_total[{lag}]))",
                     "vllm_raw": f"sum({q.REQUEST_SUCCESS})", "gw_raw": "sum(roost_gateway_model_requests_total)"}
            seen = {k: [(round(float(t) - end, 1), round(float(v), 2)) for t, v in
                        (httpx.get(f"{stack.prom.url}/api/v1/query_range", params={
                            "query": e, "start": end - 25, "end": end, "step": 1}).json()["data"]["result"] or
                         [{"values": []}])[0]["values"]] for k, e in sides.items()}
            raise AssertionError(f"the bypass alert went off: {fired[0]['annotations']['description']}; {seen}")
        time.sleep(0.5)


def test_a_registered_server_is_scraped_after_sync_without_a_restart(stack: Stack, vllm_server: Any) -> None:
    registry.register(vllm_server.base_url, "tiny", "test-session", "run-monitor", 80.0, 4)
    result = sync()
    assert result is not None and result.method == "lifecycle-reload", result
    address = result.targets[0]
    assert result.targets == [address] and vllm_server.base_url.endswith(address)
    pid = stack.prom.proc.pid if stack.prom.proc else None
    up = stack.prom.wait("the vLLM target to be scraped", lambda: stack.prom.up(q.VLLM_JOB).get(address) == 1)
    assert up and stack.prom.proc is not None and stack.prom.proc.pid == pid and stack.prom.proc.poll() is None
    assert stack.prom.wait("the gateway to be scraped", lambda: stack.prom.up(q.GATEWAY_JOB))
    # the gateway lists the registered model's request counter at 0 before forwarding to it
    assert stack.prom.wait("the gateway's counter for the registered model",
                           lambda: stack.prom.query('roost_gateway_model_requests_total{model="tiny"} == 0'))
    again = sync()
    assert again is not None and again.method == "unchanged"


def test_every_dashboard_query_returns_data_under_traffic(stack: Stack, vllm_server: Any) -> None:
    _through_gateway(stack, 6)
    ended = time.time()
    # both jobs scraped twice since the last request ended (their counters final, and rates over them defined)
    stack.prom.wait("two scrapes of vLLM and the gateway after the traffic", lambda: _scrapes_since(stack, ended) >= 2)
    empty = []
    for title, expr in panel_queries(dashboard()):
        result = stack.prom.query(q.substitute(expr, rate_interval="1m"))  # status success: a valid query
        if not result:
            empty.append(title)
    assert empty == ["Draft acceptance"], empty  # the tiny server runs no speculative decoding:
    metrics = httpx.get(f"{vllm_server.base_url}/metrics", timeout=10).text
    assert "vllm:spec_decode_num_draft_tokens" not in metrics  # ... so its series do not exist
    keys = {r["metric"]["key"] for r in stack.prom.query(q.substitute(q.TOKENS_BY_KEY[1].expr, "1m"))}
    kinds = {r["metric"]["kind"] for r in stack.prom.query(q.substitute(q.TOKENS_BY_KIND[1].expr, "1m"))}
    assert keys == {"ana", "laptop"} and kinds == {"user", "device"}
    # the model variable lists the served model (new models appear without dashboard changes)
    names = {r["metric"]["model_name"] for r in stack.prom.query(q.RUNNING)}
    assert "tiny" in names


def test_bypass_alert_fires_for_direct_traffic_only(stack: Stack, vllm_server: Any, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # through the gateway: quiet while it runs and for a window after
    _through_gateway(stack, 5)
    _quiet_for(stack, WINDOW_S + 3)
    # a roost benchmark marks the server: direct traffic is expected and exempt
    with registry.direct_traffic(vllm_server.base_url):
        stack.prom.wait("the gateway's direct-traffic mark in Prometheus",
                        lambda: stack.prom.query('roost_gateway_direct_traffic_expected{model="tiny"} == 1'))
        _direct(vllm_server, 12)
        _quiet_for(stack, 4)
    stack.prom.wait("the mark to leave the bypass window",
                    lambda: not stack.prom.query(f'max_over_time(roost_gateway_direct_traffic_expected{{model="tiny"}}'
                                                 f'[{WINDOW_S}s]) > 0'), timeout_s=60)
    assert _bypass(stack) == []
    # anyone else calling vLLM directly
    _direct(vllm_server, 12)
    fired = stack.prom.wait("the bypass alert", lambda: _bypass(stack), timeout_s=30)
    assert fired[0]["labels"]["model_name"] == "tiny" and fired[0]["labels"]["severity"] == "warning"
    assert "bypasses the gateway" in fired[0]["annotations"]["summary"]
    # roost monitor status says what is scraped and what fires
    code, out, _ = run_roost(capsys, monkeypatch, "monitor", "status", "--json")
    doc = json.loads(out)
    jobs = {(t["job"], t["health"]) for t in doc["targets"]}
    assert code == 0 and (q.VLLM_JOB, "up") in jobs and (q.GATEWAY_JOB, "up") in jobs and doc["stale"] is False
    assert ("GatewayBypass", "firing") in {(a["name"], a["state"]) for a in doc["alerts"]}
    code, out, _ = run_roost(capsys, monkeypatch, "monitor", "status")
    assert code == 0 and "firing   GatewayBypass: Traffic to tiny bypasses the gateway" in out




def test_deregistration_drops_the_target(stack: Stack, vllm_server: Any) -> None:
    registry.deregister(vllm_server.base_url)
    result = sync()
    assert result is not None and result.method == "lifecycle-reload" and result.targets == []
    stack.prom.wait("the vLLM target to go", lambda: not stack.prom.up(q.VLLM_JOB))
