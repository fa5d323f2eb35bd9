# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's content as a small document tree, rendered to Markdown and to HTML from one source.

Text uses a tiny inline syntax both renderers understand: ``**bold**`` and ```code```.
Every section copes with missing data: a failed run with no points still gets a report that says
which stage failed and why, and each empty section says what it would have shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from roost import catalogue as C
from roost.bench import mtp
from roost.catalogue import fmt_change, fmt_value
from roost.headline import (
    concurrency_points,
    headline,
    headline_rows,
    knee_of,
    max_num_seqs,
    pct_of_ceiling,
    point_name,
    prompt_points,
)
from roost.notify.slack import prefect_run_url
from roost.records import BenchPoint, RunRecord
from roost.regress import RegressionReport, key_of
from roost.units import GiB, format_memory


class Para(BaseModel):
    kind: Literal["para"] = "para"
    text: str


class Bullets(BaseModel):
    kind: Literal["bullets"] = "bullets"
    items: list[str]


class Table(BaseModel):
    kind: Literal["table"] = "table"
    headers: list[str]
    rows: list[list[str]]
    align_right: list[int] = Field(default_factory=list, description="Column indexes holding numbers.")


class Image(BaseModel):
    kind: Literal["image"] = "image"
    alt: str
    path: Path


Block = Para | Bullets | Table | Image


class Section(BaseModel):
    title: str
    blocks: list[Block] = Field(default_factory=list)


class Document(BaseModel):
    title: str
    facts: list[tuple[str, str]]
    sections: list[Section]


def code(text: object) -> str:
    """Inline code, safe for the tiny syntax (backticks inside are replaced)."""
    return "`" + str(text).replace("`", "'") + "`"


def _f(value: float | None, unit: str = "") -> str:
    return fmt_value(value, unit)


def _i(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


# ----------------------------------------------------------------------------------------- sections


def _summary(record: RunRecord, comparison: RegressionReport | None) -> Section:
    h = headline(record)
    blocks: list[Block] = []
    if record.status != "completed":
        text = f"**The run failed at stage {code(record.failed_stage or 'unknown')}**"
        if record.failure_class:
            text += f" ({code(record.failure_class)})"
        text += "."
        if record.failure_message:
            text += f" {record.failure_message}"
        blocks.append(Para(text=text))
        if record.remediation:
            blocks.append(Para(text=f"**Remediation:** {record.remediation}"))
    if comparison is not None:
        blocks.append(Para(text=f"**Baseline:** {comparison.message}."))
    rows = [[r.label[:1].upper() + r.label[1:], r.text] for r in headline_rows(record)]
    rows.append(["Benchmark points / requests / failed", f"{h.points} / {h.requests:,} / {h.error_requests:,}"])
    blocks.append(Table(headers=["Headline", "Value"], rows=rows, align_right=[1]))
    return Section(title="Summary", blocks=blocks)


def _baseline(comparison: RegressionReport | None) -> Section:
    sec = Section(title="Baseline comparison")
    if comparison is None:
        sec.blocks.append(Para(text="No baseline comparison was made for this run."))
        return sec
    cfg = comparison.config
    same = ", ".join(cfg.key_fields) if cfg.key_fields else "model commit, image digest, vLLM args and host"
    sec.blocks.append(Para(text=comparison.message[:1].upper() + comparison.message[1:] + "."))
    n = len(comparison.baseline_run_ids)
    sec.blocks.append(
        Para(
            text=(
                f"Baseline: the median of the latest comparable runs (same {same}; up to {cfg.window}, this run had "
                f"{n}); a verdict needs at least {cfg.min_runs}. A metric regresses when it moves the wrong way by "
                f"more than max({cfg.rel_floor:.0%} of the baseline, {cfg.mad_k:g} × the noise, the metric's floor); "
                "the noise is the spread of the runs' values (1.4826 × their median absolute deviation) pooled with "
                f"each run's own spread over its requests or repeats ({code('roost/regress.py')})."
            )
        )
    )
    if comparison.baseline_run_ids:
        sec.blocks.append(Para(text="Baseline runs: " + ", ".join(code(r) for r in comparison.baseline_run_ids)))
    if comparison.comparisons:
        order = {"regressed": 0, "improved": 1, "unchanged": 2, "insufficient": 3, "new": 4}
        words = {"regressed": "**REGRESSED**", "insufficient": "no verdict (too few runs)", "new": "new (no baseline)"}
        rows = []
        for c in sorted(comparison.comparisons, key=lambda c: order.get(c.verdict, len(order))):
            rows.append(
                [
                    c.metric.label,
                    _f(c.baseline, c.metric.unit),
                    _f(c.current, c.metric.unit),
                    fmt_change(c.change_pct) if c.baseline is not None else "—",
                    _f(c.threshold, c.metric.unit),
                    words.get(c.verdict, c.verdict),
                    _f(c.noise_sd, c.metric.unit),
                ]
            )
        sec.blocks.append(
            Table(
                headers=["Metric", "Baseline", "This run", "Change", "Threshold", "Verdict", "Noise (1 s.d.)"],
                rows=rows,
                align_right=[1, 2, 3, 4, 6],
            )
        )
    return sec


def _audit(record: RunRecord) -> Section:
    sec = Section(title="Audit findings")
    audit = record.audit
    if not audit:
        sec.blocks.append(Para(text="The audit did not run (or recorded nothing) for this run."))
        return sec
    findings = audit.get("findings")
    if isinstance(findings, list) and findings:
        rank = {"error": 0, "warning": 1, "info": 2}
        items = [f for f in findings if isinstance(f, dict)]
        items.sort(key=lambda f: rank.get(str(f.get("severity", "")), 3))
        rows = [[str(f.get("severity", "")), code(f.get("code", "")), str(f.get("message", ""))] for f in items]
        sec.blocks.append(Table(headers=["Severity", "Code", "Finding"], rows=rows))
    else:
        sec.blocks.append(Para(text="The audit raised no findings."))
    facts = _scalars(audit, skip={"findings"})
    if facts:
        sec.blocks.append(Table(headers=["Audit fact", "Value"], rows=facts))
    return sec


def _scalars(data: dict[str, Any], skip: set[str], limit: int = 24) -> list[list[str]]:
    rows = []
    for key, value in data.items():
        if key in skip or isinstance(value, dict | list) or value is None:
            continue
        if isinstance(value, float):
            text = f"{value:,.4g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            text = f"{value:,}"
        else:
            text = str(value)
        rows.append([key, text[:200]])
    return rows[:limit]


def _plan(record: RunRecord) -> Section:
    sec = Section(title="Plan vs what vLLM logged")
    s = record.serve

    def diff(planned: float | None, logged: float | None) -> str:
        if planned is None or logged is None or planned == 0:
            return "—"
        return fmt_change(100.0 * (logged - planned) / planned)

    rows = [
        ["KV cache tokens", _i(s.predicted_kv_cache_tokens), _i(s.logged_kv_cache_tokens),
         diff(s.predicted_kv_cache_tokens, s.logged_kv_cache_tokens)],
        [
            "Max concurrency (full-length requests)",
            f"{s.predicted_max_concurrency:.2f}x" if s.predicted_max_concurrency is not None else "—",
            f"{s.logged_max_concurrency:.2f}x" if s.logged_max_concurrency is not None else "—",
            diff(s.predicted_max_concurrency, s.logged_max_concurrency),
        ],
        ["Attention block size", "—", _i(s.logged_block_size), "—"],
    ]
    if s.predicted_kv_pool_bytes is not None or s.logged_kv_pool_gib is not None:
        planned_gib = s.predicted_kv_pool_bytes / GiB if s.predicted_kv_pool_bytes is not None else None
        band = s.predicted_kv_pool_range
        shown_plan = "—" if planned_gib is None else f"{planned_gib:.2f}" + (
            f" ({band[0] / GiB:.2f}–{band[1] / GiB:.2f})" if band else " (exact)")
        rows.insert(0, ["KV pool GiB", shown_plan, "—" if s.logged_kv_pool_gib is None else f"{s.logged_kv_pool_gib:.2f}",
                        diff(planned_gib, s.logged_kv_pool_gib)])
    if all(r[1] == "—" and r[2] == "—" for r in rows):
        sec.blocks.append(Para(text="Neither the plan nor vLLM's log gave KV-cache figures for this run."))
    else:
        sec.blocks.append(Table(headers=["Quantity", "Plan", "vLLM log", "Log vs plan"], rows=rows, align_right=[1, 2, 3]))
    band = s.predicted_kv_pool_range
    if band is not None and s.predicted_kv_pool_bytes is not None:
        util = record.plan.get("gpu_memory_utilization")
        said = (f"The pool was predicted from --gpu-memory-utilization {util}: {s.predicted_kv_pool_bytes / GiB:.2f} GiB "
                f"(expected {band[0] / GiB:.2f}–{band[1] / GiB:.2f} GiB). ")
        if s.logged_kv_pool_gib is None:
            said += "vLLM's log gave no pool figure, so the prediction is unchecked."
        else:
            inside = band[0] / GiB - 0.005 <= s.logged_kv_pool_gib <= band[1] / GiB + 0.005
            said += (f"vLLM took {s.logged_kv_pool_gib:.2f} GiB, {diff(s.predicted_kv_pool_bytes / GiB, s.logged_kv_pool_gib)} "
                     f"from the prediction, {'inside' if inside else '**outside**'} the expected range.")
        sec.blocks.append(Para(text=said))
    elif s.predicted_kv_pool_bytes is not None and s.logged_kv_pool_gib is not None:
        off = s.logged_kv_pool_gib - s.predicted_kv_pool_bytes / GiB
        sec.blocks.append(Para(text=f"The pool is exact by construction (pinned, or set by the host's environment): "
                                    f"vLLM took {s.logged_kv_pool_gib:.2f} GiB, {off:+.2f} GiB from the plan."))
    facts = _scalars(record.plan, skip=set())
    if facts:
        sec.blocks.append(Table(headers=["Plan input / output", "Value"], rows=facts))
    if record.meta.vllm_args:
        sec.blocks.append(Para(text="vLLM args: " + code(" ".join(record.meta.vllm_args))))
    return sec


def _weights(record: RunRecord) -> Section | None:
    """What the weights are made of (bytes per tensor class) and the predicted working set on the host:
    weights vLLM loads + KV pool + headroom against the host's budget (the recipes' "~82 of 114 GiB")."""
    by_class = record.audit.get("weight_bytes_by_class")
    fit = record.plan.get("fit")
    if not isinstance(by_class, dict) and not isinstance(fit, dict):
        return None
    sec = Section(title="Weights and memory")
    if isinstance(by_class, dict) and by_class:
        total = sum(int(v) for v in by_class.values()) or 1
        rows = [[code(name), format_memory(int(b)), f"{100.0 * int(b) / total:.1f}%"]
                for name, b in sorted(by_class.items(), key=lambda kv: -int(kv[1]))]
        rows.append(["total", format_memory(total), "100%"])
        sec.blocks.append(Table(headers=["Tensor class", "Weights", "Share"], rows=rows, align_right=[1, 2]))
    if isinstance(fit, dict) and fit:
        def gib(key: str) -> str:
            value = fit.get(key)
            return format_memory(int(value)) if isinstance(value, int | float) else "—"

        rows = [["Weights vLLM loads", gib("weight_bytes")], ["KV pool", gib("kv_cache_memory_bytes")],
                ["Headroom (activations, graphs, allocator)", gib("headroom_bytes")],
                ["Predicted working set", gib("total_bytes")], [f"{record.meta.host}'s budget", gib("usable_bytes")],
                ["Left", gib("free_bytes")]]
        sec.blocks.append(Table(headers=["Memory (plan)", "Bytes"], rows=rows, align_right=[1]))
    if record.serve.host_check:
        sec.blocks.append(Para(text="Host check before the cold load:"))
        sec.blocks.append(Bullets(items=list(record.serve.host_check)))
    return sec


def _vllm_log(record: RunRecord) -> Section | None:
    """What vLLM's own log said about the start: the weights it measured against the plan's, the
    kernels it picked, and the informational lines the recipes explain (``roost.serve.vllm_log``)."""
    s = record.serve
    if s.logged_weights_gib is None and not (s.attention_backends or s.moe_backends or s.explained_log_lines):
        return None
    sec = Section(title="What vLLM measured, chose and said")
    if s.logged_weights_gib is not None:
        fit = record.plan.get("fit")
        predicted = fit.get("weight_bytes") if isinstance(fit, dict) else None
        measured = f"Weights in memory: **{s.logged_weights_gib:.2f} GiB** measured (vLLM log)"
        if isinstance(predicted, int | float) and predicted > 0:
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


def _point_range(p: BenchPoint) -> str:
    """Decode min-max over the requests with a measured decode; "—" when fewer than two had one (the
    range of one value says nothing; :func:`_dash_note` says why)."""
    d = p.decode_tok_s
    if d.min is None or d.max is None or (d.count is not None and d.count < 2):
        return "—"
    return f"{fmt_value(d.min)}–{fmt_value(d.max)}"


def _empty_repeats(p: BenchPoint) -> int:
    """Repeats of the point that measured nothing (no completed request with a token): they add no
    per-repeat value (``roost.bench.metrics.output_throughput``), so the per-repeat count is short."""
    if not p.repeats or p.output_tok_s.count is None:
        return 0
    return max(0, p.repeats - p.output_tok_s.count)


def _ok(p: BenchPoint) -> str:
    """``3/3``, or ``3/3 (1 unmeasurable)`` when some decode timings were unmeasurable, ``1/3 (2 of 3
    repeats measured nothing)`` when some repeats measured nothing."""
    notes = []
    if p.unmeasurable:
        notes.append(f"{p.unmeasurable} unmeasurable")
    if empty := _empty_repeats(p):
        notes.append(f"{empty} of {p.repeats} repeats measured nothing")
    return f"{p.requests - p.errors}/{p.requests}" + (f" ({'; '.join(notes)})" if notes else "")


def _ms(seconds: float | None, count: int | None) -> str:
    """A duration in ms rounded for people (``3.7``, ``0.42``); "—" when nothing was measured (no
    sample, or a 0 that only says chunks arrived together)."""
    if seconds is None or not count or seconds <= 0:
        return "—"
    ms = seconds * 1000
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 1 else f"{ms:.2f}"


def _pct(value: float | None) -> str:
    """A percentage rounded for people: ``63%``, ``7.5%``."""
    return "—" if value is None else f"{value:.0f}%" if abs(value) >= 10 else f"{value:.1f}%"


def _dash_note(pts: list[BenchPoint]) -> Para | None:
    """Why a decode min-max or an ITL reads "—" (None when none does)."""
    ranges = [f"{point_name(p)}: {p.decode_tok_s.count or 0} of {p.requests}" for p in pts
              if _point_range(p) == "—"]
    itl = [point_name(p) for p in pts if _ms(p.itl_s.median, p.itl_s.count) == "—"]
    parts = []
    if ranges:
        parts.append("Decode min–max is “—” where fewer than two requests had a measured decode ("
                     + "; ".join(ranges) + "): a range needs two values.")
    if itl:
        parts.append("ITL is “—” where no request had a measured decode (" + ", ".join(itl) + ").")
    return Para(text=" ".join(parts)) if parts else None


def _unmeasurable_note(pts: list[BenchPoint]) -> Para | None:
    """Which points had unmeasurable decode timings and why (None when none had)."""
    items = [f"{point_name(p)}: {p.unmeasurable} of {p.requests - p.errors}"
             + (f" ({p.unmeasurable_reasons})" if p.unmeasurable_reasons else "") for p in pts if p.unmeasurable]
    if not items:
        return None
    return Para(text=f"**{C.UNMEASURABLE.title}** — {'; '.join(items)}. "
                     f"Left out of decode tok/s, TPOT and ITL (the rule: {code('roost/bench/validity.py')}).")


def _queueing_note(record: RunRecord, pts: list[BenchPoint]) -> Para | None:
    """The server's cap on running requests and the levels whose requests queued past it."""
    cap = max_num_seqs(record)
    seen = [p for p in pts if p.peak_waiting is not None or p.queue_time_s is not None]
    waited = [p for p in seen if p.queued(C.QUEUED_S)]
    parts = []
    if cap is not None:
        parts.append(f"The server runs at most {cap} requests at once ({code(f'--max-num-seqs {cap}')}).")
    if waited:
        levels = ", ".join(f"{p.concurrency} ({C.QUEUE_TIME.format(p.queue_time_s)} mean queue time)"
                           if p.queue_time_s is not None else f"{p.concurrency} ({_f(p.peak_waiting)} waiting)"
                           for p in waited)
        parts.append(f"Requests queued at {levels} concurrent: those users waited for a running slot instead "
                     "of decoding.")
    elif seen:
        parts.append(f"No request queued at any level (mean queue time under {C.QUEUE_TIME.format(C.QUEUED_S)}, "
                     "peak waiting 0).")
    return Para(text=" ".join(parts)) if parts else None


def _prompt_section(record: RunRecord, charts: dict[str, Path]) -> Section:
    sec = Section(title="Decode and TTFT vs prompt length")
    pts = prompt_points(record)
    if not pts:
        sec.blocks.append(Para(text="No prompt-length points were measured in this run."))
    else:
        rows = []
        for p in pts:
            pct = pct_of_ceiling(p.decode_tok_s.median, record.decode_ceiling_tok_s)
            rows.append(
                [
                    f"{p.prompt_tokens:,}",
                    f"{p.output_tokens:,}",
                    _ok(p),
                    _f(p.decode_tok_s.median),
                    _point_range(p),
                    _pct(pct),
                    _f(p.ttft_s.median),
                    _f(p.ttft_s.p90),
                    _ms(p.itl_s.median, p.itl_s.count),
                    _f(p.prefill_tok_s.median),
                ]
            )
        sec.blocks.append(
            Table(
                headers=["Prompt tokens", "Output tokens", "OK/requests", "Decode tok/s (median)", "Decode min–max",
                         "% of ceiling", "TTFT s (median)", "TTFT s (p90)", "ITL ms (median)",
                         "Prefill tok/s (median)"],
                rows=rows,
                align_right=list(range(10)),
            )
        )
        for note in (_unmeasurable_note(pts), _dash_note(pts)):
            if note is not None:
                sec.blocks.append(note)
    for key, alt in (("decode_vs_prompt", "Decode tok/s vs prompt length, with the roofline ceiling"),
                     ("ttft_vs_prompt", "TTFT vs prompt length (log axis)"),
                     ("prefill_vs_prompt", "Prefill tok/s (prompt tokens / TTFT) vs prompt length")):
        if key in charts:
            sec.blocks.append(Image(alt=alt, path=charts[key]))
    return sec


def _concurrency_section(record: RunRecord, charts: dict[str, Path]) -> Section:
    sec = Section(title="Throughput vs concurrency")
    pts = concurrency_points(record)
    if not pts:
        sec.blocks.append(Para(text="No concurrency points were measured in this run."))
        return sec
    rows = [
        [
            str(p.concurrency),
            f"{p.prompt_tokens:,}",
            _ok(p),
            _f(p.output_tok_s.median),
            _f(p.decode_tok_s.median),
            _f(p.ttft_s.median),
            _f(p.ttft_s.p99),
            _f(p.request_rate.median),
            _f(p.peak_running),
            _f(p.peak_waiting),
            _f(p.queue_time_s),
        ]
        for p in pts
    ]
    sec.blocks.append(
        Table(
            headers=["Concurrency", "Prompt tokens", "OK/requests", "Aggregate output tok/s",
                     "Per-request decode tok/s", "TTFT s (median)", "TTFT s (p99)", "Requests/s",
                     C.PEAK_RUNNING.title,
                     C.PEAK_WAITING.title,
                     f"{C.QUEUE_TIME.title} ({C.QUEUE_TIME.unit})"],
            rows=rows,
            align_right=list(range(11)),
        )
    )
    note = _unmeasurable_note(pts)
    if note is not None:
        sec.blocks.append(note)
    queue = _queueing_note(record, pts)
    if queue is not None:
        sec.blocks.append(queue)
    knee = knee_of(pts)
    if knee is not None:
        sec.blocks.append(
            Para(
                text=(
                    f"Peak {_f(knee.peak_output_tok_s, 'tok/s')} at {knee.peak_concurrency} concurrent; the knee "
                    f"({C.KNEE.definition}) is {knee.concurrency} concurrent ({_f(knee.output_tok_s, 'tok/s')})."
                )
            )
        )
    if "throughput_vs_concurrency" in charts:
        sec.blocks.append(Image(alt="Aggregate output tok/s vs concurrency: the knee, queueing and the server's cap",
                                path=charts["throughput_vs_concurrency"]))
    return sec


def _mtp_ab_section(record: RunRecord) -> Section | None:
    """The MTP A/B (``roost.bench.mtp``): each point's rate with and without --speculative-config on
    the same image and commit, the speed-up, and the draft acceptance (overall and per position)."""
    ab = record.mtp_ab
    if ab is None:
        return None
    sec = Section(title="MTP A/B")
    text = (f"Served with {code('--speculative-config ' + ab.speculative_config)}; the baseline is the same image and "
            f"commit restarted without it")
    if ab.baseline_start_to_healthy_s is not None:
        text += f" (cold start {_f(ab.baseline_start_to_healthy_s, 's')})"
    sec.blocks.append(Para(text=text + f". {C.MTP_SPEEDUP.label}: {C.MTP_SPEEDUP.definition}."))

    def pct(rate: float | None) -> str:
        return _f(None if rate is None else 100.0 * rate, "%")

    prompts, levels = mtp.prompt_points(ab), mtp.concurrency_points(ab)
    if prompts:
        sec.blocks.append(Table(
            headers=["Prompt tokens (1 user)", "Decode tok/s with", "Decode tok/s without", "Speed-up",
                     "Draft acceptance"],
            rows=[[f"{p.prompt_tokens:,}", _f(p.with_spec), _f(p.without_spec), C.MTP_SPEEDUP.format(p.speedup),
                   pct(p.acceptance_rate)] for p in prompts],
            align_right=[0, 1, 2, 3, 4]))
    if levels:
        sec.blocks.append(Table(
            headers=["Concurrency", "Aggregate tok/s with", "Aggregate tok/s without", "Speed-up", "Draft acceptance"],
            rows=[[str(p.concurrency), _f(p.with_spec), _f(p.without_spec), C.MTP_SPEEDUP.format(p.speedup),
                   pct(p.acceptance_rate)] for p in levels],
            align_right=[0, 1, 2, 3, 4]))
    if not prompts and not levels:
        sec.blocks.append(Para(text="No point was measured by both runs."))
    acc = ab.acceptance
    if acc is None:
        sec.blocks.append(Para(text="No draft acceptance: the server's /metrics had no vllm:spec_decode_* counters "
                                    "and its log no SpecDecoding lines."))
    else:
        source = "/metrics" if acc.source == "metrics" else "vLLM's SpecDecoding log lines"
        text = (f"**{C.SPEC_ACCEPTANCE.title}:** "
                f"{pct(acc.rate)} of {acc.draft_tokens:,.0f} draft tokens ({acc.drafts:,.0f} drafts, "
                f"mean acceptance length {_f(acc.mean_acceptance_length)}), from {source} over the speculative "
                "server's life (warm-up and benchmark).")
        if acc.per_position:
            text += " Per draft position: " + ", ".join(
                f"{i + 1}: {pct(r)}" for i, r in enumerate(acc.per_position)) + "."
        sec.blocks.append(Para(text=text))
    return sec


def _accuracy_section(record: RunRecord, charts: dict[str, Path]) -> Section | None:
    """Each evaluation: accuracy with its interval, the failure modes (unparsed, truncated), output
    length, the paired comparison with the baseline run (McNemar), other models, and the per-category
    chart (``roost.eval``; definitions in ``roost/catalogue.py``)."""
    if not record.evals:
        return None
    from roost.eval.tasks import TASKS

    sec = Section(title="Accuracy")
    rows = []
    for e in record.evals:
        s = e.summary
        title = TASKS[e.task].title if e.task in TASKS else e.task
        rows.append([title + ("" if e.status == "completed" else " (stopped)"), f"{s.n:,}",
                     C.fmt_accuracy(s.accuracy, s.ci_low, s.ci_high), _i(s.unparsed), _i(s.truncated),
                     C.MEAN_OUTPUT_TOKENS.format(s.mean_output_tokens),
                     e.comparison.describe() if e.comparison else "no earlier run of the same questions"])
    sec.blocks.append(Table(headers=["Task", "Questions", C.ACCURACY.title, C.UNPARSED.title, C.TRUNCATED.title,
                                     C.MEAN_OUTPUT_TOKENS.title, "Against the baseline (paired)"],
                            rows=rows, align_right=[1, 3, 4, 5]))
    for e in record.evals:
        title = TASKS[e.task].title if e.task in TASKS else e.task
        sp = e.sampling
        text = (f"**{title}**: dataset {code(e.dataset.source)} @ {code(e.dataset.revision[:16])}, seed {e.seed}"
                + (f", {e.per_category} per category" if e.per_category else "")
                + (f", limit {e.limit}" if e.limit else "")
                + f"; temperature {sp.temperature}, top_p {sp.top_p}, top_k {sp.top_k}, max_tokens {sp.max_tokens:,}, "
                f"thinking {'on' if sp.thinking else 'off'}, {sp.concurrency} in flight.")
        if e.status != "completed":
            text += f" Stopped: {e.error}"
        if e.resumed:
            text += f" {e.resumed} answers came from the run's log (a retried stage), not asked again."
        sec.blocks.append(Para(text=text))
        c = e.comparison
        if c is not None and c.categories:
            sec.blocks.append(Table(
                headers=["Category", "Paired", "Right before, wrong now", "Wrong before, right now", "McNemar p"],
                rows=[[m.category or "all", str(m.pairs), str(m.lost), str(m.gained), f"{m.p_value:.3g}"]
                      for m in c.categories],
                align_right=[1, 2, 3, 4]))
        if e.others:
            sec.blocks.append(Table(
                headers=["Other model", "Run", C.ACCURACY.title, "Questions"],
                rows=[[code(o.repo_id), code(o.run_id), C.fmt_accuracy(o.accuracy, o.ci_low, o.ci_high), f"{o.n:,}"]
                      for o in e.others], align_right=[3]))
        chart = charts.get(f"accuracy_{e.task}")
        if chart is not None:
            sec.blocks.append(Image(alt=f"{title} accuracy per category", path=chart))
    sec.blocks.append(Para(text=f"{C.ACCURACY.title}: {C.ACCURACY.definition}; interval: {C.ACCURACY_CI.definition}. "
                                f"{C.ACCURACY_CHANGE.title}: {C.ACCURACY_CHANGE.definition}."))
    return sec


def _ceiling_section(record: RunRecord) -> Section:
    sec = Section(title="Decode vs the roofline ceiling")
    ceiling = record.decode_ceiling_tok_s
    if ceiling is None:
        sec.blocks.append(Para(text="No roofline ceiling was computed for this run (the audit did not give one)."))
        return sec
    sec.blocks.append(
        Para(
            text=(
                f"Ceiling: {_f(ceiling, 'tok/s')} — host memory bandwidth divided by the bytes one decode step "
                "reads. Decode is bandwidth-bound, so a healthy single-stream rate is a large fraction of it."
            )
        )
    )
    items = []
    for p in prompt_points(record):
        pct = pct_of_ceiling(p.decode_tok_s.median, ceiling)
        if pct is not None:
            items.append(f"{p.prompt_tokens:,}-token prompt: {_f(p.decode_tok_s.median, 'tok/s')} = **{pct:.0f}%** of the ceiling")
    if items:
        sec.blocks.append(Bullets(items=items))
    else:
        sec.blocks.append(Para(text="No decode rate was measured to compare with it."))
    return sec


def _timeline(record: RunRecord, charts: dict[str, Path]) -> Section:
    sec = Section(title="Cold-load timeline")
    if record.stages:
        rows = []
        t = 0.0
        for st in record.stages:
            rows.append([st.stage, st.status + (" (cached)" if st.cached else ""), f"{t:,.1f}", f"{st.seconds:,.1f}", st.note])
            t += st.seconds
        rows.append(["**total**", "", "", f"{t:,.1f}", ""])
        sec.blocks.append(Table(headers=["Stage", "Status", "Starts at s", "Seconds", "Note"], rows=rows, align_right=[2, 3]))
    else:
        sec.blocks.append(Para(text="No stage timings were recorded."))
    s = record.serve
    serve_rows = [
        [label, _f(v, "s")]
        for label, v in (
            ("Start → weights loaded", s.load_s),
            ("Weights loaded → engine ready (profile, compile, warm-up)", s.compile_s),
            ("Engine ready → /health 200 seen", s.ready_s),
            ("/health first 200 → noticed (poll delay)", s.health_detect_delay_s),
            ("Start → healthy (total)", s.start_to_healthy_s),
        )
        if v is not None
    ]
    if serve_rows:
        sec.blocks.append(Table(headers=["vLLM server start", "Seconds"], rows=serve_rows, align_right=[1]))
    if len(s.attempts) > 1 or any(not a.ok for a in s.attempts):
        sec.blocks.append(Para(text=f"The server needed {len(s.attempts)} start attempt(s):"))
        sec.blocks.append(Table(
            headers=["Attempt", "Outcome", "Seconds", "Failure class", "What roost did", "What to change"],
            rows=[[str(a.attempt), "healthy" if a.ok else "failed", _f(a.seconds, "s"),
                   a.failure_class or ("" if a.ok else "unclassified"), a.action, a.remediation]
                  for a in s.attempts],
            align_right=[0, 2]))
    if "timeline" in charts:
        sec.blocks.append(Image(alt="Cold-load timeline", path=charts["timeline"]))
    return sec


def _skipped(record: RunRecord) -> Section | None:
    skipped = [p for p in record.points if p.skipped or (p.requests and p.errors >= p.requests)]
    if not skipped:
        return None
    items = []
    for p in skipped:
        where = f"{p.kind} point: {p.prompt_tokens:,}-token prompt × {p.concurrency} concurrent"
        why = p.skip_reason or f"all {p.requests} requests failed"
        items.append(f"{where} — {why}")
    return Section(title="Points not measured", blocks=[Bullets(items=items)])


def _history(
    record: RunRecord, history: list[RunRecord], comparison: RegressionReport | None, charts: dict[str, Path],
    ui_url: str = "",
) -> Section:
    """The latest runs of this model and host; with the Prefect UI's URL (``ui_url``) each run id that
    has a Prefect flow run links to it (``roost.notify.slack.prefect_run_url``, as the Slack message)."""
    sec = Section(title="History")
    runs = [r for r in history if r.meta.run_id != record.meta.run_id] + [record]
    runs.sort(key=lambda r: r.meta.started_at)
    cfg = comparison.config if comparison is not None else None
    key = key_of(record.meta, cfg)
    rows = []
    for r in runs[-15:]:
        h = headline(r)
        run_url = prefect_run_url(r.meta, ui_url)
        rows.append(
            [
                (f"[{code(r.meta.run_id)}]({run_url})" if run_url else code(r.meta.run_id))
                + (" (this run)" if r.meta.run_id == record.meta.run_id else ""),
                r.meta.started_at.strftime("%Y-%m-%d %H:%M"),
                r.status + ("" if r.status == "completed" else f" at {r.failed_stage}"),
                "yes" if key_of(r.meta, cfg) == key else "no",
                _f(h.decode_tok_s),
                _f(h.ttft_s),
                _f(h.peak_output_tok_s),
                _f(h.start_to_healthy_s),
            ]
        )
    headers = ["Run", "Started (UTC)", "Status", "Comparable", "Decode tok/s", "TTFT s", "Peak tok/s", "Cold start s"]
    shown = runs[-15:]
    if any(r.mtp_ab is not None for r in shown):  # the MTP A/B's headline numbers, when any run has them
        headers += [C.MTP_SPEEDUP.label, C.SPEC_ACCEPTANCE.title]
        for row, r in zip(rows, shown, strict=True):
            h = headline(r)
            row += [C.MTP_SPEEDUP.format(h.mtp_speedup), C.SPEC_ACCEPTANCE.format(h.spec_acceptance_rate)]
    if any(r.probes for r in shown):  # the capability probes: how many passed, which failed
        headers.append("Probes")
        for row, r in zip(rows, shown, strict=True):
            failed = [p.name for p in r.probes if not p.ok]
            row.append("—" if not r.probes else f"{len(r.probes) - len(failed)}/{len(r.probes)}"
                       + (f" ({', '.join(failed)} failed)" if failed else ""))
    sec.blocks.append(Table(headers=headers, rows=rows, align_right=list(range(4, len(headers)))))
    titles = {
        "history_decode_tok_s": "Decode tok/s at the reference prompt across runs",
        "history_ttft_s": "TTFT at the reference prompt across runs",
        "history_peak_output_tok_s": "Peak aggregate output tok/s across runs",
        "history_start_to_healthy_s": "Cold start to /health across runs",
    }
    for name, path in charts.items():
        if name.startswith("history_"):
            sec.blocks.append(Image(alt=titles.get(name, name), path=path))
    return sec


def build_document(
    record: RunRecord,
    history: list[RunRecord],
    comparison: RegressionReport | None,
    charts: dict[str, Path],
    ui_url: str = "",
) -> Document:
    """The whole report for one run (``ui_url``: the Prefect UI, for links to earlier runs)."""
    m = record.meta
    facts = [
        ("Status", record.status + (f" (failed at {record.failed_stage})" if record.status != "completed" else "")),
        ("Model", f"{code(m.repo_id)} @ {code(m.commit[:12] or m.revision)} (revision {code(m.revision)})"),
        ("Served as", code(m.served_model_name)),
        ("Host", f"{code(m.host)}, {m.backend} backend"),
        ("Run", f"{code(m.run_id)}, started {m.started_at.strftime('%Y-%m-%d %H:%M:%S %Z')}"),
    ]
    if m.image or m.image_digest:
        facts.append(("Image", " ".join(code(part) for part in (m.image, m.image_digest[:19]) if part)))
    if m.vllm_version:
        facts.append(("vLLM", code(m.vllm_version)))
    if m.xgrammar_version:
        base = m.xgrammar_base_version  # '' when unknown (a record from before the field): the version alone
        how = ("" if not base else " (base image's; no patch needed)" if base == m.xgrammar_version
               else f" (patched from {code(base)})")
        facts.append(("xgrammar", code(m.xgrammar_version) + how))
    if record.serve.attempts and record.serve.attempts[-1].ok:
        policy = f", restart policy {code(record.serve.restart_policy)}" if record.serve.restart_policy else ""
        facts.append(("Served at", f"port {record.serve.attempts[-1].port}{policy}"))
    if m.prefect_flow_run_id:
        facts.append(("Prefect flow run", code(m.prefect_flow_run_id)))
    if record.probes:
        facts.append(("Probes", "; ".join(
            f"{p.name} {'passed' if p.ok else '**failed** (' + p.failure_class + ')'} in "
            f"{C.PROBE_LATENCY.format(p.latency_s)}" + (f" — {p.error}" if not p.ok and p.error else "")
            for p in record.probes)))
    if record.vision_probe is not None:
        v = record.vision_probe
        facts.append(("Vision probe", f"{'passed' if v.ok else '**failed**'}: one chat request with a "
                      f"{v.image_bytes:,}-byte PNG (image_url) in {C.VISION_PROBE_LATENCY.format(v.latency_s)}"
                      + ("" if v.ok else f" — {v.error}")))
    facts.append(("roost", code(m.roost_version)))
    sections = [
        _summary(record, comparison),
        _baseline(comparison),
        _audit(record),
        _plan(record),
        *[w for w in (_weights(record), _vllm_log(record)) if w is not None],
        _prompt_section(record, charts),
        _concurrency_section(record, charts),
        *[s for s in (_mtp_ab_section(record), _accuracy_section(record, charts)) if s is not None],
        _ceiling_section(record),
        _timeline(record, charts),
    ]
    skipped = _skipped(record)
    if skipped is not None:
        sections.append(skipped)
    sections.append(_history(record, history, comparison, charts, ui_url))
    title = f"roost report: {m.profile} on {m.host}"
    return Document(title=title, facts=facts, sections=sections)


__all__ = ["Block", "Bullets", "Document", "Image", "Para", "Section", "Table", "build_document"]
