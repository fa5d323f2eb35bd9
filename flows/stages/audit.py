"""Stage 3, ``audit``: the files on disk audited, their headers checked against the preflight's, and
the KV plan with the vLLM arguments; an error finding or a pool vLLM would refuse stops the run."""

from __future__ import annotations

from prefect import get_run_logger
from pydantic import BaseModel

from flows.stages.download import Checkpoint
from flows.stages.preflight import refuse_unservable
from flows.stages.timing import stage
from roost.hosts import HostProfile
from roost.plan.preflight import PlanReport
from roost.plan.report import AuditReport
from roost.profiles import ModelProfile
from roost.records import AuditSnapshot, PlanSnapshot, RunRecord
from tasks.audit import audit_task, plan_task
from tasks.preflight import PreflightOutcome


class ServePlan(BaseModel):
    """What the audit and the plan decided before any server starts."""

    audit: AuditReport
    plan: PlanReport
    vllm_args: list[str]
    cached: bool


def audit_stage(record: RunRecord, prof: ModelProfile, host: HostProfile, checkpoint: Checkpoint,
                overrides: list[str] | None = None, preflight: PreflightOutcome | None = None) -> ServePlan:
    """Audit the headers on disk and plan vLLM's arguments with the profile's and this run's overrides.

    With the ``preflight`` that read this commit from the Hub, every shard's header on disk must equal
    the header it read (HEADER_CHANGED otherwise). Stops the run (``StageFailed`` at ``audit``) on an
    error finding, and (``PlanRefused``) when the plan says vLLM would refuse to start or the host
    cannot hold it: no cold load is spent on either.
    """
    expected = preflight.header_digests if preflight is not None and preflight.commit == checkpoint.commit else None
    with stage(record, "audit") as st:
        inputs = prof.plan_inputs(overrides)  # the audit names the window and the model as the plan serves them
        audit_state = audit_task(str(checkpoint.model_dir), host.name, expected, inputs=inputs, return_state=True)
        audit: AuditReport = audit_state.result()
        plan_state = plan_task(str(checkpoint.model_dir), host.name, audit, inputs, return_state=True)
        plan: PlanReport = plan_state.result()
        _record_plan(record, audit, plan)
        st.cached = audit_state.name == "Cached" and plan_state.name == "Cached"
        if st.cached:
            get_run_logger().info("audit and plan: cached (checkpoint files unchanged since they were computed)")
        vllm_args = list(plan.vllm_args)  # derived + the profile's serving settings + overrides
        if not audit.errors:
            record.meta.vllm_args = vllm_args
        refuse_unservable("audit", audit, plan)
    return ServePlan(audit=audit, plan=plan, vllm_args=vllm_args, cached=st.cached)


def _record_plan(record: RunRecord, audit: AuditReport, plan: PlanReport) -> None:
    """The audit, the plan and what the plan predicts the server will log, into the record."""
    record.audit = AuditSnapshot.model_validate(audit.to_json())
    record.plan = PlanSnapshot.model_validate(plan.to_json())
    record.decode_ceiling_tok_s = audit.decode_ceiling_tok_s
    record.serve.predicted_kv_cache_tokens = plan.kv_cache_tokens
    record.serve.predicted_max_concurrency = plan.max_concurrency
    record.serve.predicted_kv_pool_bytes = plan.kv_cache_memory_bytes
    record.serve.predicted_kv_pool_range = (
        None if plan.pool.low_bytes == plan.pool.high_bytes else (plan.pool.low_bytes, plan.pool.high_bytes))
