# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's sections on serving: the audit's findings, the plan against what vLLM logged, the
weights and memory on the host, and what vLLM measured, chose and said about its start.

They read the run's audit and plan snapshots (``roost.records.AuditSnapshot``, ``PlanSnapshot``):
the typed fields, and every other scalar of the documents as a table of facts.
"""

from __future__ import annotations

from typing import Any

from roost import catalogue as C
from roost.catalogue import fmt_change
from roost.records import RunRecord, ServeObservation
from roost.report.blocks import Bullets, Para, Section, Table, code
from roost.units import GiB, format_memory

_RANK = {"error": 0, "warning": 1, "info": 2}
_KV_TOKENS, _CONCURRENCY = C.Column(metric=C.KV_CACHE_TOKENS), C.Column(metric=C.MAX_CONCURRENCY)


def audit_section(record: RunRecord) -> Section:
    sec = Section(title="Audit findings")
    audit = record.audit
    if not audit:
        sec.blocks.append(Para(text="The audit did not run (or recorded nothing) for this run."))
        return sec
    if audit.findings:
        items = sorted(audit.findings, key=lambda f: _RANK.get(f.severity, 3))
        rows = [[f.severity, code(f.code), f.message] for f in items]
        sec.blocks.append(Table(headers=["Severity", "Code", "Finding"], rows=rows))
    else:
        sec.blocks.append(Para(text="The audit raised no findings."))
    facts = scalars(audit.model_dump(mode="json"), skip={"findings"})
    if facts:
        sec.blocks.append(Table(headers=["Audit fact", "Value"], rows=facts))
    return sec


def scalars(data: dict[str, Any], skip: set[str], limit: int = 24) -> list[list[str]]:
    """The first ``limit`` scalar values of a JSON document as (key, value) rows, in its order; a key
    the catalogue names (``decode_ceiling_tok_s``, ``kv_cache_tokens``...) prints through its metric,
    as the headline and every other output print it."""
    rows = []
    for key, value in data.items():
        if key in skip or isinstance(value, dict | list) or value is None:
            continue
        metric = C.CATALOGUE.get(key)
        if metric is not None and isinstance(value, int | float) and not isinstance(value, bool):
            text = metric.format(value)
        elif isinstance(value, float):
            text = f"{value:,.4g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            text = f"{value:,}"
        else:
            text = str(value)
        rows.append([key, text[:200]])
    return rows[:limit]


def _diff(planned: float | None, logged: float | None) -> str:
    if planned is None or logged is None or planned == 0:
        return "—"
    return fmt_change(100.0 * (logged - planned) / planned)


def _kv_rows(s: ServeObservation) -> list[list[str]]:
    """The KV figures the plan predicted beside the ones vLLM logged."""

    def whole(value: int | None) -> str:
        return "—" if value is None else f"{value:,}"

    tokens, times = _KV_TOKENS.cell, _CONCURRENCY.cell  # the catalogue's metrics, as every output prints them
    rows = [
        ["KV cache tokens", tokens(s.predicted_kv_cache_tokens), tokens(s.logged_kv_cache_tokens),
         _diff(s.predicted_kv_cache_tokens, s.logged_kv_cache_tokens)],
        ["Max concurrency (full-length requests)", times(s.predicted_max_concurrency), times(s.logged_max_concurrency),
         _diff(s.predicted_max_concurrency, s.logged_max_concurrency)],
        ["Attention block size", "—", whole(s.logged_block_size), "—"],
    ]
    if s.predicted_kv_pool_bytes is not None or s.logged_kv_pool_gib is not None:
        planned_gib = s.predicted_kv_pool_bytes / GiB if s.predicted_kv_pool_bytes is not None else None
        band = s.predicted_kv_pool_range
        shown_plan = "—" if planned_gib is None else f"{planned_gib:.2f}" + (
            f" ({band[0] / GiB:.2f}–{band[1] / GiB:.2f})" if band else " (exact)")
        rows.insert(0, ["KV pool GiB", shown_plan, "—" if s.logged_kv_pool_gib is None else f"{s.logged_kv_pool_gib:.2f}",
                        _diff(planned_gib, s.logged_kv_pool_gib)])
    return rows


def _pool_note(record: RunRecord) -> Para | None:
    """How the pool vLLM took compares with the plan's: inside the predicted range, or off an exact pin."""
    s = record.serve
    band = s.predicted_kv_pool_range
    if band is not None and s.predicted_kv_pool_bytes is not None:
        util = record.plan.gpu_memory_utilization
        said = (f"The pool was predicted from --gpu-memory-utilization {util}: {s.predicted_kv_pool_bytes / GiB:.2f} GiB "
                f"(expected {band[0] / GiB:.2f}–{band[1] / GiB:.2f} GiB). ")
        if s.logged_kv_pool_gib is None:
            said += "vLLM's log gave no pool figure, so the prediction is unchecked."
        else:
            inside = band[0] / GiB - 0.005 <= s.logged_kv_pool_gib <= band[1] / GiB + 0.005
            said += (f"vLLM took {s.logged_kv_pool_gib:.2f} GiB, {_diff(s.predicted_kv_pool_bytes / GiB, s.logged_kv_pool_gib)} "
                     f"from the prediction, {'inside' if inside else '**outside**'} the expected range.")
        return Para(text=said)
    if s.predicted_kv_pool_bytes is not None and s.logged_kv_pool_gib is not None:
        off = s.logged_kv_pool_gib - s.predicted_kv_pool_bytes / GiB
        return Para(text=f"The pool is exact by construction (pinned, or set by the host's environment): "
                         f"vLLM took {s.logged_kv_pool_gib:.2f} GiB, {off:+.2f} GiB from the plan.")
    return None


def plan_section(record: RunRecord) -> Section:
    sec = Section(title="Plan vs what vLLM logged")
    rows = _kv_rows(record.serve)
    if all(r[1] == "—" and r[2] == "—" for r in rows):
        sec.blocks.append(Para(text="Neither the plan nor vLLM's log gave KV-cache figures for this run."))
    else:
        sec.blocks.append(Table(headers=["Quantity", "Plan", "vLLM log", "Log vs plan"], rows=rows, align_right=[1, 2, 3]))
    note = _pool_note(record)
    if note is not None:
        sec.blocks.append(note)
    facts = scalars(record.plan.model_dump(mode="json"), skip=set())
    if facts:
        sec.blocks.append(Table(headers=["Plan input / output", "Value"], rows=facts))
    if record.meta.vllm_args:
        sec.blocks.append(Para(text="vLLM args: " + code(" ".join(record.meta.vllm_args))))
    return sec


def weights_section(record: RunRecord) -> Section | None:
    """What the weights are made of (bytes per tensor class) and the predicted working set on the host:
    weights vLLM loads + KV pool + headroom against the host's budget (the recipes' "~82 of 114 GiB")."""
    by_class, fit = record.audit.weight_bytes_by_class, record.plan.fit
    if by_class is None and fit is None:
        return None
    sec = Section(title="Weights and memory")
    if by_class:
        total = sum(int(v) for v in by_class.values()) or 1
        rows = [[code(name), format_memory(int(b)), f"{100.0 * int(b) / total:.1f}%"]
                for name, b in sorted(by_class.items(), key=lambda kv: -int(kv[1]))]
        rows.append(["total", format_memory(total), "100%"])
        sec.blocks.append(Table(headers=["Tensor class", "Weights", "Share"], rows=rows, align_right=[1, 2]))
    if fit:
        def gib(value: float | None) -> str:
            return "—" if value is None else format_memory(int(value))

        rows = [["Weights vLLM loads", gib(fit.weight_bytes)], ["KV pool", gib(fit.kv_cache_memory_bytes)],
                ["Headroom (activations, graphs, allocator)", gib(fit.headroom_bytes)],
                ["Predicted working set", gib(fit.total_bytes)], [f"{record.meta.host}'s budget", gib(fit.usable_bytes)],
                ["Left", gib(fit.free_bytes)]]
        sec.blocks.append(Table(headers=["Memory (plan)", "Bytes"], rows=rows, align_right=[1]))
    if record.serve.host_check:
        sec.blocks.append(Para(text="Host check before the cold load:"))
        sec.blocks.append(Bullets(items=list(record.serve.host_check)))
    return sec


def vllm_log_section(record: RunRecord) -> Section | None:
    """What vLLM's own log said about the start: the weights it measured against the plan's, the
    kernels it picked, and the informational lines the recipes explain (``roost.serve.vllm_log``)."""
    s = record.serve
    if s.logged_weights_gib is None and not (s.attention_backends or s.moe_backends or s.explained_log_lines):
        return None
    sec = Section(title="What vLLM measured, chose and said")
    if s.logged_weights_gib is not None:
        predicted = record.plan.fit.weight_bytes if record.plan.fit is not None else None
        measured = f"Weights in memory: **{s.logged_weights_gib:.2f} GiB** measured (vLLM log)"
        if predicted is not None and predicted > 0:
            change = fmt_change(100.0 * (s.logged_weights_gib * GiB - predicted) / predicted)
            measured += f" vs {format_memory(predicted)} predicted ({change})"
        else:
            measured += ", no prediction in the plan"
        if s.logged_model_load_s is not None:
            measured += f"; vLLM timed the model load at {s.logged_model_load_s:.1f} s"
        sec.blocks.append(Para(text=measured + "."))
    rows = [["Attention", ", ".join(code(b) for b in s.attention_backends) or "not logged by this vLLM"]]
    if s.moe_backends:
        rows.append(["MoE", ", ".join(code(b) for b in s.moe_backends)])
    sec.blocks.append(Table(headers=["Kernels vLLM chose", "Backend"], rows=rows))
    if s.explained_log_lines:
        sec.blocks.append(Para(text="Informational lines in vLLM's log, explained:"))
        sec.blocks.append(Bullets(items=[f"{code(e.get('line', ''))}: {e.get('meaning', '')}"
                                         for e in s.explained_log_lines]))
    return sec
