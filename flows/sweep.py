"""The ``sweep`` flow: one profile, a grid of vLLM flags, landed across hosts in parallel, one comparison.

    grid -> variants -> plan each from the Hub (refused ones reported, never landed)
         -> skip what was measured already (same commit, arguments and the host's current image)
         -> fan out: each host one landing at a time (land/<host>, its worker), hosts in parallel
         -> collect: a table and chart of throughput at each concurrency, TTFT and decode per
            variant, the best one named with its margin over the noise band

What a variant's landing measured is stored by that landing like any run, so a host failing mid-sweep
loses only the variant it was landing; the report names what is missing and a rerun lands only that.
The decisions (what to start next, a host lost, a variant missing) are ``roost.sweep.state``'s; the
Prefect side is ``tasks/sweep.py``. The flow ends Completed when every variant was measured (or
refused by its plan), Failed otherwise, with the report published either way.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Completed, Failed

from blocks.resolve import load_host, load_profile
from blocks.store import results_store_for
from flows.identity import initial_run_name, roost_logs_to_run, tag_run
from flows.lifecycle import results_store
from flows.stages import hub_source
from roost.errors import RoostError, UserError
from roost.hosts import HostProfile
from roost.profiles import ModelProfile
from roost.records import RunRecord, new_run_id
from roost.report.charts import sweep_throughput
from roost.report.markdown import png_data_uri
from roost.store import atomic_write_text, current_store, load_record, load_runs, slug
from roost.sweep.compare import Objective, SweepComparison, compare
from roost.sweep.earlier import host_images, measured_earlier
from roost.sweep.grid import parse_grid, variants
from roost.sweep.report import render
from roost.sweep.state import SweepState, VariantState
from tasks.preflight import preflight_task
from tasks.report import reports_root
from tasks.sweep import (
    FINAL,
    UNCLAIMED,
    cancel_landing,
    describe,
    land_hosts,
    landing_states,
    launch_landing,
    progress,
    publish,
    require_land_deployments,
)


@flow(name="sweep", flow_run_name=initial_run_name)
def sweep(
    profile: str = "local",
    grid: list[str] | None = None,
    hosts: list[str] | None = None,
    revision: str | None = None,
    objective: Objective = "peak-output",
    evaluate: bool = False,
    pickup_timeout_s: float = 300.0,
    landing_timeout_s: float = 6 * 3600.0,
    poll_s: float = 5.0,
) -> Any:
    """Land every combination of ``grid`` (``["max-num-seqs=16,20,24", ...]``) of ``profile`` across
    ``hosts`` (default: every host with a land deployment of the profile's host's kind) and compare them."""
    logger = get_run_logger()
    roost_logs_to_run()
    prof = load_profile(profile)
    axes = parse_grid(list(grid or []))
    host_names = _hosts(prof, hosts)
    host_ps = [load_host(h) for h in host_names]
    require_land_deployments(host_names)
    _one_store(host_ps)
    with results_store(host_ps[0]) as store:
        state, commit = _plan(prof, host_ps, revision, [v for v in variants(axes)])
        _skip_measured(state, prof, commit, host_names, evaluate)
        logger.info("sweep of %s@%s: %d variant(s) over %s: %s", prof.name, commit[:12], len(state.variants),
                    ", ".join(host_names), state.counts())
        _fan_out(state, prof, commit, evaluate, pickup_timeout_s, landing_timeout_s, poll_s)
        comparison = compare(state.variants, _records(state, prof), objective, prof.regress_config())
        markdown, path = _report(prof, commit, host_ps, comparison)
        store_summary = {"sweep_id": path.name, "profile": prof.name, "repo_id": prof.repo_id, "commit": commit,
                         "hosts": host_names, "grid": list(grid or []), "objective": objective,
                         "states": [v.model_dump(mode="json") for v in state.variants],
                         "comparison": comparison.model_dump(mode="json"), "report": str(path / "sweep.md")}
        try:
            import json

            current_store().put_new(f"sweeps/model={slug(prof.repo_id)}/{path.name}.json",
                                    json.dumps(store_summary, indent=2).encode())
        except RoostError as exc:
            logger.error("could not store the sweep summary in %s: %s", store.url, exc)
    publish(prof.name, markdown, comparison)
    logger.info("sweep: %s", comparison.summary)
    bad = [v for v in state.variants if v.status in ("missing", "failed")]
    measured = [v for v in state.variants if v.status in ("done", "measured")]
    tag_run("sweep:complete" if not bad and measured else "sweep:incomplete")
    message = comparison.summary if not bad else (
        f"{len(bad)} of {len(state.variants)} variant(s) not measured ({'; '.join(f'{v.name}: {v.status}' for v in bad)}); "
        f"{comparison.summary}")
    if not measured:
        message = f"nothing measured: {message}"
    return (Completed if not bad and measured else Failed)(message=message[:500], data=store_summary)


def _one_store(host_ps: list[HostProfile]) -> None:
    """The hosts must write to the store the sweep reads (a UserError naming where each writes)."""
    urls = {h.name: results_store_for(h).url for h in host_ps}
    if len(set(urls.values())) > 1:
        raise UserError("the sweep's hosts write to different results stores (" + "; ".join(
            f"{h}: {u}" for h, u in urls.items()) + "): point their results_store at one store")


def _hosts(prof: ModelProfile, hosts: list[str] | None) -> list[str]:
    if hosts:
        names = list(dict.fromkeys(hosts))
        for h in names:
            load_host(h)  # an unknown host is a UserError naming the known ones
        return names
    kind = load_host(prof.host).accelerator
    names = [h for h in land_hosts() if load_host(h).accelerator == kind]
    if not names:
        raise UserError(f"no host with a land deployment serves {kind} profiles like {prof.name}: run `roost setup "
                        "--hosts H1,H2` or pass hosts=[...]")
    return names


def _plan(prof: ModelProfile, host_ps: list[HostProfile], revision: str | None,
          vs: list[Any]) -> tuple[SweepState, str]:
    """Each variant planned from the Hub (against the first host: the sweep's hosts are alike); refused ones marked."""
    logger = get_run_logger()
    states = [VariantState(variant=v) for v in vs]
    commit = ""
    with hub_source(prof) as endpoint:
        for s in states:
            pre = preflight_task(prof, commit or revision or prof.revision, host_ps[0].name,
                                 prof.plan_inputs(s.variant.overrides), endpoint=endpoint, token_secret=prof.hf_token_secret)
            commit = pre.commit
            if pre.audit.errors:
                s.status, s.reason = "refused", "; ".join(f"{f.code}: {f.message}" for f in pre.audit.errors)
                continue
            s.vllm_args = list(pre.plan.vllm_args)
            refusal = pre.plan.refusal()
            if refusal is not None:
                s.status, s.failure_class, s.reason = "refused", refusal[0], refusal[1]
                logger.warning("sweep: %s refused by the plan: %s", s.name, refusal[1])
    kinds = {(h.accelerator, h.bandwidth_gb_s, h.usable_bytes) for h in host_ps}
    if len(kinds) > 1:
        logger.warning("sweep: the hosts differ (%s); variants landed on different hosts are compared all the same",
                       ", ".join(h.name for h in host_ps))
    return SweepState(hosts=[h.name for h in host_ps], variants=states), commit


def _skip_measured(state: SweepState, prof: ModelProfile, commit: str, hosts: list[str], evaluate: bool) -> None:
    """Variants a completed run of this profile already measured on the same commit, arguments and image
    (with its evaluations, when the sweep evaluates) are not landed again."""
    runs = load_runs(model=prof.repo_id)
    if runs.empty:
        return
    images = host_images(load_runs(), hosts)
    for s in state.pending:
        for row in measured_earlier(runs, prof.name, prof.repo_id, commit, s.vllm_args, hosts, images):
            if evaluate and prof.evals and not _evaluated(prof, row):
                continue
            s.status, s.run_id, s.host = "measured", str(row["run_id"]), str(row["host_name"])
            get_run_logger().info("sweep: %s measured already by run %s on %s: not landed again", s.name, s.run_id,
                                  s.host)
            break


def _evaluated(prof: ModelProfile, row: dict[str, Any]) -> bool:
    """Whether the stored run ran the profile's evaluations."""
    try:
        record = load_record(str(row["run_id"]), model=prof.repo_id, host=str(row["host_name"]))
    except RoostError:
        return False
    return len(record.evals) >= len(prof.evals)


def _fan_out(state: SweepState, prof: ModelProfile, commit: str, evaluate: bool, pickup_timeout_s: float,
             landing_timeout_s: float, poll_s: float) -> None:
    """Send the variants to the hosts' queues, one landing per host at a time, until each is settled."""
    logger = get_run_logger()
    artifact = progress(state, None)
    started: dict[str, float] = {}
    while True:
        for v, host in state.assignments():
            params = {"profile": prof.name, "revision": commit, "vllm_overrides": v.variant.overrides,
                      "keep_serving": False, "notify": False, "evaluate": evaluate}
            fr_id, fr_name = launch_landing(host, params)
            state.start(v, host, fr_id, fr_name)
            started[fr_id] = time.monotonic()
        if not state.settle():
            break
        time.sleep(poll_s)
        states = landing_states([v.flow_run_id for v in state.running])
        now = time.monotonic()
        for v in state.running:
            kind, message = states[v.flow_run_id]
            waited = now - started[v.flow_run_id]
            if kind == "COMPLETED":
                run_id = _stored_run_id(prof, v)
                if run_id:
                    state.finish(v, run_id)
                    logger.info("sweep: %s measured (run %s)", describe(v), v.run_id)
                else:
                    state.not_stored(v, f"the landing completed, but its run is not in the results store "
                                        f"{current_store().url} the sweep reads (a host without a results_store "
                                        "writes to its own worker's directory)")
                    logger.error("sweep: %s: %s", describe(v), v.reason)
            elif kind == "FAILED":
                run_id, cls, why = _stored_failure(prof, v, message)
                state.fail(v, why, cls, run_id)
                logger.warning("sweep: %s failed: %s", describe(v), why)
            elif kind == "CRASHED":
                state.crash(v, f"the landing crashed ({message or 'its worker or machine died'})")
                logger.error("sweep: %s crashed; nothing more is sent to %s", describe(v), v.host)
            elif kind == "CANCELLED":
                state.crash(v, f"the landing was cancelled ({message or 'by someone'})")
            elif kind in UNCLAIMED and waited > pickup_timeout_s:
                why = f"no worker took a run from queue {v.host} within {pickup_timeout_s:.0f} s"
                cancel_landing(v.flow_run_id, f"roost sweep: {why}")
                logger.error("sweep: %s; its variants go to the other hosts", why)
                state.unclaimed(v, why)
            elif kind not in FINAL and waited > landing_timeout_s:  # running, paused, cancelling...
                why = f"still {kind.lower()} after {landing_timeout_s:.0f} s"
                cancel_landing(v.flow_run_id, f"roost sweep: {why}")
                state.fail(v, why, "sweep_landing_timeout")
        progress(state, artifact)
    progress(state, artifact)


def _stored_rows(prof: ModelProfile, v: VariantState) -> Any:
    runs = load_runs(model=prof.repo_id, host=v.host)
    return runs[runs["prefect_flow_run_id"] == v.flow_run_id]


def _stored_run_id(prof: ModelProfile, v: VariantState) -> str:
    rows = _stored_rows(prof, v)
    return str(rows.iloc[-1]["run_id"]) if not rows.empty else ""


def _stored_failure(prof: ModelProfile, v: VariantState, message: str) -> tuple[str, str, str]:
    rows = _stored_rows(prof, v)
    if rows.empty:
        return "", "", message or "the landing failed"
    row = rows.iloc[-1]
    why = f"failed at {row['failed_stage'] or 'setup'}: {row['failure_message'] or message}"
    return str(row["run_id"]), str(row["failure_class"] or ""), " ".join(why.split())[:400]


def _records(state: SweepState, prof: ModelProfile) -> dict[str, RunRecord]:
    out: dict[str, RunRecord] = {}
    for v in state.variants:
        if v.run_id and v.status in ("done", "measured"):
            try:
                out[v.run_id] = load_record(v.run_id, model=prof.repo_id, host=v.host)
            except RoostError as exc:
                get_run_logger().error("sweep: the record of run %s (%s) could not be read: %s", v.run_id, v.name, exc)
    return out


def _report(prof: ModelProfile, commit: str, host_ps: list[HostProfile], comparison: SweepComparison) -> tuple[str, Any]:
    """The comparison's files (Markdown with the chart beside it) and the Markdown for the artifact."""
    sweep_id = "sweep-" + new_run_id()
    folder = reports_root(current_store()) / "reports" / "sweeps" / f"model={slug(prof.repo_id)}" / sweep_id
    chart = sweep_throughput(comparison, folder / "throughput_per_variant.png")
    title = f"roost sweep: {prof.name} ({prof.repo_id}@{commit[:7]}) over {', '.join(h.name for h in host_ps)}"
    notes = [f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; each variant's own report is linked from its run"]
    atomic_write_text(folder / "sweep.md", render(comparison, title=title, chart=chart.name if chart else None,
                                                  notes=notes), overwrite=True)
    inline = png_data_uri(chart) if chart is not None else None
    return render(comparison, title=title, chart=inline, notes=notes), folder
