"""Every PromQL expression roost's dashboard and alert rules read, defined once.

Series names come from where they are exposed: vLLM's in :mod:`roost.vllm.server_metrics`, the
gateway's in :mod:`roost.gateway.metrics`. vLLM labels its series ``model_name`` (the served model
name); the gateway labels them ``model`` (the name clients ask for, the same string), so gateway
series are relabelled to ``model_name`` where the two are compared.

Dashboard queries use Grafana's ``$model_name`` variable and ``$__rate_interval``;
:func:`substitute` replaces both for a query sent straight to Prometheus's HTTP API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roost.gateway import metrics as gw
from roost.vllm import server_metrics as vp

VLLM_JOB = "vllm"
GATEWAY_JOB = "llm-gateway"

GENERATION_TOKENS = vp.COUNTERS["generation_tokens"][0]
PROMPT_TOKENS = vp.COUNTERS["prompt_tokens"][0]
REQUEST_SUCCESS = vp.COUNTERS["request_success"][0]
RUNNING = vp.GAUGES["num_requests_running"][0]
WAITING = vp.GAUGES["num_requests_waiting"][0]
KV_USAGE = vp.GAUGES["kv_cache_usage_perc"][0]

MODEL = 'model_name=~"$model_name"'
"""The dashboard's model filter (all models by default: a new model appears without changes)."""

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Query:
    """One time series query on a panel: its PromQL and the legend Grafana draws for it."""

    expr: str
    legend: str


def _quantile(q: float, histogram: str) -> Query:
    return Query(f"histogram_quantile({q}, sum by (le, model_name) "
                 f"(rate({histogram}_bucket{{{MODEL}}}[$__rate_interval])))", f"p{round(q * 100)} {{{{model_name}}}}")


def counted(selector: str, window: str) -> str:
    """What a counter counted over ``window``, per series, exactly: the difference of its samples
    where it did not reset (``increase`` extrapolates its samples to the window's edges, inflating a
    burst by about one scrape interval over the window: 22 requests read as 24.4 over 10 s at 1 s
    scrapes) -- from its last sample before the window, or, for a series first scraped within the
    window (a server just registered), from its first sample in it; ``increase`` where it reset."""
    since_before = f"({selector}) - ({selector} offset {window})"
    since_first = f"({selector}) - min_over_time({selector}[{window}])"
    return (f"((({since_before}) or ({since_first})) unless (resets({selector}[{window}]) > 0)) "
            f"or increase({selector}[{window}])")


def _gateway_by_model(series: str, window: str) -> str:
    """A gateway counter's count per model over ``window`` (:func:`counted`), relabelled ``model`` ->
    ``model_name``."""
    per_series = counted(f'{series}{{job="{GATEWAY_JOB}"}}', window)
    return f'sum by (model_name) (label_replace({per_series}, "model_name", "$1", "model", "(.*)"))'


# ------------------------------------------------------------------------------------- the dashboard

THROUGHPUT = (
    Query(f"sum by (model_name) (rate({GENERATION_TOKENS}{{{MODEL}}}[$__rate_interval]))", "output {{model_name}}"),
    Query(f"sum by (model_name) (rate({PROMPT_TOKENS}{{{MODEL}}}[$__rate_interval]))", "prompt {{model_name}}"),
)
TTFT = tuple(_quantile(q, vp.TTFT_HISTOGRAM) for q in QUANTILES)
ITL = tuple(_quantile(q, vp.ITL_HISTOGRAM) for q in QUANTILES)
REQUESTS = (
    Query(f"sum by (model_name) ({RUNNING}{{{MODEL}}})", "running {{model_name}}"),
    Query(f"sum by (model_name) ({WAITING}{{{MODEL}}})", "waiting {{model_name}}"),
)
KV_CACHE = (Query(f"max by (model_name) ({KV_USAGE}{{{MODEL}}})", "{{model_name}}"),)
DRAFT_ACCEPTANCE = (
    Query(f"sum by (model_name) (rate({vp.SPEC_ACCEPTED}{{{MODEL}}}[$__rate_interval])) / "
          f"sum by (model_name) (rate({vp.SPEC_DRAFT_TOKENS}{{{MODEL}}}[$__rate_interval]))", "{{model_name}}"),
)
TOKENS_BY_KEY = (
    Query(f"sum by (key) (rate({gw.PROMPT_TOKENS_TOTAL}[$__rate_interval]))", "prompt {{key}}"),
    Query(f"sum by (key) (rate({gw.COMPLETION_TOKENS_TOTAL}[$__rate_interval]))", "completion {{key}}"),
)
TOKENS_BY_KIND = (
    Query(f"sum by (kind) (rate({gw.PROMPT_TOKENS_TOTAL}[$__rate_interval]))", "prompt {{kind}}"),
    Query(f"sum by (kind) (rate({gw.COMPLETION_TOKENS_TOTAL}[$__rate_interval]))", "completion {{kind}}"),
)
GATEWAY_REQUESTS = (Query(f"sum by (status) (rate({gw.REQUESTS_TOTAL}[$__rate_interval]))", "{{status}}"),)
GATEWAY_ADDED = tuple(
    Query(f"histogram_quantile({q}, sum by (le) (rate({gw.ADDED_LATENCY}_bucket[$__rate_interval])))",
          f"p{round(q * 100)}") for q in (0.5, 0.99))
USERS = 'kind!="device"'
"""People: ``user`` keys and the users trusted front ends forward (an app forwarding nobody by its name)."""
DEVICES = 'kind="device"'
"""Tailnet devices (``device`` keys, ``roost gateway key sync-tailscale``)."""


def _who(selector: str) -> tuple[tuple[Query, ...], tuple[Query, ...], tuple[Query, ...]]:
    """Requests, tokens and the gateway's time to first byte (p50/p90) per ``user`` label, for the
    series ``selector`` picks (:data:`USERS` or :data:`DEVICES`)."""
    requests = (Query(f"sum by (user) (rate({gw.USER_REQUESTS_TOTAL}{{{selector}}}[$__rate_interval]))",
                      "{{user}}"),)
    tokens = (
        Query(f"sum by (user) (rate({gw.USER_PROMPT_TOKENS_TOTAL}{{{selector}}}[$__rate_interval]))",
              "prompt {{user}}"),
        Query(f"sum by (user) (rate({gw.USER_COMPLETION_TOKENS_TOTAL}{{{selector}}}[$__rate_interval]))",
              "completion {{user}}"),
    )
    ttft = tuple(Query(f"histogram_quantile({q}, sum by (le, user) "
                       f"(rate({gw.USER_TTFT}_bucket{{{selector}}}[$__rate_interval])))", f"p{round(q * 100)} {{{{user}}}}")
                 for q in (0.5, 0.9))
    return requests, tokens, ttft


USER_REQUESTS, USER_TOKENS, USER_TTFT = _who(USERS)
DEVICE_REQUESTS, DEVICE_TOKENS, DEVICE_TTFT = _who(DEVICES)
DIRECT_VS_GATEWAY = (
    Query(f"sum by (model_name) (rate({REQUEST_SUCCESS}{{{MODEL}}}[$__rate_interval]))", "vLLM finished {{model_name}}"),
    Query(f'sum by (model_name) (label_replace(rate({gw.MODEL_REQUESTS_TOTAL}[$__rate_interval]), '
          f'"model_name", "$1", "model", "(.*)"))', "via gateway {{model_name}}"),
)

MODEL_VARIABLE_QUERY = f"label_values({RUNNING}, model_name)"


def substitute(expr: str, rate_interval: str = "1m", model_name: str = ".*") -> str:
    """``expr`` as Prometheus runs it outside Grafana (Grafana's variables replaced)."""
    return expr.replace("$__rate_interval", rate_interval).replace("$model_name", model_name)


# ------------------------------------------------------------------------------------------- alerts

def vllm_down() -> str:
    return f'up{{job="{VLLM_JOB}"}} == 0'


def gateway_down() -> str:
    return f'up{{job="{GATEWAY_JOB}"}} == 0 or absent(up{{job="{GATEWAY_JOB}"}})'


def seconds(duration: str) -> float:
    """A Prometheus duration (``1h30m``, ``15s``, ``500ms``) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(int(n) * units[u] for n, u in parts)


def gateway_bypass(window: str, slack: float, lag: str) -> str:
    """Requests vLLM finished over ``window`` beyond what the gateway forwarded for that model, by more
    than ``slack``; a model the gateway never forwarded counts in full.

    Every ending counts on both sides (aborts too), exactly (:func:`counted`: ``increase``'s
    extrapolation made a burst forwarded through the gateway read as a bypass, vLLM's shorter window
    being inflated more). The gateway's per-model counter exists at 0 before a model's first request,
    so none is missed. The two counters are scraped at different
    moments, up to a scrape interval apart, so the gateway's window reaches ``lag`` (two scrape
    intervals) further back than vLLM's: a request both saw is never counted by vLLM alone. (A
    request finishing after the gateway's last scrape shows on vLLM first; the rule's ``for`` outlasts
    that.) Models a roost benchmark is measuring directly (``roost_gateway_direct_traffic_expected``,
    exported by the gateway from the landing registry) are exempt for the window."""
    vllm = "sum by (model_name) (" + counted(f'{REQUEST_SUCCESS}{{job="{VLLM_JOB}"}}', window) + ")"
    via = _gateway_by_model(gw.MODEL_REQUESTS_TOTAL, f"{seconds(window) + seconds(lag):g}s")
    exempt = (f'sum by (model_name) (label_replace(max_over_time({gw.DIRECT_EXPECTED}[{window}]), '
              f'"model_name", "$1", "model", "(.*)")) > 0')
    return (f"((({vllm}) - ({via})) > {slack:g} or (({vllm}) unless on (model_name) ({via})) > {slack:g}) "
            f"unless on (model_name) ({exempt})")


def queueing() -> str:
    return f'sum by (instance, model_name) ({WAITING}{{job="{VLLM_JOB}"}}) > 0'


def kv_cache_full(threshold: float) -> str:
    return f'max by (instance, model_name) ({KV_USAGE}{{job="{VLLM_JOB}"}}) > {threshold:g}'


def decode_rate(model_name: str, window: str) -> str:
    """Live per-request decode rate (tok/s): 1 / vLLM's mean time per output token over ``window``."""
    sel = f'{{job="{VLLM_JOB}", model_name="{model_name}"}}'
    return (f"sum by (model_name) (rate({vp.TPOT_HISTOGRAM}_count{sel}[{window}])) / "
            f"sum by (model_name) (rate({vp.TPOT_HISTOGRAM}_sum{sel}[{window}]))")


def decode_drop(model_name: str, window: str, floor_tok_s: float) -> str:
    return f"({decode_rate(model_name, window)}) < {floor_tok_s:.6g}"
