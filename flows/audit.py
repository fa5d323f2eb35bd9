"""The ``audit`` flow: the cheapest question — is this checkpoint servable here, and how? — answered
from the Hub without downloading a weight byte.

    preflight (config, index and shard headers over HTTP -> findings + KV plan)
        [-> download -> audit of the files on disk, headers checked against the preflight's]

The preflight is ``land``'s first stage (``flows/stages/preflight.py``: the same task, the same Hub token from
the profile's Secret block). ``repo`` audits any Hub repository (``hf://OWNER/NAME[@REVISION]``,
planned with roost's defaults), not only a profile's. ``download=True`` also downloads the checkpoint
onto the host's disk and audits it there, which warms the ``land`` run that follows. The findings,
the plan (KV figures, fit, the vLLM arguments) and what the preflight fetched are the flow's result
and a Markdown artifact; error findings, and a plan vLLM would refuse, fail the run. The audit names the
model and the window as the plan does (the profile's settings and overrides), and every figure prints
through its catalogue metric (``roost.catalogue``), as the report and the headline print it.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from blocks.profiles import profile_document_name
from blocks.resolve import load_host, load_profile
from flows.identity import initial_run_name
from flows.lifecycle import new_record
from flows.stages import (
    Checkpoint,
    audit_stage,
    download_stage,
    hub_source,
    preflight_stage,
    refuse_unservable,
)
from roost import catalogue as C
from roost.catalogue import fmt_value
from roost.errors import CheckFailed, StageFailed
from roost.hub.preflight import parse_hub_url
from roost.plan.preflight import PlanReport
from roost.plan.report import AuditReport
from roost.profiles import ModelProfile
from roost.records import Finding
from roost.settings import repo_dir_name
from roost.units import format_bytes, format_memory


@flow(name="audit", flow_run_name=initial_run_name)
def audit(profile: str = "local", revision: str | None = None, host: str | None = None, repo: str | None = None,
          download: bool = False) -> dict[str, Any]:
    """Audit and plan ``profile`` (at ``revision``) — or any Hub ``repo`` (hf://OWNER/NAME[@REVISION]) — for
    ``host`` from the Hub's headers alone; with ``download``, also download it and audit it on disk."""
    prof = load_profile(profile)
    if repo:
        prof = adhoc_profile(repo, prof, host)
        revision = revision or prof.revision
    target = load_host(host or prof.host)
    record = new_record(prof, target, revision)
    problem = ""
    checkpoint: Checkpoint | None = None
    with hub_source(prof) as endpoint:
        pre = preflight_stage(record, prof, target, endpoint=endpoint, refuse=False)
        report, plan = pre.audit, pre.plan
        try:
            refuse_unservable("preflight", report, plan)
            if download:
                checkpoint = download_stage(record, prof, endpoint)
                # audited with the profile's plan inputs: named and windowed as the preflight's audit is
                served = audit_stage(record, prof, target, checkpoint, preflight=pre)  # also sets the refusal
                report, plan = served.audit, served.plan
        except StageFailed as exc:  # error findings or a plan refusal: reported in the artifact, then the run fails
            if exc.stage not in ("preflight", "audit"):
                raise  # the Hub or the disk failed: no answer about the checkpoint
            problem = str(exc)
    # a failed audit stage (HEADER_CHANGED, a refused plan) leaves ``report`` the preflight's; its
    # findings are the on-disk audit's, which the stage recorded before it failed
    findings = record.audit.findings if record.audit else report.findings
    result = _result(record.meta.profile, prof.repo_id, target.name, record.meta.revision, record.meta.commit,
                     checkpoint, report, plan)
    create_markdown_artifact(
        key=f"audit-{profile_document_name(prof.name)}-{profile_document_name(target.name)}",
        markdown=markdown(result, report, plan, findings, problem),
        description=f"audit of {prof.repo_id}@{record.meta.commit[:12]} for host {target.name}",
    )
    get_run_logger().info("audited %s@%s for %s: %d finding(s), %d error(s); vLLM args: %s", prof.repo_id,
                          record.meta.commit[:12], target.name, len(findings),
                          sum(f.severity == "error" for f in findings),
                          " ".join(plan.vllm_args) or "-")
    if problem:
        raise CheckFailed(f"audit: {problem}")
    return result


def adhoc_profile(repo: str, base: ModelProfile, host: str | None) -> ModelProfile:
    """A profile for any Hub repository: roost's default patterns and plan, the base profile's Hub token."""
    ref = parse_hub_url(repo)
    name = repo_dir_name(ref.repo_id)
    return ModelProfile(name=name.lower(), repo_id=ref.repo_id, revision=ref.revision, served_model_name=name,
                        host=host or "spark", hf_token_secret=base.hf_token_secret)


def _result(profile: str, repo_id: str, host: str, revision: str, commit: str, checkpoint: Checkpoint | None,
            report: AuditReport, plan: PlanReport) -> dict[str, Any]:
    return {
        "profile": profile, "repo_id": repo_id, "revision": revision, "commit": commit, "host": host,
        "local_dir": str(checkpoint.model_dir) if checkpoint is not None else None,
        "download_cached": checkpoint.cached if checkpoint is not None else None,
        "bytes_fetched": report.bytes_fetched, "audit": report.to_json(), "plan": plan.to_json(),
        "vllm_args": list(plan.vllm_args),
        # what the server will be asked for: the audit and the plan agree on both (roost.plan.args.served_as)
        "served_model_name": plan.served_model_name, "max_model_len": plan.max_model_len,
    }


def markdown(result: dict[str, Any], report: AuditReport, plan: PlanReport, findings: list[Finding],
             problem: str) -> str:
    """The artifact: where the answer came from, the verdict, the plan's figures, the findings."""
    where = (f"checkpoint `{result['local_dir']}`" + (" (cached)" if result["download_cached"] else "")
             if result["local_dir"] else
             f"read from the Hub without downloading: {format_bytes(result['bytes_fetched'] or 0)} fetched "
             f"for {format_bytes(report.weight_bytes)} of weights")
    lines = [
        f"# Audit: {result['repo_id']}@{str(result['commit'])[:12]} on {result['host']}",
        "",
        f"- profile `{result['profile']}`, revision `{result['revision']}`",
        f"- {where}",
        f"- **{'not servable as planned: ' + problem if problem else 'servable as planned'}**",
        "",
        "| plan | value |",
        "|---|---|",
        f"| served model name | `{plan.served_model_name}` |",
        f"| weights vLLM loads | {format_memory(report.load_weight_bytes)} |",
        f"| decode ceiling | {C.DECODE_CEILING.format(report.decode_ceiling_tok_s)} |",
        f"| max model len | {fmt_value(plan.max_model_len, 'tokens')}"
        + (f" (native {fmt_value(report.native_max_model_len, 'tokens')})"
           if report.native_max_model_len and report.native_max_model_len != plan.max_model_len else "") + " |",
        f"| KV pool | {format_memory(plan.kv_cache_memory_bytes)} |",
        f"| KV cache | {C.KV_CACHE_TOKENS.format(plan.kv_cache_tokens)} ({C.MAX_CONCURRENCY.format(plan.max_concurrency)} "
        "concurrency) |",
        f"| one full-length request needs | {format_memory(plan.min_kv_cache_bytes)} |",
        f"| fits the host | {'yes' if plan.fits_host else 'no'} |",
        "",
        f"vLLM args: `{' '.join(plan.vllm_args) or '-'}`",
        "",
        "| severity | code | message |",
        "|---|---|---|",
    ]
    lines += [f"| {f.severity} | {f.code} | {f.message.replace('|', '/')} |" for f in findings] or [
        "| - | - | no findings |"]
    return "\n".join(lines) + "\n"
