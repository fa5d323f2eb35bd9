"""vLLM's ``SpecDecoding metrics:`` log lines, parsed: the fallback for draft acceptance when the
server's ``/metrics`` does not answer.

vLLM's engine logs one line per stats interval (about 10 s) while speculative decoding runs: its
wording, and a line as vLLM 0.32 logged it, is ``roost.vllm.wordings.SPEC_DECODING``'s (the mean
acceptance length, the accepted and drafted throughputs and token counts, the per-position acceptance
rates and the average acceptance in percent).

Each line covers its own interval only (the logger resets after printing). The line carries the
accepted and drafted token counts exactly; the number of drafts is not printed, so it is recovered
from the mean acceptance length (``1 + accepted / drafts``, printed to 2 decimals) and rounded;
per-position accepted counts are the printed rates (``accepted at position i / drafts``, 3
decimals) times that. :func:`aggregate` sums the intervals into one
:class:`~roost.vllm.server_metrics.SpecCounters`: exact for the token totals, to the printed precision
for drafts and positions.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from roost.vllm import wordings as W
from roost.vllm.server_metrics import SpecCounters

SPEC_LINE = W.SPEC_DECODING.pattern  # its wording by release: roost.vllm.wordings


class SpecLogLine(BaseModel):
    """One ``SpecDecoding metrics:`` line: one stats interval of the engine."""

    mean_acceptance_length: float
    accepted_tok_s: float
    drafted_tok_s: float
    accepted_tokens: int
    draft_tokens: int
    per_position: list[float]
    acceptance_pct: float | None

    @property
    def drafts(self) -> int:
        """Drafts in the interval: ``accepted / (mean acceptance length - 1)`` when anything was accepted;
        else ``draft tokens / positions`` (every draft proposes up to that many tokens)."""
        if self.accepted_tokens > 0 and self.mean_acceptance_length > 1:
            return round(self.accepted_tokens / (self.mean_acceptance_length - 1))
        if self.per_position:
            return round(self.draft_tokens / len(self.per_position))
        return 0


def parse_line(line: str) -> SpecLogLine | None:
    """The interval one log line reports, or None when ``line`` is not a SpecDecoding metrics line."""
    m = SPEC_LINE.search(line)
    if m is None:
        return None
    rates = [r.strip() for r in m.group(6).split(",") if r.strip()]
    try:
        per_position = [float(r) for r in rates]
    except ValueError:
        return None
    pct = float(m.group(7))
    return SpecLogLine(
        mean_acceptance_length=float(m.group(1)),
        accepted_tok_s=float(m.group(2)),
        drafted_tok_s=float(m.group(3)),
        accepted_tokens=int(m.group(4)),
        draft_tokens=int(m.group(5)),
        per_position=per_position,
        acceptance_pct=None if pct != pct else pct,  # NaN when nothing was drafted
    )


def parse_lines(text: str | Iterable[str]) -> list[SpecLogLine]:
    """Every SpecDecoding metrics line in a log (a string or its lines), in order."""
    lines = text.splitlines() if isinstance(text, str) else text
    return [p for p in (parse_line(line) for line in lines) if p is not None]


def aggregate(lines: Iterable[SpecLogLine]) -> SpecCounters | None:
    """The intervals summed into counters like ``/metrics``'s; None when there is no line."""
    items = list(lines)
    if not items:
        return None
    width = max(len(x.per_position) for x in items)
    per_pos = [0.0] * width
    drafts = 0
    for x in items:
        n = x.drafts
        drafts += n
        for i, rate in enumerate(x.per_position):
            if rate == rate:  # NaN-safe
                per_pos[i] += rate * n
    return SpecCounters(
        drafts=float(drafts),
        draft_tokens=float(sum(x.draft_tokens for x in items)),
        accepted_tokens=float(sum(x.accepted_tokens for x in items)),
        accepted_per_position=[float(round(v)) for v in per_pos],
    )


__all__ = ["SPEC_LINE", "SpecLogLine", "aggregate", "parse_line", "parse_lines"]
