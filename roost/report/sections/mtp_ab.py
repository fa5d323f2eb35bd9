"""The report's MTP A/B section (``roost.bench.mtp``): each point's rate with and without
--speculative-config on the same image and commit, the speed-up, and the draft acceptance."""

from __future__ import annotations

from roost import catalogue as C
from roost.bench import mtp
from roost.records import MtpAB, PointSpeedup
from roost.report.blocks import Para, Section, Table, code

_RATE = C.Column(metric=C.DECODE)
_SPEEDUP = C.Column(metric=C.MTP_SPEEDUP)
_ACCEPTANCE = C.Column(metric=C.SPEC_ACCEPTANCE)


def _pct(rate: float | None) -> str:
    """A fraction (0..1) as the acceptance column prints it: ``78.0%``."""
    return _ACCEPTANCE.cell(None if rate is None else 100.0 * rate)


def _rows(points: list[PointSpeedup], first: str) -> list[list[str]]:
    return [[f"{p.prompt_tokens:,}" if first == "prompt" else str(p.concurrency), _RATE.cell(p.with_spec),
             _RATE.cell(p.without_spec), _SPEEDUP.cell(p.speedup), _pct(p.acceptance_rate)] for p in points]


def _tables(ab: MtpAB) -> list[Table]:
    prompts, levels = mtp.prompt_points(ab), mtp.concurrency_points(ab)
    tail = [_SPEEDUP.header, _ACCEPTANCE.header]
    tables = []
    if prompts:
        tables.append(Table(headers=["Prompt tokens (1 user)", f"{C.DECODE.title} with", f"{C.DECODE.title} without",
                                     *tail], rows=_rows(prompts, "prompt"), align_right=[0, 1, 2, 3, 4]))
    if levels:
        rate = C.OUTPUT_THROUGHPUT.title
        tables.append(Table(headers=["Concurrency", f"{rate} with", f"{rate} without", *tail],
                            rows=_rows(levels, "concurrency"), align_right=[0, 1, 2, 3, 4]))
    return tables


def _acceptance(ab: MtpAB) -> Para:
    acc = ab.acceptance
    if acc is None:
        return Para(text="No draft acceptance: the server's /metrics had no vllm:spec_decode_* counters "
                         "and its log no SpecDecoding lines.")
    source = "/metrics" if acc.source == "metrics" else "vLLM's SpecDecoding log lines"
    text = (f"**{C.SPEC_ACCEPTANCE.title}:** "
            f"{_pct(acc.rate)} of {acc.draft_tokens:,.0f} draft tokens ({acc.drafts:,.0f} drafts, "
            f"mean acceptance length {C.fmt_value(acc.mean_acceptance_length)}), from {source} over the speculative "
            "server's life (warm-up and benchmark).")
    if acc.per_position:
        text += " Per draft position: " + ", ".join(f"{i + 1}: {_pct(r)}" for i, r in enumerate(acc.per_position)) + "."
    return Para(text=text)


def mtp_ab_section(ab: MtpAB | None) -> Section | None:
    """The A/B of a run that served with --speculative-config; None for a run that did not."""
    if ab is None:
        return None
    sec = Section(title="MTP A/B")
    text = (f"Served with {code('--speculative-config ' + ab.speculative_config)}; the baseline is the same image and "
            f"commit restarted without it")
    if ab.baseline_start_to_healthy_s is not None:
        text += f" (cold start {C.START_TO_HEALTHY.format(ab.baseline_start_to_healthy_s)})"
    sec.blocks.append(Para(text=text + f". {C.MTP_SPEEDUP.label}: {C.MTP_SPEEDUP.definition}."))
    tables = _tables(ab)
    sec.blocks += tables
    if not tables:
        sec.blocks.append(Para(text="No point was measured by both runs."))
    sec.blocks.append(_acceptance(ab))
    return sec
