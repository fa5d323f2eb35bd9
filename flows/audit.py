"""The ``audit`` flow: download + integrity audit + KV plan, and nothing that needs a GPU.

The first two stages of ``land`` with the same tasks and the same checkpoint directory, so an
audit run warms the download cache of the ``land`` run that follows on the same host. Use it to
check a new revision before committing a Spark to it: the findings and the vLLM arguments the
plan derives are the flow's result and a markdown artifact. Error findings fail the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from roost.errors import CheckFailed


@flow(name="audit", flow_run_name="audit-{profile}")
def audit(profile: str = "local", revision: str | None = None, host: str | None = None) -> dict[str, Any]:
    """Download ``profile`` (at ``revision``) onto ``host``'s disk, audit its headers and plan vLLM's arguments."""
    from blocks.profiles import profile_document_name
    from blocks.resolve import load_host, load_profile
    from flows.land import _checkpoint_dir
    from tasks.audit import audit_task, plan_task
    from tasks.download import download_task
    from tasks.local_hub import local_hub_task

    logger = get_run_logger()
    prof = load_profile(profile)
    host_p = load_host(host or prof.host)
    rev = revision or prof.revision
    mirror = None
    try:
        endpoint = None
        if prof.demo:
            mirror = local_hub_task(prof)
            endpoint = mirror.endpoint
        dl = download_task(prof, rev, str(_checkpoint_dir(prof)), endpoint=endpoint)
    finally:
        if mirror is not None:
            mirror.stop()
    model_dir = Path(dl["local_dir"])
    findings = audit_task(str(model_dir), host_p.name)
    plan = plan_task(str(model_dir), host_p.name, prof.model_dump())
    vllm_args = [*plan.get("vllm_args", []), *prof.vllm_overrides]
    result: dict[str, Any] = {
        "profile": prof.name, "repo_id": prof.repo_id, "revision": rev, "commit": dl["commit"],
        "host": host_p.name, "local_dir": str(model_dir), "download_cached": bool(dl["cached"]),
        "audit": findings, "plan": plan, "vllm_args": vllm_args,
    }
    errors = [f for f in findings.get("findings", []) if f.get("severity") == "error"]
    create_markdown_artifact(
        key=f"audit-{profile_document_name(prof.name)}-{profile_document_name(host_p.name)}",
        markdown=_markdown(result, findings.get("findings", [])),
        description=f"audit of {prof.repo_id}@{str(dl['commit'])[:12]} for host {host_p.name}",
    )
    logger.info("audited %s@%s for %s: %d finding(s), %d error(s); vLLM args: %s", prof.repo_id,
                str(dl["commit"])[:12], host_p.name, len(findings.get("findings", [])), len(errors),
                " ".join(vllm_args) or "-")
    if errors:
        raise CheckFailed("audit: " + "; ".join(f"{f['code']}: {f['message']}" for f in errors))
    return result


def _markdown(result: dict[str, Any], findings: list[dict[str, Any]]) -> str:
    lines = [
        f"# Audit: {result['repo_id']}@{str(result['commit'])[:12]} on {result['host']}",
        "",
        f"- profile `{result['profile']}`, revision `{result['revision']}`",
        f"- checkpoint `{result['local_dir']}`" + (" (cached)" if result["download_cached"] else ""),
        f"- vLLM args: `{' '.join(result['vllm_args']) or '-'}`",
        "",
        "| severity | code | message |",
        "|---|---|---|",
    ]
    lines += [f"| {f.get('severity', '')} | {f.get('code', '')} | {str(f.get('message', '')).replace('|', '/')} |"
              for f in findings] or ["| - | - | no findings |"]
    return "\n".join(lines) + "\n"
