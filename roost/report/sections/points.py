# ruff: noqa: RUF001  (typographic characters in user-facing text are deliberate)
"""The report's benchmark tables: decode and TTFT against prompt length, throughput against concurrency.

Each table is a list of columns, each with the header and the cell of one point: the measured
columns are the catalogue's (``roost.catalogue.Column``: a metric and a statistic, headed and
printed as every table prints them), so the headers and the numbers cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from roost import catalogue as C
from roost.bench.knee import knee_of
from roost.headline import concurrency_points, max_num_seqs, pct_of_ceiling, point_name, prompt_points
from roost.records import BenchPoint, RunRecord
from roost.report.blocks import Image, Para, Section, Table, code

Cell = Callable[[BenchPoint], str]


def _point_range(p: BenchPoint) -> str:
    """Decode min-max over the requests with a measured decode; "—" when fewer than two had one (the
    range of one value says nothing; :func:`_dash_note` says why)."""
    d = p.decode_tok_s
    if d.min is None or d.max is None or (d.count is not None and d.count < 2):
        return "—"
    return f"{C.DECODE_RANGE.cell(d.min)}–{C.DECODE_RANGE.cell(d.max)}"


def _itl(p: BenchPoint) -> str:
    """The median ITL in ms; "—" when nothing was measured (no sample, or a 0 that only says chunks
    arrived together)."""
    d = p.itl_s
    measured = d.median is not None and d.count and d.median > 0
    return C.ITL_MEDIAN.cell(d.median if measured else None)


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


def _measured(column: C.Column) -> tuple[str, Cell]:
    return column.header, column.cell_of


def _table(pts: list[BenchPoint], columns: list[tuple[str, Cell]]) -> Table:
    """One row per point, every column a number (right-aligned)."""
    return Table(headers=[header for header, _ in columns], rows=[[cell(p) for _, cell in columns] for p in pts],
                 align_right=list(range(len(columns))))


def _dash_note(pts: list[BenchPoint]) -> Para | None:
    """Why a decode min-max or an ITL reads "—" (None when none does)."""
    ranges = [f"{point_name(p)}: {p.decode_tok_s.count or 0} of {p.requests}" for p in pts
              if _point_range(p) == "—"]
    itl = [point_name(p) for p in pts if _itl(p) == "—"]
    parts = []
    if ranges:
        parts.append(f"{C.DECODE_RANGE.header} is “—” where fewer than two requests had a measured decode ("
                     + "; ".join(ranges) + "): a range needs two values.")
    if itl:
        parts.append(f"{C.ITL_MEDIAN.metric.label} is “—” where no request had a measured decode ("
                     + ", ".join(itl) + ").")
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
                           if p.queue_time_s is not None
                           else f"{p.concurrency} ({C.Column(metric=C.PEAK_WAITING).cell(p.peak_waiting)} waiting)"
                           for p in waited)
        parts.append(f"Requests queued at {levels} concurrent: those users waited for a running slot instead "
                     "of decoding.")
    elif seen:
        parts.append(f"No request queued at any level (mean queue time under {C.QUEUE_TIME.format(C.QUEUED_S)}, "
                     "peak waiting 0).")
    return Para(text=" ".join(parts)) if parts else None


def _prompt_columns(record: RunRecord) -> list[tuple[str, Cell]]:
    ceiling = record.decode_ceiling_tok_s
    return [
        ("Prompt tokens", lambda p: f"{p.prompt_tokens:,}"),
        ("Output tokens", lambda p: f"{p.output_tokens:,}"),
        ("OK/requests", _ok),
        _measured(C.DECODE_MEDIAN),
        (C.DECODE_RANGE.header, _point_range),
        (C.PCT_OF_CEILING.header, lambda p: C.PCT_OF_CEILING.cell(pct_of_ceiling(p.decode_tok_s.median, ceiling))),
        _measured(C.TTFT_MEDIAN),
        _measured(C.TTFT_P90),
        (C.ITL_MEDIAN.header, _itl),
        _measured(C.PREFILL_MEDIAN),
    ]


PROMPT_CHARTS = (("decode_vs_prompt", "Decode tok/s vs prompt length, with the roofline ceiling"),
                 ("ttft_vs_prompt", "TTFT vs prompt length (log axis)"),
                 ("prefill_vs_prompt", "Prefill tok/s (prompt tokens / TTFT) vs prompt length"))


def prompt_section(record: RunRecord, charts: dict[str, Path]) -> Section:
    sec = Section(title="Decode and TTFT vs prompt length")
    pts = prompt_points(record)
    if not pts:
        sec.blocks.append(Para(text="No prompt-length points were measured in this run."))
    else:
        sec.blocks.append(_table(pts, _prompt_columns(record)))
        for note in (_unmeasurable_note(pts), _dash_note(pts)):
            if note is not None:
                sec.blocks.append(note)
    for key, alt in PROMPT_CHARTS:
        if key in charts:
            sec.blocks.append(Image(alt=alt, path=charts[key]))
    return sec


CONCURRENCY_COLUMNS: list[tuple[str, Cell]] = [
    ("Concurrency", lambda p: str(p.concurrency)),
    ("Prompt tokens", lambda p: f"{p.prompt_tokens:,}"),
    ("OK/requests", _ok),
    *(_measured(c) for c in (C.OUTPUT_MEDIAN, C.DECODE_PER_REQUEST, C.TTFT_MEDIAN, C.TTFT_P99, C.REQUEST_RATE_MEDIAN,
                             *C.SERVER_COLUMNS)),
]


def concurrency_section(record: RunRecord, charts: dict[str, Path]) -> Section:
    sec = Section(title="Throughput vs concurrency")
    pts = concurrency_points(record)
    if not pts:
        sec.blocks.append(Para(text="No concurrency points were measured in this run."))
        return sec
    sec.blocks.append(_table(pts, CONCURRENCY_COLUMNS))
    for note in (_unmeasurable_note(pts), _queueing_note(record, pts)):
        if note is not None:
            sec.blocks.append(note)
    knee = knee_of(pts)
    if knee is not None:
        peak, rate = C.PEAK_OUTPUT.format(knee.peak_output_tok_s), C.OUTPUT_THROUGHPUT.format(knee.output_tok_s)
        sec.blocks.append(Para(text=f"Peak {peak} at {knee.peak_concurrency} concurrent; the knee "
                                    f"({C.KNEE.definition}) is {knee.concurrency} concurrent ({rate})."))
    if "throughput_vs_concurrency" in charts:
        sec.blocks.append(Image(alt="Aggregate output tok/s vs concurrency: the knee, queueing and the server's cap",
                                path=charts["throughput_vs_concurrency"]))
    return sec
