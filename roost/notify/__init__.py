# ruff: noqa: RUF002  (typographic characters in user-facing text are deliberate)
"""Slack messages about a run: when to send one and what it says. Pure: no network, no secrets.

Three kinds of message:

- ``regression``: at least one metric regressed against the baseline, or an evaluation's accuracy fell
  significantly on the same questions (McNemar); lists every one before -> after (packed into as many
  sections as Block Kit allows), the categories that moved, and mentions the configured people.
- ``failure``: the run failed; names the stage, the failure class and its remediation.
- ``run``: a routine report of the headline numbers (sent only with ``notify_on`` ``every_run``).

The payload is Slack Block Kit (``blocks``) plus a plain ``text`` fallback for notifications.
Sending lives in ``tasks/notify.py``; the outcome of a send is a ``roost.records.NotifyResult``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel

from roost import catalogue as C
from roost.catalogue import fmt_accuracy, fmt_change
from roost.headline import headline, headline_rows
from roost.records import EvalRecord, NotifyKind, RunRecord
from roost.regress import MetricComparison, RegressionReport

NotifyOn = Literal["regression", "failure", "every_run"]

MAX_LISTED = 10
"""Improved metrics listed in one message; the rest are counted. Regressions are all listed."""

MAX_BLOCKS = 50
"""Slack's limit on blocks in one message."""

MAX_SECTION_TEXT = 3000
"""Slack's limit on a section's text."""

MAX_FIELDS = 10
"""Slack's limit on a section's fields (each at most ``MAX_FIELD_TEXT`` characters)."""

MAX_FIELD_TEXT = 2000


class SlackMessage(BaseModel):
    """A ``chat.postMessage`` / incoming-webhook payload."""

    text: str
    blocks: list[dict[str, Any]]


def message_kind(record: RunRecord, comparison: RegressionReport | None) -> NotifyKind:
    """What kind of message this run calls for."""
    if record.status != "completed":
        return "failure"
    if (comparison is not None and comparison.has_regressions) or record.accuracy_regressions:
        return "regression"
    return "run"


def should_notify(kind: NotifyKind, notify_on: Iterable[str]) -> bool:
    """``every_run`` sends every kind; otherwise only the kinds listed."""
    wanted = set(notify_on)
    return "every_run" in wanted or kind in wanted


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def format_mention(who: str) -> str:
    """``U123``/``W123`` -> ``<@U123>``, ``here``/``channel`` -> ``<!here>``, ``S123`` -> a user group."""
    w = who.strip()
    if not w or w.startswith("<"):
        return w
    bare = w.lstrip("@!")
    if bare in ("here", "channel", "everyone"):
        return f"<!{bare}>"
    if bare.startswith("subteam^"):
        return f"<!{bare}>"
    if bare[:1] == "S" and bare[1:].isalnum() and bare.isupper():
        return f"<!subteam^{bare}>"
    if bare[:1] in ("U", "W") and bare.isalnum() and bare.isupper():
        return f"<@{bare}>"
    return f"@{escape(bare)}"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:MAX_SECTION_TEXT]}}


def packed_sections(title: str, lines: list[str], max_blocks: int) -> list[dict[str, Any]]:
    """``*title*`` then every line, packed into at most ``max_blocks`` sections of at most
    ``MAX_SECTION_TEXT`` characters; lines that do not fit are counted in a last ``… and N more``."""
    max_blocks = max(1, max_blocks)
    sections: list[str] = []
    text = f"*{title}*"
    for i, line in enumerate(lines):
        line = line[: MAX_SECTION_TEXT - 100]
        last = len(sections) + 1 == max_blocks
        room = MAX_SECTION_TEXT - (40 if last else 0)  # the last section keeps room for "… and N more"
        if len(text) + 1 + len(line) <= room:
            text += "\n" + line
        elif not last:
            sections.append(text)
            text = line
        else:
            text += f"\n… and {len(lines) - i} more"
            break
    sections.append(text)
    return [_section(t) for t in sections]


def _who(record: RunRecord) -> str:
    return f"{record.meta.profile} on {record.meta.host}"


def headline_fields(record: RunRecord) -> list[tuple[str, str]]:
    """(label, value) pairs of the headline numbers a message shows: the rows every output shows
    (``roost.headline.headline_rows``) that have a value; failed requests only when some failed."""
    return [(r.label[:1].upper() + r.label[1:], r.text) for r in headline_rows(record)
            if r.value is not None and not (r.metric.name == "error_requests" and not r.value)]


def change_line(c: MetricComparison) -> str:
    """``• decode tok/s @ 2,048-token prompt: 12.6 → 11.0 tok/s (−12.7%)``."""
    before, after = c.metric.format(c.baseline), c.metric.format(c.current)
    return f"• {escape(c.metric.label)}: {before} → {after} ({fmt_change(c.change_pct)})"


def ranked(record: RunRecord, items: list[MetricComparison]) -> list[MetricComparison]:
    """Headline metrics first (decode and TTFT at the reference prompt, peak output), then the largest moves."""
    ref = headline(record).reference_prompt_tokens
    first = [f"decode_tok_s@prompt={ref}", f"ttft_s@prompt={ref}", "peak_output_tok_s"]

    def key(c: MetricComparison) -> tuple[int, float]:
        rank = first.index(c.metric.name) if c.metric.name in first else len(first)
        return rank, -abs(c.change_pct or 0.0)

    return sorted(items, key=key)


def insufficient_text(comparison: RegressionReport) -> str:
    """``_Insufficient baseline: 2 earlier comparable runs (…); a verdict needs 3. Nothing was judged._``"""
    n = len(comparison.baseline_run_ids)
    runs = f"{n} earlier comparable run{'s' if n != 1 else ''}"
    ids = ", ".join(f"`{escape(r)}`" for r in comparison.baseline_run_ids)
    return (f"_Insufficient baseline: {runs} ({ids}); a verdict needs {comparison.config.min_runs}. "
            "Nothing was judged regressed or improved._")


def _listing(title: str, items: list[MetricComparison]) -> str:
    lines = [change_line(c) for c in items[:MAX_LISTED]]
    if len(items) > MAX_LISTED:
        lines.append(f"… and {len(items) - MAX_LISTED} more")
    return f"*{title}*\n" + "\n".join(lines)


def accuracy_line(e: EvalRecord, *, markup: bool = True) -> str:
    """``GSM8K: 66.0% (95% CI 52.2–77.6%) on 50; −12.0 points vs run R (lost 8, gained 2; McNemar p = 0.03);
    moved: algebra lost 5, geometry lost 3``."""
    from roost.eval.suites import TASKS

    title = TASKS[e.task].title if e.task in TASKS else e.task
    s = e.summary
    line = f"{title}: {fmt_accuracy(s.accuracy, s.ci_low, s.ci_high)} on {s.n:,}"
    if e.status != "completed":
        line += f" (stopped: {e.error[:120]})"
    c = e.comparison
    if c is not None:
        line += f"; {c.delta_points:+.1f} points vs run {e.baseline_run_id} (lost {c.lost}, gained {c.gained}; " \
                f"McNemar p = {c.p_value:.2g}{', significant' if c.significant else ''})"
        moved = [f"{m.category} lost {m.lost}, gained {m.gained}" for m in c.categories if m.category][:5]
        if c.significant and moved:
            line += f"; moved: {'; '.join(moved)}"
    return escape(line) if markup else line


def _regression_text(title: str, record: RunRecord, comparison: RegressionReport | None) -> str:
    """``roost regression: …: decode tok/s @ … 12.6 tok/s → 10.8 tok/s (−14.4%) and 2 more``: the first
    accuracy regression, else the first speed regression, and how many more there are."""
    speed = ranked(record, comparison.regressions) if comparison is not None else []
    worse = record.accuracy_regressions
    if worse:
        text = f"{title}: {accuracy_line(worse[0], markup=False)}"
    else:
        first = speed[0]
        text = (f"{title}: {first.metric.label} {first.metric.format(first.baseline)} → "
                f"{first.metric.format(first.current)} ({fmt_change(first.change_pct)})")
    more = len(speed) + len(worse) - 1
    return text + (f" and {more} more" if more > 0 else "")


def _title_and_text(kind: NotifyKind, record: RunRecord, comparison: RegressionReport | None) -> tuple[str, str]:
    """The header of the message and its plain-text fallback (what a notification shows)."""
    who = _who(record)
    if kind == "failure":
        title = f"roost run failed: {who}"
        return title, f"{title} at {record.failed_stage or 'unknown stage'} ({record.failure_class or 'failure'})"
    if kind == "regression":
        title = f"roost regression: {who}"
        return title, _regression_text(title, record, comparison)
    title = f"roost run: {who}"
    h = headline(record)
    text = f"{title}: decode {C.DECODE.format(h.decode_tok_s)}, peak {C.PEAK_OUTPUT.format(h.peak_output_tok_s)}"
    if comparison is not None and comparison.insufficient:
        text += " (insufficient baseline: no verdict)"
    return title, text


def _failure_block(record: RunRecord) -> dict[str, Any]:
    """Where the run failed, its class, what happened and what to change."""
    lines = [
        f"*Stage:* {escape(record.failed_stage or 'unknown')}",
        f"*Failure class:* `{escape(record.failure_class or 'unknown')}`",
    ]
    if record.failure_message:
        lines.append(f"*What happened:* {escape(record.failure_message)}")
    if record.remediation:
        lines.append(f"*Remediation:* {escape(record.remediation)}")
    return _section("\n".join(lines))


def _body(kind: NotifyKind, record: RunRecord) -> list[dict[str, Any]]:
    """The failure (when the run failed), the headline numbers, and the evaluations' accuracy."""
    blocks = [_failure_block(record)] if kind == "failure" else []
    fields = headline_fields(record)
    if fields:
        blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{escape(k)}*\n{escape(v)}"[:MAX_FIELD_TEXT]}
                                                     for k, v in fields[:MAX_FIELDS]]})
    if record.evals and kind != "failure":
        blocks.append(_section("\n".join(["*Accuracy*", *(accuracy_line(e) for e in record.evals)])[:MAX_SECTION_TEXT]))
    return blocks


def _tail(kind: NotifyKind, record: RunRecord, comparison: RegressionReport | None, run_url: str,
          report_location: str) -> list[dict[str, Any]]:
    """What closes the message: improvements and baseline notes, the links, and the run's identity."""
    tail: list[dict[str, Any]] = []
    if comparison is not None and kind != "failure":
        if comparison.improvements:
            tail.append(_section(_listing("Improved", ranked(record, comparison.improvements))))
        if comparison.first_run:
            tail.append(_section("_First run of this configuration: it establishes the baseline._"))
        if comparison.insufficient:
            tail.append(_section(insufficient_text(comparison)))
    links = []
    if run_url:
        links.append(f"<{run_url}|Prefect flow run>")
    if report_location:
        links.append(f"report: `{escape(report_location)}`")
    if links:
        tail.append(_section(" · ".join(links)))
    meta = record.meta
    context = f"`{escape(meta.repo_id)}` @ `{meta.commit[:12]}` · run `{meta.run_id}`"
    if meta.vllm_version:
        context += f" · vLLM {escape(meta.vllm_version)}"
    if meta.image_digest:
        context += f" · image `{escape(meta.image_digest[:19])}`"
    tail.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context[:MAX_SECTION_TEXT]}]})
    return tail


def _regressed(record: RunRecord, comparison: RegressionReport, max_blocks: int) -> list[dict[str, Any]]:
    """Every speed regression, before and after, packed into at most ``max_blocks`` sections."""
    n = len(comparison.baseline_run_ids)
    heading = (f"Regressed: {len(comparison.regressions)} (vs the median of {n} earlier comparable "
               f"run{'s' if n != 1 else ''})")
    lines = [change_line(c) for c in ranked(record, comparison.regressions)]
    return packed_sections(heading, lines, max_blocks)


def build_message(
    record: RunRecord,
    comparison: RegressionReport | None,
    *,
    run_url: str = "",
    report_location: str = "",
    mentions: Iterable[str] = (),
) -> SlackMessage:
    """The Block Kit message for a run (failure, regression or routine report): a header, the people
    to tell (not for a routine report), the body, every regression, then the tail (links, identity)."""
    kind = message_kind(record, comparison)
    tags = " ".join(m for m in (format_mention(x) for x in mentions) if m) if kind != "run" else ""
    title, text = _title_and_text(kind, record, comparison)
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": True}}]
    if tags:
        text = f"{tags} {text}"
        blocks.append(_section(tags))
    blocks += _body(kind, record)
    tail = _tail(kind, record, comparison, run_url, report_location)
    if comparison is not None and kind != "failure" and comparison.regressions:
        blocks += _regressed(record, comparison, MAX_BLOCKS - len(blocks) - len(tail))
    return SlackMessage(text=text, blocks=blocks + tail)
