"""The gateway's Prometheus metrics, each defined once (name, unit, meaning, labels).

Labels name a key by its *name* and kind (never the key, never a forwarded user's e-mail) and the
model as clients request it. ``status`` is one of :data:`STATUSES` or ``http_<code>`` (the backend's
own error status passed through).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

STATUSES = ("ok", "client_disconnected", "client_timeout", "backend_cut", "backend_unreachable")
"""How a forwarded request ended (besides ``http_<code>``)."""

ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1,
                 0.25, 1.0)


class GatewayMetrics:
    """One registry per gateway (tests run several in a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("roost_gateway_requests", "Requests forwarded, by how they ended.",
                                ["key", "kind", "model", "status"], registry=r)
        self.prompt_tokens = Counter("roost_gateway_prompt_tokens", "Prompt (input) tokens metered.",
                                     ["key", "kind", "model"], registry=r)
        self.completion_tokens = Counter("roost_gateway_completion_tokens",
                                         "Completion (output) tokens metered, counted as they stream.",
                                         ["key", "kind", "model"], registry=r)
        self.errors = Counter("roost_gateway_errors", "Forwarded requests that did not end ok, by reason.",
                              ["key", "kind", "model", "reason"], registry=r)
        self.refused = Counter("roost_gateway_refused", "Requests refused before forwarding, by reason "
                               "(unauthorized, too_large, slow_body, bad_request, unknown_model, backend_down).",
                               ["reason"], registry=r)
        self.added_latency = Histogram("roost_gateway_added_latency_seconds",
                                       "Time the gateway adds before a response's first byte: request received -> "
                                       "sent upstream, plus upstream first byte -> first byte to the client.",
                                       buckets=ADDED_BUCKETS, registry=r)
        self.in_flight = Gauge("roost_gateway_in_flight_requests", "Requests being forwarded now.", ["model"], registry=r)
        self.backend_up = Gauge("roost_gateway_backend_up", "1 when the backend answered its last /v1/models poll.",
                                ["backend"], registry=r)
        self.usage_write_errors = Counter("roost_gateway_usage_write_errors",
                                          "Failed attempts to commit usage rows (retried).", registry=r)
        self.usage_pending = Gauge("roost_gateway_usage_pending_rows", "Usage rows not yet committed.", registry=r)
        self.prompt_mismatch = Counter("roost_gateway_prompt_count_mismatch",
                                       "Requests whose /tokenize count differed from the backend's usage.",
                                       ["model"], registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
