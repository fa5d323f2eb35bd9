"""The report's content as a small document tree, rendered to Markdown and to HTML from one source.

The tree's blocks are in ``blocks.py`` (re-exported here); the sections, one module per part of the
run, in ``sections/``. Every section copes with missing data: a failed run with no points still gets
a report that says which stage failed and why, and each empty section says what it would have shown.
"""

from __future__ import annotations

from pathlib import Path

from roost import catalogue as C
from roost.records import RunRecord
from roost.regress import RegressionReport
from roost.report.blocks import Block, Bullets, Document, Image, Para, Section, Table, code
from roost.report.compare import ModelComparison
from roost.report.sections.accuracy import accuracy_section
from roost.report.sections.comparison import comparison_section
from roost.report.sections.gateway import gateway_section
from roost.report.sections.history import history_section
from roost.report.sections.mtp_ab import mtp_ab_section
from roost.report.sections.points import concurrency_section, prompt_section
from roost.report.sections.serving import audit_section, plan_section, vllm_log_section, weights_section
from roost.report.sections.summary import baseline_section, summary_section
from roost.report.sections.timeline import ceiling_section, skipped_section, timeline_section


def _facts(record: RunRecord) -> list[tuple[str, str]]:
    """The lines under the report's title: what ran, where, on what, and how its probes went."""
    m = record.meta
    facts = [
        ("Status", record.status + (f" (failed at {record.failed_stage})" if record.status != "completed" else "")),
        ("Model", f"{code(m.repo_id)} @ {code(m.commit[:12] or m.revision)} (revision {code(m.revision)})"),
        ("Served as", code(m.served_model_name)),
        ("Host", f"{code(m.host)}, {m.backend} backend"),
        ("Run", f"{code(m.run_id)}, started {m.started_at.strftime('%Y-%m-%d %H:%M:%S %Z')}"),
    ]
    if m.image or m.image_digest:
        facts.append(("Image", " ".join(code(part) for part in (m.image, m.image_digest[:19]) if part)))
    if m.vllm_version:
        facts.append(("vLLM", code(m.vllm_version)))
    if m.xgrammar_version:
        base = m.xgrammar_base_version  # '' when unknown (a record from before the field): the version alone
        how = ("" if not base else " (base image's; no patch needed)" if base == m.xgrammar_version
               else f" (patched from {code(base)})")
        facts.append(("xgrammar", code(m.xgrammar_version) + how))
    if record.serve.attempts and record.serve.attempts[-1].ok and record.serve.attempts[-1].port:
        policy = f", restart policy {code(record.serve.restart_policy)}" if record.serve.restart_policy else ""
        facts.append(("Served at", f"port {record.serve.attempts[-1].port}{policy}"))
    if m.prefect_flow_run_id:
        facts.append(("Prefect flow run", code(m.prefect_flow_run_id)))
    facts += _probe_facts(record)
    facts.append(("roost", code(m.roost_version)))
    return facts


def _probe_facts(record: RunRecord) -> list[tuple[str, str]]:
    """The capability probes and the vision probe, one line each when the run sent them."""
    facts = []
    if record.probes:
        facts.append(("Probes", "; ".join(
            f"{p.name} {'passed' if p.ok else '**failed** (' + p.failure_class + ')'} in "
            f"{C.PROBE_LATENCY.format(p.latency_s)}" + (f" — {p.error}" if not p.ok and p.error else "")
            for p in record.probes)))
    if record.vision_probe is not None:
        v = record.vision_probe
        facts.append(("Vision probe", f"{'passed' if v.ok else '**failed**'}: one chat request with a "
                      f"{v.image_bytes:,}-byte PNG (image_url) in {C.VISION_PROBE_LATENCY.format(v.latency_s)}"
                      + ("" if v.ok else f" — {v.error}")))
    return facts


def build_document(
    record: RunRecord,
    history: list[RunRecord],
    comparison: RegressionReport | None,
    charts: dict[str, Path],
    ui_url: str = "",
    models: ModelComparison | None = None,
) -> Document:
    """The whole report for one run (``ui_url``: the Prefect UI, for links to earlier runs; ``models``: the
    comparison with the model it replaced, ``roost.report.compare``)."""
    optional = [weights_section(record), vllm_log_section(record), prompt_section(record, charts),
                concurrency_section(record, charts), gateway_section(record), mtp_ab_section(record.mtp_ab), accuracy_section(record, charts),
                comparison_section(models, charts),
                ceiling_section(record), timeline_section(record, charts), skipped_section(record),
                history_section(record, history, comparison, charts, ui_url)]
    sections = [summary_section(record, comparison), baseline_section(comparison), audit_section(record),
                plan_section(record), *(s for s in optional if s is not None)]
    m = record.meta
    return Document(title=f"roost report: {m.profile} on {m.host}", facts=_facts(record), sections=sections)


__all__ = ["Block", "Bullets", "Document", "Image", "Para", "Section", "Table", "build_document"]
