"""How a run is named and judged where people look for it (the Prefect UI's run list, its tags and
its final state). Pure: a record and its comparison in, strings out.

- :func:`run_name`: ``land · nvfp4 · spark · 1a2b3c4`` (flow, profile, host, short commit), so runs
  of different models, hosts and commits can be told apart in the run list.
- :func:`run_verdict`: the run's verdict from the report stage's regression comparison
  (``roost.regress.RegressionReport``): a kind for the ``verdict:<kind>`` tag and a one-line message
  for the final state, e.g. ``regressed: Decode -46.0% vs runs A, B, C`` (the sign as ``fmt_change`` prints it).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from roost.catalogue import fmt_change
from roost.records import RunRecord
from roost.regress import RegressionReport

SEP = " · "
SHORT_COMMIT = 7
"""Characters of the commit a run name shows (git's short form)."""

VERDICT_TAG = "verdict:"
MESSAGE_LIMIT = 300
"""Longest failure text a final-state message quotes (the report has all of it)."""

_KINDS = {"regressed": "regressed", "ok": "ok", "insufficient": "insufficient", "baseline": "baseline",
          "failed_run": "failed"}


def run_name(flow: str, profile: str = "", host: str = "", commit: str = "") -> str:
    """``flow · profile · host · commit7``; the parts not known yet are left out."""
    parts = [flow, profile, host, commit[:SHORT_COMMIT]]
    return SEP.join(p.strip() for p in parts if p and p.strip())


class RunVerdict(BaseModel):
    """What a finished run came to: ``kind`` names the tag, ``message`` is the final state's."""

    kind: str
    message: str

    @property
    def tag(self) -> str:
        return VERDICT_TAG + self.kind


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 1] + "…"


def _runs(ids: list[str]) -> str:
    return f"runs {', '.join(ids)}" if ids else "the baseline"


def run_verdict(record: RunRecord, comparison: RegressionReport | None) -> RunVerdict:
    """The verdict of ``record`` given its comparison with the baseline (None: not compared).

    A failed run is ``failed`` whatever the comparison says; a status this function does not know
    (a newer ``roost.regress``) becomes its own kind with the comparison's message.
    """
    if record.status != "completed":
        stage = record.failed_stage or "setup"
        why = _one_line(record.failure_message) if record.failure_message else record.status
        return RunVerdict(kind="failed", message=f"failed at {stage}: {why}")
    worse = record.accuracy_regressions
    if worse:
        speed = ", ".join(f"{c.metric.label} {fmt_change(c.change_pct)}" for c in comparison.regressions) \
            if comparison is not None else ""
        acc = ", ".join(f"{e.task} accuracy {e.comparison.delta_points:+.1f} points (McNemar p = "
                        f"{e.comparison.p_value:.2g})" for e in worse if e.comparison is not None)
        return RunVerdict(kind="regressed", message=_one_line(f"regressed: {', '.join(x for x in (acc, speed) if x)}"))
    if comparison is None:
        return RunVerdict(kind="unknown", message="completed; not compared with a baseline")
    status = str(comparison.status)
    kind = _KINDS.get(status) or re.sub(r"[^a-z0-9_-]+", "-", status.lower()).strip("-") or "unknown"
    if kind == "regressed":
        moves = ", ".join(f"{c.metric.label} {fmt_change(c.change_pct)}" for c in comparison.regressions)
        return RunVerdict(kind=kind, message=f"regressed: {moves or comparison.message} vs "
                                             f"{_runs(comparison.baseline_run_ids)}")
    if kind == "ok":
        return RunVerdict(kind=kind, message=_one_line(f"ok: {comparison.message}"))
    if kind == "insufficient":
        n = len(comparison.baseline_run_ids)
        detail = f"{n} run{'s' if n != 1 else ''}" if n else comparison.message
        return RunVerdict(kind=kind, message=f"insufficient baseline ({detail})")
    if kind == "baseline":
        return RunVerdict(kind=kind, message="baseline: first run of this configuration")
    if kind == "failed":  # the comparison saw a failed run the record does not call failed
        return RunVerdict(kind=kind, message=_one_line(comparison.message))
    return RunVerdict(kind=kind, message=_one_line(f"{status}: {comparison.message}"))


def artifact_key(prefix: str, *parts: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and single dashes only."""
    raw = "-".join([prefix, *parts]).lower()
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", raw)).strip("-")
