"""The rendered Prometheus files as Prometheus's own tool judges them: ``promtool check config`` and
``check rules``, and ``promtool test rules`` feeding series that make every alert fire and others
that keep it silent (Debian's ``prometheus`` package; ``scripts/test`` installs it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.prometheus import PROMTOOL, have_prometheus

from roost.monitor.render import RenderOptions, render
from roost.monitor.rules import ALERTS
from roost.monitor.targets import DecodeFloor, ScrapeTarget, Targets

pytestmark = pytest.mark.skipif(not have_prometheus(), reason="Debian's prometheus package (scripts/test installs it)")

VLLM = "127.0.0.1:8004"
FLOOR = DecodeFloor("tiny", 100.0, 8, "run-1")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("monitor")
    targets = Targets(vllm=[ScrapeTarget(VLLM, "tiny", "spark", "run-1")], gateway="127.0.0.1:8080", floors=[FLOOR])
    render(out, RenderOptions(), targets=targets)
    return out / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def test_promtool_accepts_the_rendered_config_and_rules(rendered: Path) -> None:
    config = _promtool("check", "config", str(rendered / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout
    rules = _promtool("check", "rules", str(rendered / "rules.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"{len(ALERTS)} rules found" in rules.stdout


def test_promtool_accepts_the_gateway_job_with_its_token_file(tmp_path: Path) -> None:
    """The token file is named relative to prometheus.yml: promtool (which checks that it exists)
    finds it from any working directory, as Prometheus in its container finds /etc/prometheus's."""
    from pydantic import SecretStr

    out = tmp_path / "monitor"
    targets = Targets(vllm=[ScrapeTarget(VLLM, "tiny", "spark", "run-1")], gateway="127.0.0.1:8080", floors=[FLOOR])
    render(out, RenderOptions(gateway_token=SecretStr("t" * 40)), targets=targets)
    config = out / "prometheus" / "prometheus.yml"
    checked = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=120,
                             cwd="/")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "t" * 40 not in config.read_text()
    (out / "prometheus" / "gateway-metrics-token").unlink()
    missing = _promtool("check", "config", str(config))
    assert missing.returncode != 0 and "gateway-metrics-token" in missing.stdout + missing.stderr


# --- promtool test rules -------------------------------------------------------------------------

def _rules(rendered: Path) -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((rendered / "rules.yml").read_text())
    return {r["alert"]: r for r in doc["groups"][0]["rules"]}


def _template(text: str, labels: dict[str, str], value: float) -> str:
    """The few Go template forms the rules' annotations use, rendered as Prometheus renders them."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)
    text = re.sub(r'\{\{ \$value \| printf "(%\.\df)" \}\}', lambda m: m.group(1) % value, text)
    return text.replace("{{ $value }}", f"{value:g}")


def _expect(rule: dict[str, Any], labels: dict[str, str], value: float) -> dict[str, Any]:
    all_labels = {**labels, **rule["labels"]}
    return {"exp_labels": all_labels,
            "exp_annotations": {k: _template(v, all_labels, value) for k, v in rule["annotations"].items()}}


def _counter(per_min: float, minutes: int) -> str:
    return f"0+{per_min:g}x{minutes}"


def test_every_alert_fires_on_its_series_and_stays_silent_otherwise(rendered: Path) -> None:
    r = _rules(rendered)
    v = {"job": "vllm", "instance": VLLM}
    g = {"job": "llm-gateway", "instance": "127.0.0.1:8080"}

    def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
        return {"series": name + "{" + ",".join(f'{k}="{val}"' for k, val in labels.items()) + "}", "values": values}

    success = {**v, "model_name": "tiny", "engine": "0", "finished_reason": "stop"}
    forwarded = {**g, "model": "tiny"}
    tpot = {**v, "model_name": "tiny", "engine": "0"}
    cases: list[dict[str, Any]] = [
        # down: a vLLM target and the gateway failing their scrapes; a missing gateway job counts as down
        {"input_series": [series("up", v, "1 1 0x5"), series("up", g, "1x7")],
         "alert_rule_test": [
             {"eval_time": "5m", "alertname": "VllmServerDown", "exp_alerts": [_expect(r["VllmServerDown"], v, 0)]},
             {"eval_time": "1m", "alertname": "VllmServerDown", "exp_alerts": []},
             {"eval_time": "5m", "alertname": "GatewayDown", "exp_alerts": []}]},
        {"input_series": [series("up", v, "1x7"), series("up", g, "1 0x6")],
         "alert_rule_test": [
             {"eval_time": "5m", "alertname": "GatewayDown", "exp_alerts": [_expect(r["GatewayDown"], g, 0)]},
             {"eval_time": "5m", "alertname": "VllmServerDown", "exp_alerts": []}]},
        {"input_series": [series("up", v, "1x7")],
         "alert_rule_test": [{"eval_time": "5m", "alertname": "GatewayDown",
                              "exp_alerts": [_expect(r["GatewayDown"], {"job": "llm-gateway"}, 1)]}]},
        # bypass: vLLM finishing as many requests as the gateway forwarded is quiet; 8/min more fires
        # (vLLM's 5 minutes against the gateway's 5 minutes 30 s: two 15 s scrapes of lag allowed; counted
        # exactly, the gateway's from its sample at 4 m, the last one before its window opens)
        {"input_series": [series("vllm:request_success_total", success, _counter(10, 15)),
                          series("roost_gateway_model_requests_total", forwarded, _counter(10, 15))],
         "alert_rule_test": [{"eval_time": "10m", "alertname": "GatewayBypass", "exp_alerts": []}]},
        {"input_series": [series("vllm:request_success_total", success, _counter(10, 15)),
                          series("roost_gateway_model_requests_total", forwarded, _counter(2, 15))],
         "alert_rule_test": [{"eval_time": "10m", "alertname": "GatewayBypass",
                              "exp_alerts": [_expect(r["GatewayBypass"], {"model_name": "tiny"}, 50 - 2 * 6)]}]},
        # ... a model the gateway never forwarded counts in full
        {"input_series": [series("vllm:request_success_total", success, _counter(10, 15)),
                          series("roost_gateway_model_requests_total", {**forwarded, "model": "other"}, _counter(10, 15))],
         "alert_rule_test": [{"eval_time": "10m", "alertname": "GatewayBypass",
                              "exp_alerts": [_expect(r["GatewayBypass"], {"model_name": "tiny"}, 50)]}]},
        # ... a burst of 400 forwarded after earlier direct traffic is quiet: counted exactly, not
        # extrapolated to the window's edges (``increase`` read vLLM's 400 as 500 and the gateway's,
        # born at 0, as 400: a false bypass of 100)
        # (scraped every 45 s, so windows open and close between samples as they do in production)
        {"interval": "45s",
         "input_series": [series("vllm:request_success_total", success, "100x7 500x14"),
                          series("roost_gateway_model_requests_total", forwarded, "0x7 400x14")],
         "alert_rule_test": [{"eval_time": f"{t}m", "alertname": "GatewayBypass", "exp_alerts": []}
                             for t in range(7, 13)]},
        # ... a restart of vLLM or of the gateway inside the window is counted across the reset (five
        # requests finished between the last scrape and the restart, five after it)
        {"input_series": [series("vllm:request_success_total", success, "0+10x5 5+10x9"),
                          series("roost_gateway_model_requests_total", forwarded, _counter(10, 15))],
         "alert_rule_test": [{"eval_time": t, "alertname": "GatewayBypass", "exp_alerts": []} for t in ("8m", "10m")]},
        {"input_series": [series("vllm:request_success_total", success, _counter(10, 15)),
                          series("roost_gateway_model_requests_total", forwarded, "0+10x5 5+10x9")],
         "alert_rule_test": [{"eval_time": t, "alertname": "GatewayBypass", "exp_alerts": []} for t in ("8m", "10m")]},
        # ... a server registered just now (both counters first scraped within the window, vLLM's at the
        # 92 requests it finished before) is counted from its first samples: quiet (``increase``
        # extrapolated vLLM's back to the window's start and not the gateway's, born at 0: a false
        # bypass of 5 to 10)
        {"input_series": [series("vllm:request_success_total", success, "_x5 92+10x10"),
                          series("roost_gateway_model_requests_total", forwarded, "_x5 0+10x10")],
         "alert_rule_test": [{"eval_time": f"{t}m", "alertname": "GatewayBypass", "exp_alerts": []}
                             for t in range(6, 12)]},
        # ... unless a roost benchmark is measuring that model's server directly (the gateway says so)
        {"input_series": [series("vllm:request_success_total", success, _counter(10, 15)),
                          series("roost_gateway_model_requests_total", forwarded, _counter(2, 15)),
                          series("roost_gateway_direct_traffic_expected", {**g, "model": "tiny"}, "0x3 1x12")],
         "alert_rule_test": [{"eval_time": "10m", "alertname": "GatewayBypass", "exp_alerts": []}]},
        # queueing: waiting > 0 for 5 minutes fires; a short queue does not
        {"input_series": [series("vllm:num_requests_waiting", {**v, "model_name": "tiny", "engine": "0"}, "0 3x8")],
         "alert_rule_test": [
             {"eval_time": "7m", "alertname": "SustainedQueueing",
              "exp_alerts": [_expect(r["SustainedQueueing"], {"instance": VLLM, "model_name": "tiny"}, 3)]},
             {"eval_time": "4m", "alertname": "SustainedQueueing", "exp_alerts": []}]},
        {"input_series": [series("vllm:num_requests_waiting", {**v, "model_name": "tiny", "engine": "0"},
                                 "0 3 3 3 0 3 3 3 0")],
         "alert_rule_test": [{"eval_time": "8m", "alertname": "SustainedQueueing", "exp_alerts": []}]},
        # KV cache: above 95% for 5 minutes
        {"input_series": [series("vllm:kv_cache_usage_perc", {**v, "model_name": "tiny", "engine": "0"}, "0.5 0.97x8")],
         "alert_rule_test": [
             {"eval_time": "7m", "alertname": "KvCacheNearFull",
              "exp_alerts": [_expect(r["KvCacheNearFull"], {"instance": VLLM, "model_name": "tiny"}, 0.97)]}]},
        {"input_series": [series("vllm:kv_cache_usage_perc", {**v, "model_name": "tiny", "engine": "0"}, "0.9x8")],
         "alert_rule_test": [{"eval_time": "7m", "alertname": "KvCacheNearFull", "exp_alerts": []}]},
        # decode: 1 request/s at a mean TPOT of 20 ms (50 tok/s, under 75% of the landing's 100) fires;
        # 10 ms (100 tok/s) does not
        {"input_series": [series("vllm:request_time_per_output_token_seconds_count", tpot, _counter(60, 30)),
                          series("vllm:request_time_per_output_token_seconds_sum", tpot, _counter(1.2, 30))],
         "alert_rule_test": [{"eval_time": "25m", "alertname": "DecodeSpeedDrop",
                              "exp_alerts": [_expect(r["DecodeSpeedDrop"], {"model_name": "tiny"}, 50)]}]},
        {"input_series": [series("vllm:request_time_per_output_token_seconds_count", tpot, _counter(60, 30)),
                          series("vllm:request_time_per_output_token_seconds_sum", tpot, _counter(0.6, 30))],
         "alert_rule_test": [{"eval_time": "25m", "alertname": "DecodeSpeedDrop", "exp_alerts": []}]},
    ]
    fired = {t["alertname"] for c in cases for t in c["alert_rule_test"] if t["exp_alerts"]}
    assert fired == set(ALERTS)  # every alert is made to fire at least once
    for c in cases:
        c.setdefault("interval", "1m")
    test_file = rendered / "rules_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": cases}))
    proc = _promtool("test", "rules", str(test_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_decode_rule_names_the_landing_and_its_floor(rendered: Path) -> None:
    rule = _rules(rendered)["DecodeSpeedDrop"]
    assert rule["labels"]["landing_run_id"] == "run-1"
    assert "< 75" in rule["expr"] and 'model_name="tiny"' in rule["expr"]
