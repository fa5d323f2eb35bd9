"""The gateway's Prometheus metrics, each defined once (name, unit, meaning, labels).

Labels name a key by its *name* and kind (never the key itself) and the model as clients request it.
``status`` is one of :data:`STATUSES` or ``http_<code>`` (the backend's own error status passed through).

The per-user series (``roost_gateway_user_*``, the dashboard's "Users and devices" row) add a ``user``
label: the user a trusted front end forwards (Open WebUI's ``X-OpenWebUI-User-Email``), else the key's
name (a ``user`` key's person, a ``device`` key's tailnet device, an ``app`` that forwards nobody). A
forwarded user's e-mail therefore *does* appear in these labels, by choice and bounded
(:class:`UserLabels`): only the first ``metrics_users`` distinct forwarded users a gateway process sees
get a value of their own (default :data:`DEFAULT_METRICS_USERS`), every later one is counted under
:data:`OTHER`, and ``metrics_users`` 0 folds them all there (no e-mail in the metrics at all). Values
are sanitized (printable characters only, at most :data:`MAX_USER_LABEL`). The series keyed by ``key``
never carry a forwarded user. E-mails are not hashed instead: an unsalted hash of an address is
reversed by hashing the address book.
"""

from __future__ import annotations

import hashlib
from typing import TypeVar

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
USER_REQUESTS = "roost_gateway_user_requests"
USER_PROMPT_TOKENS = "roost_gateway_user_prompt_tokens"
USER_COMPLETION_TOKENS = "roost_gateway_user_completion_tokens"
USER_TTFT = "roost_gateway_user_ttft_seconds"
USER_LABELS = "roost_gateway_user_labels"
USER_REQUESTS_TOTAL = USER_REQUESTS + "_total"
USER_PROMPT_TOKENS_TOTAL = USER_PROMPT_TOKENS + "_total"
USER_COMPLETION_TOKENS_TOTAL = USER_COMPLETION_TOKENS + "_total"

ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1,
                 0.25, 1.0)
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)

DEFAULT_METRICS_USERS = 50
"""Distinct forwarded users labelled by name per gateway process (``--metrics-users``)."""
OTHER = "other"
"""The ``user`` label of every forwarded user past the limit."""
MAX_USER_LABEL = 64
"""Characters of a ``user`` label value; a longer one keeps its start and a digest of the whole."""


def sanitized(value: str) -> str:
    """``value`` as a label: printable characters only (no control, format or separator characters:
    no terminal escapes, bidi overrides or line breaks), at most :data:`MAX_USER_LABEL` characters; a
    longer value keeps its start and 12 hex digits of its SHA-256, so two long values stay apart."""
    text = "".join(ch for ch in value if ch.isprintable()).strip()
    if len(text) <= MAX_USER_LABEL:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[:MAX_USER_LABEL - 13]}~{digest}"


class UserLabels:
    """The ``user`` label of a request: its forwarded user among the first ``limit`` distinct ones
    this process saw (:data:`OTHER` after them, or always with ``limit`` 0), else its key's name."""

    def __init__(self, limit: int = DEFAULT_METRICS_USERS) -> None:
        if limit < 0:
            raise ValueError(f"metrics_users must be >= 0, not {limit}")
        self.limit = limit
        self.named: set[str] = set()

    def label(self, key_name: str, forwarded: str | None) -> str:
        if forwarded is None:
            return key_name  # a key name is the operator's, checked when the key was made
        value = sanitized(forwarded)
        if not value:
            return OTHER
        if value in self.named:
            return value
        if len(self.named) < self.limit:
            self.named.add(value)
            return value
        return OTHER


M = TypeVar("M", Counter, Gauge, Histogram)


class GatewayMetrics:
    """One registry per gateway (tests run several in a process)."""

    def __init__(self, metrics_users: int = DEFAULT_METRICS_USERS) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.users = UserLabels(metrics_users)
        self.requests = Counter(REQUESTS, "Requests forwarded, by how they ended.",
                                ["key", "kind", "model", "status"], registry=r)
        self.model_requests = Counter(MODEL_REQUESTS, "Requests forwarded per model, however they ended; created at "
                                      "0 when a backend first lists the model, so a rate sees the first request "
                                      "(the bypass alert compares it with vLLM's finished requests).",
                                      ["model"], registry=r)
        self.prompt_tokens = Counter(PROMPT_TOKENS, "Prompt (input) tokens metered.",
                                     ["key", "kind", "model"], registry=r)
        self.completion_tokens = Counter(COMPLETION_TOKENS,
                                         "Completion (output) tokens metered, counted as they stream (every 16 tokens and at the end).",
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

        who = ["user", "kind", "model"]
        self.user_requests = Counter(USER_REQUESTS, "Requests forwarded per user (a trusted front end's "
                                     "forwarded user, else the key's name), however they ended.", who, registry=r)
        self.user_prompt_tokens = Counter(USER_PROMPT_TOKENS, "Prompt (input) tokens metered per user.", who,
                                          registry=r)
        self.user_completion_tokens = Counter(USER_COMPLETION_TOKENS, "Completion (output) tokens metered per "
                                              "user, counted as they stream (every 16 tokens and at the end).", who, registry=r)
        self.user_ttft = Histogram(USER_TTFT, "Time to first byte per user, at the gateway: request received -> "
                                   "first byte of a 200 answer to the client (a stream's first chunk, a whole "
                                   "answer when it is sent).", who, buckets=TTFT_BUCKETS, registry=r)
        self.user_labels = Gauge(USER_LABELS, "Distinct forwarded users given a user label of their own (at most "
                                 "metrics_users; later ones are counted as other).", registry=r)
        self.user_labels.set_function(lambda: len(self.users.named))
        self._children: dict[tuple[int, tuple[str, ...]], Counter | Gauge | Histogram] = {}

    def child(self, metric: M, *labels: str) -> M:
        """``metric.labels(*labels)``, looked up once per label set (the hot path asks for the same few
        children on every request; no child is ever removed)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found  # type: ignore[return-value]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
