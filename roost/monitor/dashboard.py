"""The "vLLM Command Center" Grafana dashboard, built with Grafana's own typed builders
(``grafana-foundation-sdk``, generated from Grafana's dashboard schema) rather than hand-written JSON.

Every panel reads queries from :mod:`roost.monitor.queries`. Panels are keyed on vLLM's
``model_name`` label through the ``model_name`` variable (all models by default), so a newly landed
model appears with no dashboard change; the gateway panels are per key and per key kind (user,
device, app), and the "Users and devices" row per person (a ``user`` key, or a user a trusted front end
such as Open WebUI forwards: the gateway labels the first ``--metrics-users`` of them by name, later ones
``other``) and per tailnet device (``device`` keys), from the gateway's ``roost_gateway_user_*`` series.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries as gt
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from roost.monitor import queries as q

UID = "roost-vllm-command-center"
TITLE = "vLLM Command Center"
DATASOURCE_UID = "roost-prometheus"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[q.Query, ...]
    description: str
    row: str


PANELS: tuple[Panel, ...] = (
    Panel("Throughput", "tok/s", q.THROUGHPUT, "Output and prompt tokens per second, per model.", "Serving"),
    Panel("Time to first token", "s", q.TTFT, "p50/p90/p99 from vLLM's TTFT histogram.", "Serving"),
    Panel("Inter-token latency", "s", q.ITL, "p50/p90/p99 from vLLM's inter-token latency histogram.", "Serving"),
    Panel("Running and waiting requests", "short", q.REQUESTS,
          "Requests decoding now and requests queued for a slot (past --max-num-seqs or the KV cache).", "Serving"),
    Panel("KV cache usage", "percentunit", q.KV_CACHE, "Fraction of the KV cache blocks in use.", "Serving"),
    Panel("Draft acceptance", "percentunit", q.DRAFT_ACCEPTANCE,
          "Accepted / proposed draft tokens (speculative decoding, e.g. MTP); empty when it is off.", "Serving"),
    Panel("Tokens per key", "tok/s", q.TOKENS_BY_KEY, "Prompt and completion tokens metered per gateway key.",
          "Gateway"),
    Panel("Tokens per kind", "tok/s", q.TOKENS_BY_KIND, "Prompt and completion tokens per key kind (user, device, app).",
          "Gateway"),
    Panel("Gateway requests by outcome", "reqps", q.GATEWAY_REQUESTS, "Forwarded requests per second by how they "
          "ended (ok, client_disconnected, backend_cut, http_<code>, ...).", "Gateway"),
    Panel("Gateway added latency", "s", q.GATEWAY_ADDED, "Time the gateway adds before a response's first byte.",
          "Gateway"),
    Panel("vLLM requests vs gateway requests", "reqps", q.DIRECT_VS_GATEWAY,
          "Requests vLLM finished against requests the gateway forwarded: a gap is traffic bypassing the gateway.",
          "Gateway"),
    Panel("Requests per user", "reqps", q.USER_REQUESTS, "Requests per second per person: a user key, or a user "
          "a trusted front end (Open WebUI) forwards (past the gateway's --metrics-users: other).",
          "Users and devices"),
    Panel("Tokens per user", "tok/s", q.USER_TOKENS, "Prompt and completion tokens per person.", "Users and devices"),
    Panel("Time to first token per user", "s", q.USER_TTFT, "p50/p90 of the time from the gateway receiving a "
          "request to the first byte of its answer leaving, per person.", "Users and devices"),
    Panel("Requests per device", "reqps", q.DEVICE_REQUESTS, "Requests per second per tailnet device (device keys).",
          "Users and devices"),
    Panel("Tokens per device", "tok/s", q.DEVICE_TOKENS, "Prompt and completion tokens per tailnet device.",
          "Users and devices"),
    Panel("Time to first token per device", "s", q.DEVICE_TTFT, "p50/p90 of the time from the gateway receiving "
          "a request to the first byte of its answer leaving, per tailnet device.", "Users and devices"),
)


def _panel(p: Panel) -> gt.Panel:
    panel = (gt.Panel().title(p.title).description(p.description).unit(p.unit).datasource(DATASOURCE)
             .height(8).span(12).min(0))
    for i, query in enumerate(p.queries):
        panel = panel.with_target(gp.Dataquery().expr(query.expr).legend_format(query.legend).range()
                                  .ref_id(chr(ord("A") + i)).datasource(DATASOURCE))
    return panel


def dashboard() -> dict[str, Any]:
    """The dashboard JSON document (what Grafana's file provisioning reads)."""
    model_var = (gd.QueryVariable("model_name").label("Model").query(q.MODEL_VARIABLE_QUERY).datasource(DATASOURCE)
                 .multi(True).include_all(True).all_value(".*").refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
                 .sort(dm.VariableSort.ALPHABETICAL_ASC)
                 .current(dm.VariableOption(selected=True, text="All", value="$__all")))
    b = (gd.Dashboard(TITLE).uid(UID).tags(["roost", "vllm"]).refresh("30s").time("now-6h", "now")
         .timezone("browser").tooltip(dm.DashboardCursorSync.CROSSHAIR).with_variable(model_var))
    row = ""
    for p in PANELS:
        if p.row != row:
            b = b.with_row(gd.Row(p.row))
            row = p.row
        b = b.with_panel(_panel(p))
    doc: dict[str, Any] = json.loads(json.dumps(b.build(), cls=JSONEncoder))
    return doc


def panel_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (panel title, expr) of a dashboard document, in order."""
    out: list[tuple[str, str]] = []
    for panel in doc.get("panels") or []:
        for sub in [panel, *(panel.get("panels") or [])]:
            for target in sub.get("targets") or []:
                if "expr" in target:
                    out.append((str(sub.get("title", "")), str(target["expr"])))
    return out
