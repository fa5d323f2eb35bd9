"""The sweep's Prefect side: send a variant's landing to a host's queue (``land/<host>``), watch the
landings, cancel one nobody took, and publish the comparison. ``roost.sweep.state`` decides what
happens next from what this module reports.

A landing is a run of the host's ``land`` deployment, started as a subflow of the sweep (the UI shows
it under the sweep), on that host's worker: the host's serving slot keeps it one server at a time.
What a landing measured is read back from the results store by its flow run id (the record names it).
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.logging import get_run_logger
from prefect.states import Cancelled

from roost.errors import UserError
from roost.naming import artifact_key
from roost.sweep.compare import SweepComparison
from roost.sweep.report import table_rows
from roost.sweep.state import SweepState, VariantState

UNCLAIMED = ("SCHEDULED", "PENDING")
"""State types of a landing no worker has started yet (Late and AwaitingRetry are Scheduled by type)."""

FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
"""State types of a landing that ended."""


def require_land_deployments(hosts: list[str]) -> None:
    """Every host must have a ``land/<host>`` deployment (``roost setup``); a UserError naming the ones without."""
    missing = []
    with get_client(sync_client=True) as client:
        for h in hosts:
            try:
                client.read_deployment_by_name(f"land/{h}")
            except ObjectNotFound:
                missing.append(h)
    if missing:
        raise UserError(f"no land deployment for host(s) {', '.join(missing)}: run `roost setup --hosts "
                        f"{','.join(missing)}` (and start a worker on each host's queue) first")


def land_hosts() -> list[str]:
    """The hosts that have a ``land/<host>`` deployment, sorted."""
    with get_client(sync_client=True) as client:
        deps = client.read_deployments()
    names = []
    for d in deps:
        if d.entrypoint == "flows/land.py:land" and d.work_queue_name:
            names.append(d.work_queue_name)
    return sorted(set(names))


@task(name="launch-landing", cache_policy=NO_CACHE, persist_result=False)
def launch_landing(host: str, parameters: dict[str, Any]) -> tuple[str, str]:
    """Start ``land/<host>`` with ``parameters`` as a subflow of this sweep, without waiting: (id, name)."""
    fr: Any = run_deployment(f"land/{host}", parameters=parameters, timeout=0, as_subflow=True)
    get_run_logger().info("sent %s to host %s: flow run %s", parameters.get("vllm_overrides"), host, fr.name)
    return str(fr.id), str(fr.name)


def landing_states(ids: list[str]) -> dict[str, tuple[str, str]]:
    """flow run id -> (state type, state message)."""
    out: dict[str, tuple[str, str]] = {}
    with get_client(sync_client=True) as client:
        for i in ids:
            st = client.read_flow_run(i).state  # type: ignore[arg-type]
            out[i] = (st.type.value, st.message or "") if st else ("SCHEDULED", "")
    return out


def cancel_landing(flow_run_id: str, why: str) -> None:
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Cancelled(message=why), force=True)  # type: ignore[arg-type]


def progress(state: SweepState, artifact_id: Any | None) -> Any:
    """The sweep's progress artifact (created on the first call): variants settled out of all."""
    settled = sum(1 for v in state.variants if v.status not in ("pending", "running"))
    pct = 100.0 * settled / max(1, len(state.variants))
    if artifact_id is None:
        return create_progress_artifact(progress=pct, key=None, description="sweep: variants settled")
    update_progress_artifact(artifact_id, progress=pct)
    return artifact_id


def publish(profile: str, markdown: str, comparison: SweepComparison) -> dict[str, str]:
    """The comparison as artifacts on the sweep's flow run, keyed per profile (their history is the sweeps')."""
    keys = {"markdown": artifact_key("roost-sweep", profile), "table": artifact_key("roost-sweep-table", profile)}
    create_markdown_artifact(markdown=markdown, key=keys["markdown"], description=f"roost sweep of {profile}")
    create_table_artifact(table=table_rows(comparison), key=keys["table"], description=f"sweep variants of {profile}")
    return keys


def describe(v: VariantState) -> str:
    return f"{v.name} on {v.host}" if v.host else v.name
