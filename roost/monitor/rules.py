"""The alert rules roost renders for Prometheus (``rules.yml``): one function per alert, thresholds in
:class:`RuleSettings`, expressions from :mod:`roost.monitor.queries`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roost.monitor import queries as q
from roost.monitor.targets import DecodeFloor

GROUP = "roost"


@dataclass(frozen=True)
class RuleSettings:
    """Windows are Prometheus durations. ``decode_drop`` is the fraction below the landing's decode
    rate that alerts (0.25: live decode under 75% of what the landing measured)."""

    down_for: str = "1m"
    bypass_window: str = "5m"
    bypass_slack: float = 2.0
    bypass_for: str = "1m"  # outlasts a scrape interval of one counter seeing a request before the other
    queue_for: str = "5m"
    kv_threshold: float = 0.95
    kv_for: str = "5m"
    decode_window: str = "10m"
    decode_drop: float = 0.25
    decode_for: str = "10m"


ALERTS = ("VllmServerDown", "GatewayDown", "GatewayBypass", "SustainedQueueing", "KvCacheNearFull", "DecodeSpeedDrop")


def _rule(name: str, expr: str, for_: str, severity: str, summary: str, description: str,
          labels: dict[str, str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ not in ("", "0s", "0"):
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {})}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def rules(settings: RuleSettings, floors: list[DecodeFloor], scrape_interval: str = "15s") -> dict[str, Any]:
    """The rule file as a document (``yaml.safe_dump`` writes it). ``scrape_interval`` sets how far the
    bypass rule lets the gateway's count lag vLLM's (two intervals)."""
    s = settings
    lag = f"{2 * q.seconds(scrape_interval):g}s"
    out = [
        _rule("VllmServerDown", q.vllm_down(), s.down_for, "critical", "vLLM server {{ $labels.instance }} is down",
              "Prometheus cannot scrape the vLLM server at {{ $labels.instance }} ({{ $labels.model_name }})."),
        _rule("GatewayDown", q.gateway_down(), s.down_for, "critical", "The metering gateway is down",
              "Prometheus cannot scrape the gateway: clients get no answers and nothing is metered."),
        _rule("GatewayBypass", q.gateway_bypass(s.bypass_window, s.bypass_slack, lag), s.bypass_for, "warning",
              "Traffic to {{ $labels.model_name }} bypasses the gateway",
              f"vLLM finished {{{{ $value | printf \"%.0f\" }}}} more requests for {{{{ $labels.model_name }}}} "
              f"in {s.bypass_window} than the gateway forwarded: someone calls vLLM directly (unmetered)."),
        _rule("SustainedQueueing", q.queueing(), s.queue_for, "warning",
              "Requests queue on {{ $labels.model_name }}",
              f"{{{{ $value }}}} requests have been waiting for a running slot on {{{{ $labels.instance }}}} for "
              f"{s.queue_for}: demand exceeds --max-num-seqs or the KV cache."),
        _rule("KvCacheNearFull", q.kv_cache_full(s.kv_threshold), s.kv_for, "warning",
              "KV cache nearly full on {{ $labels.model_name }}",
              f"KV cache usage on {{{{ $labels.instance }}}} has stayed above {s.kv_threshold:.0%} for {s.kv_for}: "
              "requests will be preempted or queue."),
    ]
    for f in floors:
        floor = f.tok_s * (1.0 - s.decode_drop)
        out.append(_rule(
            "DecodeSpeedDrop", q.decode_drop(f.model_name, s.decode_window, floor), s.decode_for, "warning",
            f"Decode speed dropped on {f.model_name}",
            f"Live decode {{{{ $value | printf \"%.1f\" }}}} tok/s per request over {s.decode_window}, under "
            f"{1 - s.decode_drop:.0%} of the {f.tok_s:.1f} tok/s roost's landing {f.run_id} measured at "
            f"concurrency {f.concurrency}.",
            labels={"model_name": f.model_name, "landing_run_id": f.run_id}))
    return {"groups": [{"name": GROUP, "rules": out}]}
