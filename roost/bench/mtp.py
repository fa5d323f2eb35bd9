"""The MTP A/B: the same checkpoint, image and commit benchmarked with and without
``--speculative-config``, compared point by point. Pure: two lists of points in, a comparison out.

The recipe's finding this measures: MTP self-speculation bought +41 % decode at one user, and the
gain shrank under load (a busy batch has less idle compute to verify drafts with). So:

- at each **prompt length** (one user) the speed-up is the ratio of the median per-user decode
  rates, ``decode_tok_s`` with / without;
- at each **concurrency level** it is the ratio of the median aggregate output rates,
  ``output_tok_s`` with / without.

A point pairs with the other run's point of the same kind, asked-for prompt length and
concurrency; a point measured in only one run has no speed-up. The headline speed-up is the one at
the prompt-length point nearest ``REFERENCE_PROMPT_TOKENS`` (the point the headline decode rate is
read at). Draft acceptance comes from the server's counters (:class:`SpecCounters`, from
``/metrics`` or, failing that, from the engine's SpecDecoding log lines).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Literal

from roost.catalogue import REFERENCE_PROMPT_TOKENS
from roost.records import BenchPoint, MtpAB, PointSpeedup, SpecAcceptance
from roost.vllm.argv import VllmArgv
from roost.vllm.server_metrics import SpecCounters

SPECULATIVE_FLAG = "--speculative-config"


def acceptance(counters: SpecCounters, source: Literal["metrics", "log"]) -> SpecAcceptance:
    """The record of ``counters`` (a whole run's, from ``/metrics`` or the log lines)."""
    return SpecAcceptance(source=source, drafts=counters.drafts, draft_tokens=counters.draft_tokens,
                          accepted_tokens=counters.accepted_tokens, rate=counters.acceptance_rate,
                          mean_acceptance_length=counters.mean_acceptance_length,
                          per_position=counters.per_position_rates)


def prompt_points(ab: MtpAB) -> list[PointSpeedup]:
    """The prompt-length (one user) points of the A/B, shortest prompt first."""
    return sorted((p for p in ab.points if p.kind == "prompt_length"), key=lambda p: (p.prompt_tokens, p.concurrency))


def concurrency_points(ab: MtpAB) -> list[PointSpeedup]:
    """The concurrency points of the A/B, fewest users first."""
    return sorted((p for p in ab.points if p.kind == "concurrency"), key=lambda p: (p.concurrency, p.prompt_tokens))


def reference(ab: MtpAB) -> PointSpeedup | None:
    """The prompt-length point with a speed-up nearest ``REFERENCE_PROMPT_TOKENS`` (ties: the shorter)."""
    pts = [p for p in prompt_points(ab) if p.speedup is not None]
    if not pts:
        return None
    return min(pts, key=lambda p: (abs(p.prompt_tokens - REFERENCE_PROMPT_TOKENS), p.prompt_tokens))


def _target(p: BenchPoint) -> int:
    return p.prompt_tokens_target if p.prompt_tokens_target is not None else p.prompt_tokens


def _key(p: BenchPoint) -> tuple[str, int, int]:
    return (p.kind, _target(p), p.concurrency)


def _rate(p: BenchPoint | None) -> float | None:
    if p is None or not p.measured:
        return None
    v = p.decode_tok_s.median if p.kind == "prompt_length" else p.output_tok_s.median
    return float(v) if v is not None and math.isfinite(v) else None


def _acceptance(p: BenchPoint | None) -> float | None:
    if p is None:
        return None
    drafted = p.metrics_delta.get("spec_decode_num_draft_tokens")
    if not drafted:
        return None
    return p.metrics_delta.get("spec_decode_num_accepted_tokens", 0.0) / drafted


def compare(with_spec: Sequence[BenchPoint], without_spec: Sequence[BenchPoint]) -> list[PointSpeedup]:
    """The points of both runs paired by (kind, asked-for prompt length, concurrency), in the
    speculative run's order, then any point only the baseline measured. The first of two points
    with the same key counts."""
    a: dict[tuple[str, int, int], BenchPoint] = {}
    b: dict[tuple[str, int, int], BenchPoint] = {}
    for p in with_spec:
        a.setdefault(_key(p), p)
    for p in without_spec:
        b.setdefault(_key(p), p)
    keys = list(a) + [k for k in b if k not in a]
    out = []
    for kind, prompt, conc in keys:
        pa, pb = a.get((kind, prompt, conc)), b.get((kind, prompt, conc))
        out.append(PointSpeedup(
            kind="prompt_length" if kind == "prompt_length" else "concurrency",
            prompt_tokens=prompt, concurrency=conc,
            metric="decode_tok_s" if kind == "prompt_length" else "output_tok_s",
            with_spec=_rate(pa), without_spec=_rate(pb), acceptance_rate=_acceptance(pa),
        ))
    return out


# --- the arguments of the run without speculative decoding ----------------------------------------


def speculative_config(vllm_args: Sequence[str]) -> str | None:
    """The ``--speculative-config`` value vLLM takes from ``vllm_args`` (any spelling vLLM reads:
    ``--speculative_config``, ``=``, ``-sc``, ``.key`` arguments; the last one wins, as with vLLM),
    or None when the flag is absent or has no value (:class:`~roost.vllm.argv.VllmArgv`)."""
    return VllmArgv(vllm_args).get(SPECULATIVE_FLAG) or None


def without_speculative(vllm_args: Sequence[str]) -> list[str]:
    """``vllm_args`` with every ``--speculative-config`` (any spelling, and its value) removed, the rest in order."""
    return list(VllmArgv(vllm_args).remove(SPECULATIVE_FLAG))


def speculative_method(config: str) -> str:
    """The ``method`` of a --speculative-config JSON value ("mtp", "ngram"...), "" when it does not say."""
    try:
        data = json.loads(config)
    except ValueError:
        return ""
    method = data.get("method") if isinstance(data, dict) else None
    return method if isinstance(method, str) else ""


def describe(ab: MtpAB) -> str:
    """One line: ``speculative decoding (mtp) vs none: 1.41x decode at a 2,048-token prompt; draft acceptance 78.0%``."""
    method = speculative_method(ab.speculative_config) or "unnamed method"
    ref = reference(ab)
    text = f"speculative decoding ({method}) vs none: "
    if ref is not None and ref.speedup is not None:
        text += f"{ref.speedup:.2f}x decode at a {ref.prompt_tokens:,}-token prompt"
    else:
        text += "no decode rate measured by both runs"
    if ab.acceptance is not None and ab.acceptance.rate is not None:
        text += f"; draft acceptance {100 * ab.acceptance.rate:.1f}%"
    return text


__all__ = [
    "acceptance",
    "compare",
    "concurrency_points",
    "describe",
    "prompt_points",
    "reference",
    "speculative_config",
    "speculative_method",
    "without_speculative",
]
