"""How a run is named and judged where people look for it (the Prefect UI's run list, its tags and
its final state). Pure: a record and its comparison in, strings out.

- :func:`run_name`: ``land · nvfp4 · spark · 1a2b3c4 · 12-06 07:31:02 UTC`` (flow, profile, host, short
  commit, start in UTC to the second), so runs of different models, hosts and commits can be told apart
  in the run list, and two runs of the same one too; :func:`pinned_commit`: the commit a revision names
  outright (a full sha), known before the Hub is asked.
- :func:`run_verdict`: the run's verdict from the report stage's regression comparison
  (``roost.regress.RegressionReport``): a kind for the ``verdict:<kind>`` tag and a one-line message
  for the final state, e.g. ``regressed: Decode -46.0% vs runs A, B, C`` (the sign as ``fmt_change`` prints it).
"""

from __future__ import annotations

import datetime as dt
import re

from pydantic import BaseModel

from roost.catalogue import fmt_change
from roost.headline import headline_rows
from roost.records import RunRecord
from roost.regress import RegressionReport, verdict_scope

SEP = " · "
SHORT_COMMIT = 7
"""Characters of the commit a run name shows (git's short form)."""
RUN_TIME = "%m-%d %H:%M:%S UTC"
"""How a run name shows its start: month-day and time to the second, in UTC (the report's History
table is in UTC too); runs of one configuration sort by it within a year."""
_FULL_SHA = re.compile(r"[0-9a-f]{40}")

VERDICT_TAG = "verdict:"
MESSAGE_LIMIT = 300
"""Longest failure text a final-state message quotes (the report has all of it)."""

_KINDS = {"regressed": "regressed", "ok": "ok", "insufficient": "insufficient", "baseline": "baseline",
          "failed_run": "failed"}


def run_name(flow: str, profile: str = "", host: str = "", commit: str = "", started: dt.datetime | None = None) -> str:
    """``flow · profile · host · commit7 · MM-DD HH:MM:SS UTC``; the parts not known yet are left out.

    ``started``: when the run began (converted to UTC; a naive time is taken as UTC already).
    """
    when = ""
    if started is not None:
        utc = started.replace(tzinfo=dt.UTC) if started.tzinfo is None else started.astimezone(dt.UTC)
        when = utc.strftime(RUN_TIME)
    parts = [flow, profile, host, commit.strip()[:SHORT_COMMIT], when]
    return SEP.join(p.strip() for p in parts if p and p.strip())


def pinned_commit(revision: str) -> str:
    """The commit ``revision`` names when it is a full commit sha (lowercase or not); ``""`` for a branch,
    a tag or a short sha, which only the Hub resolves."""
    rev = revision.strip().lower()
    return rev if _FULL_SHA.fullmatch(rev) else ""


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


def _scope(record: RunRecord, comparison: RegressionReport) -> str:
    """``; not judged: peak aggregate output tok/s (2 earlier values; a verdict needs 3); bands: decode tok/s ±32%,
    TTFT ±12%``: the headline metrics the verdict did not judge (first: a long message is cut at its end), and
    those it judged with their bands."""
    named = [(r.label.split(" @ ")[0], r.compared_as if r.value is not None else None, "not measured")
             for r in headline_rows(record) if r.compared_as]
    scope = verdict_scope(comparison, named)
    bands = [f"{label} {band}" for label, _, band, _ in scope.judged]
    return (f"; not judged: {', '.join(scope.not_judged)}" if scope.not_judged else "") + \
        (f"; bands: {', '.join(bands)}" if bands else "")


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
        n, better = len(comparison.baseline_run_ids), len(comparison.improvements)
        said = f"no regression against the median of {n} earlier run{'s' if n != 1 else ''}" + \
            (f", {better} improved" if better else "")
        return RunVerdict(kind=kind, message=_one_line(f"ok: {said}{_scope(record, comparison)}"))
    if kind == "insufficient":
        n = len(comparison.baseline_run_ids)
        detail = f"{n} run{'s' if n != 1 else ''}; a verdict needs {comparison.config.min_runs}" if n \
            else comparison.message
        return RunVerdict(kind=kind, message=f"insufficient baseline ({detail}): nothing judged")
    if kind == "baseline":
        return RunVerdict(kind=kind, message="baseline: first run of this configuration")
    if kind == "failed":  # the comparison saw a failed run the record does not call failed
        return RunVerdict(kind=kind, message=_one_line(comparison.message))
    return RunVerdict(kind=kind, message=_one_line(f"{status}: {comparison.message}"))


def artifact_key(prefix: str, *parts: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and single dashes only."""
    raw = "-".join([prefix, *parts]).lower()
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", raw)).strip("-")
