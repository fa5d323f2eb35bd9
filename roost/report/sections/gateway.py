"""The report's "Through the gateway" section: a kept server's sweep sent to vLLM directly and through
the metering gateway with the run's own key, side by side per point (``roost.bench.gateway_hop``), and
whether the gateway metered what the benchmark counted."""

from __future__ import annotations

from roost import catalogue as C
from roost.bench.gateway_hop import HopPoint, hop_points, summarize
from roost.records import GatewayPass, RunRecord
from roost.report.blocks import Para, Section, Table, code

_TTFT = C.Column(metric=C.TTFT, statistic="median", unit="ms")
_ADDED = C.Column(metric=C.GATEWAY_ADDED_TTFT)
_ADDED_P99 = C.Column(metric=C.GATEWAY_ADDED_TTFT_P99)
_RATE = C.Column(metric=C.OUTPUT_THROUGHPUT)
_RATIO = C.Column(metric=C.GATEWAY_THROUGHPUT_RATIO)


def _row(h: HopPoint) -> list[str]:
    return [h.label, _TTFT.cell(h.direct_ttft_p50_s), _TTFT.cell(h.gateway_ttft_p50_s), _ADDED.cell(h.added_ttft_ms),
            _ADDED_P99.cell(h.added_ttft_p99_ms), _RATE.cell(h.direct_tok_s), _RATE.cell(h.gateway_tok_s),
            _RATIO.cell(h.throughput_ratio)]


def _metering(g: GatewayPass) -> Para:
    if g.counted is None:
        return Para(text="Nothing was sent through the gateway.")
    c = g.counted
    sent = (f"The benchmark sent {c.requests:,} requests through it with key {code(g.key_name)} (kind app, revoked "
            f"at the run's end): {c.prompt_tokens:,} prompt and {c.completion_tokens:,} completion tokens by its own count")
    if g.metered is None:
        return Para(text=sent + "; the gateway's usage could not be read.")
    if g.metered == c:
        return Para(text=sent + "; the gateway metered exactly that.")
    m = g.metered
    return Para(text=sent + f"; **the gateway metered {m.requests:,} requests, {m.prompt_tokens:,} prompt and "
                f"{m.completion_tokens:,} completion tokens**.")


def gateway_section(record: RunRecord) -> Section | None:
    """None for a run that kept no server (nothing fronted it)."""
    g = record.gateway
    if g is None:
        return None
    sec = Section(title="Through the gateway")
    if g.status == "skipped" and not g.points:
        sec.blocks.append(Para(text=f"Measured directly only: {g.note}."))
        return sec
    hops = hop_points(record.points, g.points)
    summary = summarize(hops)
    sec.blocks.append(Para(text=(
        f"The same sweep sent to vLLM directly and through the metering gateway at {code(g.url)}, one after the "
        f"other: {C.GATEWAY_ADDED_TTFT.label} {_ADDED.metric.format(summary.added_ttft_ms_median)} (median over "
        f"{summary.points} points, at most {_ADDED.metric.format(summary.added_ttft_ms_max)}); lowest "
        f"{C.GATEWAY_THROUGHPUT_RATIO.label} {_RATIO.metric.format(summary.throughput_ratio_min)}. A difference "
        "within the direct run's own spread is noise, not the gateway.")))
    if hops:
        sec.blocks.append(Table(
            headers=["Point", f"TTFT p50 direct ({_TTFT.shown_unit})", "through the gateway",
                     f"Added p50 ({_ADDED.shown_unit})", f"Added p99 ({_ADDED_P99.shown_unit})",
                     "Output tok/s direct", "through the gateway", "Ratio"],
            rows=[_row(h) for h in hops], align_right=[1, 2, 3, 4, 5, 6, 7]))
    else:
        sec.blocks.append(Para(text="No point was measured both ways."))
    if g.status == "failed" or g.note:
        sec.blocks.append(Para(text=f"{'The sweep through the gateway failed: ' if g.status == 'failed' else ''}{g.note}."))
    sec.blocks.append(_metering(g))
    return sec
