"""A real Prometheus (Debian's package, as a process) scraping the session's real vLLM CPU server and
a real gateway in front of it, with the files ``roost monitor render`` wrote:

- a server registered the way a landing registers it is scraped after ``sync`` reloads Prometheus
  through its lifecycle API (nobody restarts it), and dropped when deregistered;
- under a short run of traffic through the gateway, every dashboard panel's query returns data from
  that Prometheus (draft acceptance only where speculative decoding runs: here its series are absent,
  and the query is checked to be valid); the "Users and devices" panels answer for the user key, for
  each user a trusted app (Open WebUI's ``X-OpenWebUI-User-Email``) forwards and for the device key,
  with exactly the requests, completion tokens and first-byte observations sent;
- the gateway-bypass alert stays quiet for traffic through the gateway, stays quiet for direct
  traffic while a roost benchmark has marked the server (the gateway exports the mark), and fires
  for direct traffic otherwise;
- alerts delivered (a real Alertmanager, Debian's, with the rendered ``alertmanager.yml``, sending to
  the local Slack receiver's incoming webhook): the bypass alert's FIRING message arrives within two
  evaluation intervals of the rule firing and its RESOLVED message follows once the traffic has left
  the window; a stand-in vLLM (a Python process serving a fixed ``/metrics`` page) registered as a
  kept server and killed gets one VllmServerDown message, not one per evaluation, then a RESOLVED one
  once it is deregistered.

The bypass window is shortened to 10 s and its ``for`` to 3 s (scrape and rule evaluation every
second) so the alert's life fits in a test; the rule is the one rendered for production otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from support.alertmanager import AlertmanagerProcess, have_alertmanager
from support.cli import run_roost
from support.gateway import GatewayProcess, add_key
from support.prometheus import PrometheusProcess, have_prometheus
from support.slack import HOOK_SECRET
from support.slack_receiver import Recorded, SlackReceiver
from support.wait import http_ok, wait_started

from roost.gateway import metrics as gw_metrics
from roost.gateway import registry
from roost.monitor import queries as q
from roost.monitor.alerting import SlackSettings
from roost.monitor.dashboard import dashboard, panel_queries
from roost.monitor.render import render
from roost.monitor.state import MonitorState, save_state
from roost.monitor.sync import sync
from roost.net import free_port

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not have_prometheus(), reason="Debian's prometheus package (scripts/test installs it)")]

WINDOW_S = 10
FORWARDED = {"bea@example.org": 3, "carl@example.org": 2}
"""Users the trusted app forwards, and how many requests each sends."""
USER_SERIES = (gw_metrics.USER_REQUESTS_TOTAL, gw_metrics.USER_COMPLETION_TOKENS_TOTAL, f"{gw_metrics.USER_TTFT}_count")


class Stack:
    def __init__(self, prom: PrometheusProcess, gw: GatewayProcess, state: MonitorState, keys: dict[str, str],
                 app: str) -> None:
        self.prom, self.gw, self.state, self.keys, self.app = prom, gw, state, keys, app


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
        yield Stack(prom, gw, state, keys, add_key(gw.db_url, "open-webui", "app", trusted=True))
    finally:
        if prom is not None:
            prom.stop()
        gw.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _through_gateway(stack: Stack, n: int, forwarded: dict[str, int] | None = None) -> None:
    """``n`` streamed requests of 12 tokens per key, and the trusted app's for each ``forwarded`` user."""
    from openai import OpenAI

    def worker(key: str, count: int, headers: dict[str, str]) -> None:
        client = OpenAI(base_url=f"{stack.gw.url}/v1", api_key=key, max_retries=0, default_headers=headers)
        for i in range(count):
            for _ in client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": f"say something {i}"}], max_tokens=12,
                    temperature=0, extra_body={"ignore_eos": True}, stream=True):
                pass

    work: list[tuple[str, int, dict[str, str]]] = [(k, n, {}) for k in stack.keys.values()]
    work += [(stack.app, count, {"X-OpenWebUI-User-Email": email}) for email, count in (forwarded or {}).items()]
    threads = [threading.Thread(target=worker, args=w) for w in work]
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


def _per_user(samples: list[tuple[str, dict[str, str], float]]) -> dict[tuple[str, str, str], float]:
    """(series, user, kind) -> value, summed over models, of the per-user series :data:`USER_SERIES`."""
    out: dict[tuple[str, str, str], float] = {}
    for name, labels, value in samples:
        if name in USER_SERIES:
            key = (name, labels["user"], labels["kind"])
            out[key] = out.get(key, 0.0) + value
    return out


def _gateway_per_user(stack: Stack) -> dict[tuple[str, str, str], float]:
    return _per_user([(s.name, s.labels, s.value) for f in text_string_to_metric_families(stack.gw.metrics())
                      for s in f.samples])


def _prometheus_per_user(stack: Stack) -> dict[tuple[str, str, str], float]:
    return _per_user([(name, r["metric"], float(r["value"][1])) for name in USER_SERIES
                      for r in stack.prom.query(f'sum by (user, kind) ({name}{{job="{q.GATEWAY_JOB}"}})')])


def _users_and_devices(stack: Stack, before: dict[tuple[str, str, str], float], n: int) -> None:
    """The "Users and devices" panels: each person's and device's series, with what was sent."""
    people, devices = {"ana", *FORWARDED}, {"laptop"}
    for queries, who in ((q.USER_REQUESTS + q.USER_TOKENS + q.USER_TTFT, people),
                         (q.DEVICE_REQUESTS + q.DEVICE_TOKENS + q.DEVICE_TTFT, devices)):
        for query in queries:
            result = stack.prom.query(q.substitute(query.expr, rate_interval="5m"))
            assert {r["metric"]["user"] for r in result} == who, query.expr
            if "histogram_quantile" in query.expr:  # a time to first byte every user had
                assert all(0 < float(r["value"][1]) < 120 for r in result), (query.expr, result)
    sent = {("ana", "user"): n, ("laptop", "device"): n, **{(email, "app"): c for email, c in FORWARDED.items()}}
    after = _prometheus_per_user(stack)
    for (user, kind), count in sent.items():
        requests, tokens, firsts = ((after.get((name, user, kind), 0.0) - before.get((name, user, kind), 0.0))
                                    for name in USER_SERIES)
        assert (requests, tokens, firsts) == (count, 12 * count, count), (user, kind)
    assert {user for _, user, _ in after} == people | devices  # no key name for the forwarding app's requests


def test_every_dashboard_query_returns_data_under_traffic(stack: Stack, vllm_server: Any) -> None:
    # one request each first, scraped: a rate sees the traffic below from a series' first sample on
    _through_gateway(stack, 1, dict.fromkeys(FORWARDED, 1))
    warm = time.time()
    stack.prom.wait("two scrapes after the first requests", lambda: _scrapes_since(stack, warm) >= 2)
    before = _gateway_per_user(stack)
    _through_gateway(stack, 6, FORWARDED)
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
    assert keys == {"ana", "laptop", "open-webui"} and kinds == {"user", "device", "app"}
    _users_and_devices(stack, before, 6)
    # the model variable lists the served model (new models appear without dashboard changes)
    names = {r["metric"]["model_name"] for r in stack.prom.query(q.RUNNING)}
    assert "tiny" in names


def test_bypass_alert_fires_for_direct_traffic_only(stack: Stack, vllm_server: Any, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, alerts: Alerts) -> None:
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
    assert alerts.messages("GatewayBypass") == []  # nothing reached Slack for the traffic above
    traffic_started = time.time()
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
    _bypass_delivered(stack, alerts, traffic_started, capsys, monkeypatch)




def test_deregistration_drops_the_target(stack: Stack, vllm_server: Any) -> None:
    registry.deregister(vllm_server.base_url)
    result = sync()
    assert result is not None and result.method == "lifecycle-reload" and result.targets == []
    stack.prom.wait("the vLLM target to go", lambda: not stack.prom.up(q.VLLM_JOB))


# --- alerts delivered: Alertmanager -> the local Slack receiver ---------------------------------------------


class Alerts:
    """The module's Alertmanager and the Slack receiver it sends to (its incoming webhook)."""

    def __init__(self, am: AlertmanagerProcess, slack: SlackReceiver) -> None:
        self.am, self.slack = am, slack

    def messages(self, alert: str, status: str = "") -> list[tuple[float, str, str]]:
        """(wall time received, title, text) of each webhook message about ``alert`` (``FIRING``/``RESOLVED``)."""
        offset = time.time() - time.monotonic()
        out = []
        for r in self.slack.calls("webhook"):
            for a in _attachments(r):
                if alert in a.get("title", "") and status in a.get("title", ""):
                    out.append((r.at + offset, str(a["title"]), str(a.get("text", ""))))
        return out


def _attachments(r: Recorded) -> list[dict[str, Any]]:
    return list(r.json().get("attachments") or [])


@pytest.fixture(scope="module")
def alerts(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alerts]:
    """Alertmanager (a real one) beside the module's Prometheus, routing to the local Slack receiver's webhook:
    grouped and de-duplicated as rendered for production, with the waits cut to test scale."""
    if not have_alertmanager():
        pytest.skip("Debian's prometheus-alertmanager (scripts/test installs it)")
    slack = SlackReceiver(webhook_secret=HOOK_SECRET)
    port = free_port()
    state = stack.state
    state.alertmanager, state.alert_receiver = f"127.0.0.1:{port}", "slack-webhook"
    state.route = {"group_wait": "0s", "group_interval": "1s", "repeat_interval": "1h"}
    out = Path(state.out)
    am: AlertmanagerProcess | None = None
    try:
        render(out, dataclasses.replace(state.options(), slack=SlackSettings("slack-webhook",
                                                                             secret=SecretStr(slack.webhook_url))))
        am = AlertmanagerProcess(out / "alertmanager" / "alertmanager.yml",
                                 tmp_path_factory.mktemp("alertmanager") / "data", port).start()
        state.alertmanager_url = am.url
        save_state(state)
        synced = sync(state, force_reload=True)  # Prometheus now sends to it
        assert synced is not None and synced.method == "lifecycle-reload", synced
        loaded = stack.prom.wait("Prometheus to know the Alertmanager", lambda: httpx.get(
            f"{stack.prom.url}/api/v1/alertmanagers", timeout=10).json()["data"]["activeAlertmanagers"])
        assert loaded[0]["url"].startswith(am.url)
        yield Alerts(am, slack)
    finally:
        if am is not None:
            am.stop()
        slack.close()
    assert HOOK_SECRET not in (am.log() if am else "") + stack.prom.log_path.read_text(errors="replace")


def _seconds(stamp: str) -> float:
    """An RFC 3339 time from Alertmanager (nanoseconds, Z) as a Unix time."""
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", stamp)
    assert m, stamp
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return dt.datetime.fromisoformat(m.group(1) + zone).timestamp() + float(m.group(2) or 0)


def _bypass_delivered(stack: Stack, alerts: Alerts, traffic_started: float, capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The firing bypass alert reached Slack within two evaluation intervals of the rule firing (its
    ``startsAt`` is the evaluation that fired it); the resolved message follows when the traffic leaves the window."""
    (fired_msg,) = stack.prom.wait("the bypass alert in Slack", lambda: alerts.messages("GatewayBypass", "FIRING"),
                                   timeout_s=30)
    received, title, text = fired_msg
    assert title == "[FIRING:1] GatewayBypass on tiny", title
    assert "bypasses the gateway" in text and "more requests for tiny" in text and "*FIRING*" in text
    held = [a for a in alerts.am.alerts() if a["labels"]["alertname"] == "GatewayBypass"]
    assert held and held[0]["status"]["state"] == "active", held
    fired_at = _seconds(held[0]["startsAt"])
    evaluation = 1.0  # the stack's evaluation_interval
    with capsys.disabled():  # the measurement, in the test run's output
        print(f"\nbypass alert: direct traffic start -> Slack {received - traffic_started:.2f} s; rule fired -> "
              f"Slack {received - fired_at:.2f} s")
    assert 0 <= received - fired_at <= 2 * evaluation, (received - fired_at, held[0]["startsAt"])
    # roost monitor status shows what Alertmanager holds
    code, out, _ = run_roost(capsys, monkeypatch, "monitor", "status", "--json")
    doc = json.loads(out)["alertmanager"]
    assert code == 0 and doc["url"] == alerts.am.url and doc["error"] is None
    assert ("GatewayBypass", "active", "tiny") in {(a["name"], a["state"], a["labels"].get("model_name"))
                                                   for a in doc["alerts"]}
    # the traffic has stopped: once it leaves the window, one resolved message
    (resolved,) = stack.prom.wait("the bypass alert's resolved message", lambda: alerts.messages(
        "GatewayBypass", "RESOLVED"), timeout_s=WINDOW_S + 40)
    assert resolved[1].startswith("[RESOLVED] GatewayBypass on tiny") and "*RESOLVED*" in resolved[2]
    with capsys.disabled():
        print(f"\nbypass alert: direct traffic start -> RESOLVED in Slack {resolved[0] - traffic_started:.2f} s")
    assert len(alerts.messages("GatewayBypass", "FIRING")) == 1


STAND_IN = """
import http.server, sys
BODY = b'# TYPE vllm:num_requests_running gauge\\nvllm:num_requests_running{model_name="stand-in"} 0\\n'
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
"""A stand-in vLLM: a Python process serving a fixed ``/metrics`` page (a real one is not killed here: the
session's server is shared)."""


def test_a_killed_server_alerts_slack_once(stack: Stack, alerts: Alerts) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, str(port)], start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        wait_started("the stand-in vLLM", proc, http_ok(f"http://{address}/metrics"), log=Path(os.devnull),
                     timeout_s=30, every_s=0.1)
        registry.register(f"http://{address}", "stand-in", "test-session", "run-stand-in")  # as a landing keeps it
        result = sync()
        assert result is not None and address in result.targets, result
        stack.prom.wait("the stand-in to be scraped", lambda: stack.prom.up(q.VLLM_JOB).get(address) == 1)
        proc.kill()
        proc.wait()
        killed = time.time()
        (down,) = stack.prom.wait("the down alert in Slack", lambda: alerts.messages("VllmServerDown", "FIRING"),
                                  timeout_s=60)
        assert f"({address})" in down[1] and f"vLLM server {address} is down" in down[2], down
        print(f"VllmServerDown: kill -> Slack {down[0] - killed:.2f} s (down_for 5s)")
        # Prometheus keeps evaluating (and re-sending) the firing alert: Slack still has the one message
        evaluated = _evaluations(stack)
        stack.prom.wait("six more evaluations", lambda: _evaluations(stack) - evaluated >= 6, timeout_s=60)
        assert [m[1] for m in alerts.messages("VllmServerDown")] == [down[1]]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        registry.deregister(f"http://{address}")
    result = sync()
    assert result is not None and address not in result.targets
    (resolved,) = stack.prom.wait("the down alert's resolved message", lambda: alerts.messages(
        "VllmServerDown", "RESOLVED"), timeout_s=60)
    assert f"({address})" in resolved[1]
    assert len(alerts.messages("VllmServerDown", "FIRING")) == 1
