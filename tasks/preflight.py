"""The preflight task: audit and plan a checkpoint from the Hub before downloading a byte of its weights.

A thin task over :func:`roost.hub.preflight.preflight` (config, index and each shard's header over
HTTP, cached per commit) and the same audit and plan the downloaded files get
(:func:`roost.plan.report.audit_for_host`, :func:`roost.plan.preflight.plan_checkpoint`). Error findings
and a plan refusal are in the result, not raised: the stage decides. The Hub token comes from the
profile's Secret block, else ``HF_TOKEN``, as in the download task. A Hub that stays unreachable is
retried by roost's client alone (``HubUnreachable`` says how often); Prefect's ``retries`` are for a
transient fault that escaped it.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import BaseModel

from blocks.resolve import load_host
from blocks.secrets import hub_token
from roost.catalogue import DECODE_CEILING
from roost.hub.preflight import HubRef, PreflightStats, preflight
from roost.plan.inputs import PlanInputs
from roost.plan.preflight import PlanReport, plan_checkpoint
from roost.plan.report import AuditReport, audit_for_host
from roost.profiles import ModelProfile
from tasks._shared import log_findings, retry_transient_only, server_env, spec_for


class PreflightOutcome(BaseModel):
    """The audit and plan of a commit read from the Hub, and each shard's header digest."""

    commit: str
    audit: AuditReport
    plan: PlanReport
    header_digests: dict[str, str]
    stats: PreflightStats


@task(name="preflight", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=5,
      retry_condition_fn=retry_transient_only)
def preflight_task(profile: ModelProfile, revision: str | None, host_name: str, inputs: PlanInputs,
                   endpoint: str | None = None, token_secret: str | None = None) -> PreflightOutcome:
    """Read ``profile``'s repository at ``revision`` from the Hub; audit and plan it for ``host_name``."""
    logger = get_run_logger()
    spec = spec_for(profile, revision)
    pf = preflight(HubRef(repo_id=spec.repo_id, revision=spec.revision), endpoint=endpoint,
                   token=hub_token(token_secret), allow_patterns=spec.allow_patterns,
                   ignore_patterns=spec.ignore_patterns)
    host = load_host(host_name)
    # named and windowed as the plan (and the landing) serve it: the profile's settings and overrides
    audit = audit_for_host(pf.files, host, inputs=inputs).from_hub(pf.repo_id, pf.commit, pf.bytes_fetched)
    plan = plan_checkpoint(audit, host, inputs, env=server_env(host))
    log_findings(audit)
    how = "from the preflight cache" if pf.stats.cached else f"{pf.bytes_fetched:,} bytes fetched"
    logger.info("preflight of %s@%s: %d tensors in %d shard(s) audited from their headers (%s, %.2f s); "
                "%.2f GB/token -> %s ceiling on %s", pf.repo_id, pf.commit[:12], audit.tensor_count,
                audit.shard_count, how, pf.stats.seconds, audit.decode_bytes_per_token / 1e9,
                DECODE_CEILING.format(audit.decode_ceiling_tok_s), host.name)
    return PreflightOutcome(commit=pf.commit, audit=audit, plan=plan, header_digests=pf.header_digests(),
                            stats=pf.stats)
