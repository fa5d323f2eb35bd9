"""The gateway's Prometheus metrics, each defined once (name, unit, meaning, labels).

Labels name a key by its *name* and kind (never the key, never a forwarded user's e-mail) and the
model as clients request it. ``status`` is one of :data:`STATUSES` or ``http_<code>`` (the backend's
own error status passed through).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

STATUSES = ("ok", "client_disconnected", "client_timeout", "backend_cut", "backend_unreachable", "gateway_error")
"""How a forwarded request ended (besides ``http_<code>``)."""

# Metric names (prometheus_client adds ``_total`` to counters on exposition; the ``*_TOTAL`` names are
# the series Prometheus stores, which roost.monitor's queries and rules read).
REQUESTS = "roost_gateway_requests"
PROMPT_TOKENS = "roost_gateway_prompt_tokens"
COMPLETION_TOKENS = "roost_gateway_completion_tokens"
ADDED_LATENCY = "roost_gateway_added_latency_seconds"
IN_FLIGHT = "roost_gateway_in_flight_requests"
BACKEND_UP = "roost_gateway_backend_up"
DIRECT_EXPECTED = "roost_gateway_direct_traffic_expected"
MODEL_REQUESTS = "roost_gateway_model_requests"
REQUESTS_TOTAL = REQUESTS + "_total"
MODEL_REQUESTS_TOTAL = MODEL_REQUESTS + "_total"
PROMPT_TOKENS_TOTAL = PROMPT_TOKENS + "_total"
COMPLETION_TOKENS_TOTAL = COMPLETION_TOKENS + "_total"

ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1,
                 0.25, 1.0)


class GatewayMetrics:
    """One registry per gateway (tests run several in a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(REQUESTS, "Requests forwarded, by how they ended.",
                                ["key", "kind", "model", "status"], registry=r)
        self.model_requests = Counter(MODEL_REQUESTS, "Requests forwarded per model, however they ended; created at "
                                      "0 when a backend first lists the model, so a rate sees the first request "
                                      "(the bypass alert compares it with vLLM's finished requests).",
                                      ["model"], registry=r)
        self.prompt_tokens = Counter(PROMPT_TOKENS, "Prompt (input) tokens metered.",
                                     ["key", "kind", "model"], registry=r)
        self.completion_tokens = Counter(COMPLETION_TOKENS,
                                         "Completion (output) tokens metered, counted as they stream.",
                                         ["key", "kind", "model"], registry=r)
        self.errors = Counter("roost_gateway_errors", "Forwarded requests that did not end ok, by reason.",
                              ["key", "kind", "model", "reason"], registry=r)
        self.refused = Counter("roost_gateway_refused", "Requests refused before forwarding, by reason "
                               "(unauthorized, too_large, slow_body, bad_request, unknown_model, backend_down; before a request "
                               "is read: headers_too_large, request_timeout, too_many_connections).",
                               ["reason"], registry=r)
        self.added_latency = Histogram(ADDED_LATENCY,
                                       "Time the gateway adds before a response's first byte: request received -> "
                                       "sent upstream, plus upstream first byte -> first byte to the client.",
                                       buckets=ADDED_BUCKETS, registry=r)
        self.in_flight = Gauge(IN_FLIGHT, "Requests being forwarded now.", ["model"], registry=r)
        self.backend_up = Gauge(BACKEND_UP, "1 when the backend answered its last /v1/models poll.",
                                ["backend"], registry=r)
        self.direct_expected = Gauge(DIRECT_EXPECTED, "1 while a roost benchmark measures this model's server "
                                     "directly (the landing registry says so): vLLM traffic the gateway did not "
                                     "forward is expected, not a bypass.", ["model"], registry=r)
        self.usage_write_errors = Counter("roost_gateway_usage_write_errors",
                                          "Failed attempts to commit usage rows (retried).", registry=r)
        self.usage_pending = Gauge("roost_gateway_usage_pending_rows", "Usage rows not yet committed.", registry=r)
        self.prompt_mismatch = Counter("roost_gateway_prompt_count_mismatch",
                                       "Requests whose /tokenize count differed from the backend's usage.",
                                       ["model"], registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
