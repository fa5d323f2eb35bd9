"""Stage 1, ``preflight``: audit and plan the checkpoint from the Hub's headers, before any weight byte."""

from __future__ import annotations

from flows.identity import name_run
from flows.stages.timing import stage
from roost.errors import StageFailed
from roost.hosts import HostProfile
from roost.plan.preflight import PlanRefused, PlanReport
from roost.plan.report import AuditReport
from roost.profiles import ModelProfile
from roost.records import RunRecord
from tasks.preflight import PreflightOutcome, preflight_task


def preflight_stage(record: RunRecord, prof: ModelProfile, host: HostProfile, overrides: list[str] | None = None,
                    endpoint: str | None = None, *, refuse: bool = True) -> PreflightOutcome:
    """Audit and plan the profile's repository at the record's revision from the Hub (config, index and
    shard headers; no weight byte), with the profile's and this run's overrides.

    Stops the run, before anything is downloaded, with the message the audit of the downloaded files
    would give: ``StageFailed`` on an error finding, ``PlanRefused`` when vLLM would refuse the pool
    or the host cannot hold it (``refuse=False``: the caller decides, with :func:`refuse_unservable`).
    """
    with stage(record, "preflight") as st:
        outcome: PreflightOutcome = preflight_task(prof, record.meta.revision, host.name, prof.plan_inputs(overrides),
                                                   endpoint=endpoint, token_secret=prof.hf_token_secret)
        st.cached = outcome.stats.cached
        record.meta.commit = outcome.commit
        if not outcome.audit.errors:
            record.meta.vllm_args = list(outcome.plan.vllm_args)  # what would be served, refused or not
        if refuse:
            refuse_unservable("preflight", outcome.audit, outcome.plan)
    name_run(record.meta.profile, record.meta.host, outcome.commit)
    return outcome


def refuse_unservable(stage_name: str, audit: AuditReport, plan: PlanReport) -> None:
    """Raise what stops a run: the error findings (``StageFailed``), else the plan's refusal (``PlanRefused``)."""
    if audit.errors:
        raise StageFailed(stage_name, "; ".join(f"{f.code}: {f.message}" for f in audit.errors))
    refusal = plan.refusal()
    if refusal is not None:
        raise PlanRefused(*refusal)
