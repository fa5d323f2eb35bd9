"""The ``audit`` flow: download + integrity audit + KV plan, and nothing that needs a GPU.

The first two stages of ``land`` (``flows/stages.py``: the same tasks, the same checkpoint
directory, the same Hub token), so an audit run warms the download cache of the ``land`` run that
follows on the same host. Use it to check a new revision before committing a Spark to it: the
findings and the vLLM arguments the plan derives are the flow's result and a Markdown artifact.
Error findings, and a plan vLLM would refuse, fail the run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from blocks.profiles import profile_document_name
from blocks.resolve import load_host, load_profile
from flows.identity import initial_run_name
from flows.stages import Checkpoint, audit_stage, download_stage, new_record
from roost.errors import CheckFailed, StageFailed
from roost.records import Finding


@flow(name="audit", flow_run_name=initial_run_name)
def audit(profile: str = "local", revision: str | None = None, host: str | None = None) -> dict[str, Any]:
    """Download ``profile`` (at ``revision``) onto ``host``'s disk, audit its headers and plan vLLM's arguments."""
    prof = load_profile(profile)
    host_p = load_host(host or prof.host)
    record = new_record(prof, host_p, revision)
    checkpoint = download_stage(record, prof)
    problem = ""
    try:
        audit_stage(record, prof, host_p, checkpoint)  # sets record.meta.vllm_args, refused or not
    except StageFailed as exc:  # error findings or a plan refusal: reported in the artifact, then the run fails
        problem = str(exc)
    result = _result(record.meta.profile, host_p.name, record.meta.revision, checkpoint, record.audit, record.plan,
                     record.meta.vllm_args)
    findings = [Finding.model_validate(f) for f in record.audit.get("findings", [])]
    create_markdown_artifact(
        key=f"audit-{profile_document_name(prof.name)}-{profile_document_name(host_p.name)}",
        markdown=_markdown(result, findings, problem),
        description=f"audit of {prof.repo_id}@{checkpoint.commit[:12]} for host {host_p.name}",
    )
    errors = [f for f in findings if f.severity == "error"]
    get_run_logger().info("audited %s@%s for %s: %d finding(s), %d error(s); vLLM args: %s", prof.repo_id,
                          checkpoint.commit[:12], host_p.name, len(findings), len(errors),
                          " ".join(result["vllm_args"]) or "-")
    if problem:
        raise CheckFailed(f"audit: {problem}")
    return result


def _result(profile: str, host: str, revision: str, checkpoint: Checkpoint, audit: dict[str, Any],
            plan: dict[str, Any], vllm_args: list[str]) -> dict[str, Any]:
    return {
        "profile": profile, "repo_id": checkpoint.download.repo_id, "revision": revision,
        "commit": checkpoint.commit, "host": host, "local_dir": str(checkpoint.model_dir),
        "download_cached": checkpoint.cached, "audit": audit, "plan": plan, "vllm_args": vllm_args,
    }


def _markdown(result: dict[str, Any], findings: list[Finding], problem: str) -> str:
    lines = [
        f"# Audit: {result['repo_id']}@{str(result['commit'])[:12]} on {result['host']}",
        "",
        f"- profile `{result['profile']}`, revision `{result['revision']}`",
        f"- checkpoint `{result['local_dir']}`" + (" (cached)" if result["download_cached"] else ""),
        f"- vLLM args: `{' '.join(result['vllm_args']) or '-'}`",
    ]
    if problem:
        lines.append(f"- **not servable as planned:** {problem}")
    lines += ["", "| severity | code | message |", "|---|---|---|"]
    lines += [f"| {f.severity} | {f.code} | {f.message.replace('|', '/')} |" for f in findings] or [
        "| - | - | no findings |"]
    return "\n".join(lines) + "\n"
