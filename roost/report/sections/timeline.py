# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's sections on where the run's time and its decode went: decode against the roofline
ceiling, the cold-load timeline (stages, vLLM's start, its attempts), and the points not measured."""

from __future__ import annotations

from pathlib import Path

from roost import catalogue as C
from roost.catalogue import fmt_value
from roost.headline import pct_of_ceiling, prompt_points
from roost.records import RunRecord, ServeObservation
from roost.report.blocks import Bullets, Image, Para, Section, Table, code


def ceiling_section(record: RunRecord) -> Section:
    sec = Section(title="Decode vs the roofline ceiling")
    ceiling = record.decode_ceiling_tok_s
    if ceiling is None:
        sec.blocks.append(Para(text="No roofline ceiling was computed for this run (the audit did not give one)."))
        return sec
    sec.blocks.append(
        Para(
            text=(
                f"Ceiling: {C.DECODE_CEILING.format(ceiling)} — host memory bandwidth divided by the bytes one decode "
                "step reads. Decode is bandwidth-bound, so a healthy single-stream rate is a large fraction of it."
            )
        )
    )
    items = []
    for p in prompt_points(record):
        pct = pct_of_ceiling(p.decode_tok_s.median, ceiling)
        if pct is not None:
            items.append(f"{p.prompt_tokens:,}-token prompt: {C.DECODE.format(p.decode_tok_s.median)} = "
                         f"**{C.PCT_OF_CEILING.cell(pct)}** of the ceiling")
    if items:
        sec.blocks.append(Bullets(items=items))
    else:
        sec.blocks.append(Para(text="No decode rate was measured to compare with it."))
    return sec


def _stage_table(record: RunRecord) -> Table:
    rows = []
    t = 0.0
    for st in record.stages:
        rows.append([st.stage, st.status + (" (cached)" if st.cached else ""), f"{t:,.1f}", f"{st.seconds:,.1f}", st.note])
        t += st.seconds
    rows.append(["**total**", "", "", f"{t:,.1f}", ""])
    return Table(headers=["Stage", "Status", "Starts at s", "Seconds", "Note"], rows=rows, align_right=[2, 3])


def _start_tables(s: ServeObservation) -> list[Para | Table]:
    """vLLM's start in phases, and its attempts when there was more than one or one failed."""
    blocks: list[Para | Table] = []
    serve_rows = [
        [label, fmt_value(v, "s")]
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
        blocks.append(Table(headers=["vLLM server start", "Seconds"], rows=serve_rows, align_right=[1]))
    if len(s.attempts) > 1 or any(not a.ok for a in s.attempts):
        blocks.append(Para(text=f"The server needed {len(s.attempts)} start attempt(s):"))
        blocks.append(Table(
            headers=["Attempt", "Outcome", "Seconds", "Failure class", "What roost did", "What to change"],
            rows=[[str(a.attempt), "healthy" if a.ok else "failed", fmt_value(a.seconds, "s"),
                   a.failure_class or ("" if a.ok else "unclassified"), a.action, a.remediation]
                  for a in s.attempts],
            align_right=[0, 2]))
    return blocks


def openwebui_para(record: RunRecord) -> Para | None:
    """What became of Open WebUI's default model when this run kept its server (the gateway stage): what
    roost set, or what to change by hand when the host names no Open WebUI or setting it failed."""
    if not any(st.stage == "gateway" and st.status == "completed" for st in record.stages):
        return None
    name = code(record.meta.served_model_name)
    if record.openwebui and not record.openwebui.startswith("failed"):
        return Para(text=f"Open WebUI: {record.openwebui}.")
    why = (f"setting it failed ({record.openwebui.removeprefix('failed: ')})" if record.openwebui
           else f"the host names no Open WebUI ({code('openwebui_db')} or {code('openwebui_url')} in its profile)")
    return Para(text=f"Open WebUI's default model was not changed: {why}. Its users stay on the old default until "
                     f"an admin makes {name} the default, pins it and puts it first (Admin Settings > Settings > "
                     f"Models); setting {code('DEFAULT_MODELS')} in its environment alone does not, once it has "
                     "saved its settings.")


def timeline_section(record: RunRecord, charts: dict[str, Path]) -> Section:
    sec = Section(title="Cold-load timeline")
    if record.stages:
        sec.blocks.append(_stage_table(record))
        if (openwebui := openwebui_para(record)) is not None:
            sec.blocks.append(openwebui)
    else:
        sec.blocks.append(Para(text="No stage timings were recorded."))
    sec.blocks += _start_tables(record.serve)
    if "timeline" in charts:
        sec.blocks.append(Image(alt="Cold-load timeline", path=charts["timeline"]))
    return sec


def skipped_section(record: RunRecord) -> Section | None:
    skipped = [p for p in record.points if p.skipped or (p.requests and p.errors >= p.requests)]
    if not skipped:
        return None
    items = []
    for p in skipped:
        where = f"{p.kind} point: {p.prompt_tokens:,}-token prompt × {p.concurrency} concurrent"
        why = p.skip_reason or f"all {p.requests} requests failed"
        items.append(f"{where} — {why}")
    return Section(title="Points not measured", blocks=[Bullets(items=items)])
