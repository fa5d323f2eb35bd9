"""One rendering of each number (issue 39): the decode ceiling, the KV cache size and the concurrency
print through their catalogue metric (``roost.catalogue``) in the report's Markdown, the audit flow's
artifact, the headline and the plan's summary (``roost plan`` / ``roost run`` on the terminal)."""

from __future__ import annotations

import re
from pathlib import Path

from support.samples import spark_record

from flows.audit import _result, markdown
from roost import catalogue as C
from roost.headline import headline_rows
from roost.hosts import get_host
from roost.plan.preflight import plan_checkpoint
from roost.plan.report import audit_for_host
from roost.profiles import LOCAL
from roost.records import AuditSnapshot, PlanSnapshot
from roost.report.document import build_document
from roost.report.markdown import render_markdown

CEILING = 3464.5
"""A ceiling a fixed-decimals rendering prints as 3464.5 and the metric's as a whole number."""


def _numbers_near(text: str, word: str) -> set[str]:
    """Every number printed right before ``word`` (``3,464 tok/s``, ``3464.5 tok/s``)."""
    return set(re.findall(rf"(\d[\d,.]*) {re.escape(word)}", text))


def test_the_decode_ceiling_renders_identically_everywhere(tmp_path: Path, tiny_model: Path) -> None:
    shown = C.DECODE_CEILING.format(CEILING)
    record = spark_record()
    record.decode_ceiling_tok_s = CEILING
    record.audit = AuditSnapshot.model_validate(record.audit.model_dump(mode="json") | {"decode_ceiling_tok_s": CEILING})
    record.plan = PlanSnapshot.model_validate(record.plan.model_dump(mode="json") | {"decode_ceiling_tok_s": CEILING})
    report_md = render_markdown(build_document(record, [], None, {}), tmp_path)
    (headline,) = [r.text for r in headline_rows(record) if r.metric.name == C.DECODE_CEILING.name]

    host = get_host("cpu")
    audit = audit_for_host(tiny_model, host, inputs=LOCAL.plan_inputs()).model_copy(
        update={"decode_ceiling_tok_s": CEILING})
    plan = plan_checkpoint(audit, host, LOCAL.plan_inputs())
    artifact = markdown(_result("local", LOCAL.repo_id, "cpu", "main", "0" * 40, None, audit, plan), audit, plan,
                        audit.findings, "")

    assert headline == shown
    for text in (report_md, artifact, plan.summary(), audit.summary()):
        assert shown in text
        assert _numbers_near(text, "tok/s") & {"3464.5", "3,464.5", "3,465", "3465"} == set()
    assert f"| decode ceiling | {shown} |" in artifact
    # the audit fact table of the report: the same figure, not a 4-significant-digit float
    assert f"| decode_ceiling_tok_s | {shown} |" in report_md


def test_the_kv_figures_print_through_their_metrics(tmp_path: Path, tiny_model: Path) -> None:
    host = get_host("cpu")
    audit = audit_for_host(tiny_model, host, inputs=LOCAL.plan_inputs())
    plan = plan_checkpoint(audit, host, LOCAL.plan_inputs()).model_copy(update={"max_concurrency": 12.3456})
    artifact = markdown(_result("local", LOCAL.repo_id, "cpu", "main", "0" * 40, None, audit, plan), audit, plan,
                        audit.findings, "")
    assert f"{C.KV_CACHE_TOKENS.format(plan.kv_cache_tokens)} ({C.MAX_CONCURRENCY.format(12.3456)} concurrency)" \
        in artifact
    assert "12.35x" not in artifact and "12.3x" in artifact
    record = spark_record()
    record.serve.predicted_max_concurrency = record.serve.logged_max_concurrency = 12.3456
    report_md = render_markdown(build_document(record, [], None, {}), tmp_path)
    assert "| Max concurrency (full-length requests) | 12.3x | 12.3x |" in report_md
