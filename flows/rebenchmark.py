"""The ``rebenchmark`` flow (scheduled nightly by ``roost setup``): benchmark what a host serves.

1. Find the server roost runs on the host from roost's own records (the backend's ``servers()``:
   process-backend state files, or containers labelled ``ai.roost.managed=true``).
2. None: land a profile there first (``land`` with ``keep_serving=True``; it benchmarks too) and
   return its record.
3. One: work out its profile (by served model name, or the ``profile`` given), find its key (the
   state file says where: ``VLLM_API_KEY`` or the ``roost-vllm-api-key`` Secret block; the key is
   never stored), and benchmark it. Finding and measuring happen under the host's serving slot
   (``roost-serve-<host>``), so no ``land`` replaces the server in between. The record inherits
   the identity (commit, image, vLLM args, audit, plan) of the stored ``land`` run that started
   the server, so the regression check compares like with like; it is reported and stored like
   any run (``flows/lifecycle.py`` and ``flows/stages/``: the same run, benchmark and report as ``land``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from blocks.resolve import VLLM_API_KEY_BLOCK, all_profiles, load_host, load_profile, load_vllm_api_key
from flows.identity import initial_run_name, name_run, roost_logs_to_run
from flows.land import land
from flows.lifecycle import new_record, pipeline_run
from flows.stages import (
    benchmark_stage,
    eval_datasets_stage,
    eval_stage,
    gateway_benchmark_stage,
    gateway_door,
    hub_source,
    measured_directly,
    stage,
)
from roost.errors import StageFailed, UserError
from roost.hosts import HostProfile
from roost.profiles import ModelProfile
from roost.records import RunRecord, StageTiming
from roost.serve.backends import backend_for
from roost.serve.base import ServerInfo
from roost.serve.discover import probe
from roost.serve.observe import server_version
from roost.store import load_records
from tasks.host_slot import ensure_host_limit, host_slot

LAND_RECORD_SLACK = dt.timedelta(minutes=5)
"""A stored land run counts as the one that started a server if it began at most this long after it."""


@task(name="find-server", cache_policy=NO_CACHE, persist_result=False)
def find_server_task(host: HostProfile) -> list[ServerInfo]:
    """The servers roost runs on ``host`` (normally zero or one), oldest first."""
    found = backend_for(host).servers()
    logger = get_run_logger()
    for s in found:
        logger.info("host %s serves %s at %s (%s, since %s)", host.name, s.served_model_name, s.base_url,
                    f"pid {s.pid}" if s.pid else f"container {s.container}", s.started_at)
    if not found:
        logger.info("host %s serves nothing roost started", host.name)
    return found


@flow(name="rebenchmark", flow_run_name=initial_run_name)
def rebenchmark(host: str = "cpu", profile: str | None = None, notify: bool = True,
                evaluate: bool = True) -> dict[str, Any]:
    """Benchmark the model ``host`` is serving, or land ``profile`` there first (kept serving) when none is.

    When the host serves another profile's model than ``profile``, what runs is benchmarked (and the
    record says so): the nightly schedule passes the host's default profile, whatever was landed since.
    ``evaluate``: run the profile's accuracy evaluations after the benchmark.
    """
    roost_logs_to_run()
    target = load_host(host)
    ensure_host_limit(target.name)
    # Under the host's serving slot, so no land replaces the server between finding and measuring it.
    with host_slot(target.name):
        found = find_server_task(target)
        if found:
            return _benchmark_serving(found, target, profile, notify, evaluate)
    prof_name = profile or _default_profile(target.name)
    get_run_logger().info("nothing is serving on %s: landing %s there first (keep_serving)", target.name, prof_name)
    name_run(prof_name, target.name)
    result: dict[str, Any] = land(profile=prof_name, host=target.name, keep_serving=True, notify=notify,
                                  evaluate=evaluate)
    return result


def _benchmark_serving(found: list[ServerInfo], target: HostProfile, profile: str | None,
                       notify: bool, evaluate: bool = True) -> dict[str, Any]:
    """Benchmark the newest of ``found``, report and notify like ``land`` does."""
    logger = get_run_logger()
    if len(found) > 1:
        logger.warning("host %s runs %d roost servers; benchmarking the newest", target.name, len(found))
    server = found[-1]
    prof = _profile_for(server, profile)
    with pipeline_run("rebenchmark", prof, target, notify=notify,
                      record=lambda: _record_for(server, prof, target, profile)) as run:
        record = run.record
        # a server roost cannot talk to is a failed run too: reported, stored and sent to Slack
        with stage(record, "connect"):
            key = _server_key(server)
        record.meta.vllm_version = server_version(server.base_url, key) or record.meta.vllm_version
        name = server.served_model_name
        # measured directly (the bypass alert is told: roost.monitor) and as clients reach it, through the gateway
        with gateway_door(record, target, name, keep_serving=True) as door:
            with measured_directly(server.base_url, keep_serving=True):
                benchmark_stage(record, server.base_url, prof, key, served_model_name=name)
            gateway_benchmark_stage(record, door, prof, key, server.base_url, served_model_name=name)
            if evaluate and prof.evals:
                with hub_source(prof) as endpoint:  # the demo's datasets live on its mirror
                    evals = eval_datasets_stage(record, prof, endpoint)
                eval_stage(record, door.url if door else server.base_url, prof, door.key if door else key, evals,
                           served_model_name=name)
    return run.result()


def _default_profile(host_name: str) -> str:
    """The one profile that targets ``host_name``; an error naming the candidates when it is ambiguous."""
    candidates = sorted(name for name, p in all_profiles().items() if p.host == host_name)
    if len(candidates) == 1:
        return candidates[0]
    choices = ", ".join(candidates) if candidates else "none target this host"
    raise UserError(f"nothing is serving on host {host_name} and no profile was given: pass profile= to land "
                    f"one first ({choices})")


def _profile_for(server: ServerInfo, profile: str | None) -> ModelProfile:
    """The profile of what ``server`` serves: ``profile`` if it serves that model, else found by served model name."""
    if profile is not None:
        prof = load_profile(profile)
        if prof.served_model_name == server.served_model_name:
            return prof
        # e.g. the nightly schedule's default profile while another model was landed with keep_serving
        get_run_logger().warning(
            "host %s serves %r, not profile %s's %r: benchmarking what runs (run land to replace it)",
            server.host, server.served_model_name, prof.name, prof.served_model_name)
    matches = [p for p in all_profiles().values() if p.served_model_name == server.served_model_name]
    matches.sort(key=lambda p: (p.host != server.host, p.name))
    if not matches:
        raise UserError(f"no profile serves the model name {server.served_model_name!r} running on {server.host}: "
                        "pass profile= (or save a model-profile block for it)")
    return matches[0]


def _server_key(server: ServerInfo) -> SecretStr:
    """The key ``server`` accepts, from where its state says (or the configured one); never logged."""
    configured = load_vllm_api_key()
    candidates: list[SecretStr] = [] if server.api_key_ref == "none" else ([configured] if configured else [])
    candidates.append(SecretStr(""))
    outcomes = []
    for key in candidates:
        outcome = probe(server, key.get_secret_value() or None)
        if outcome == "ok":
            return key
        outcomes.append(outcome)
    if "unreachable" in outcomes:
        raise StageFailed("benchmark", f"the server at {server.base_url} does not answer /v1/models")
    if "wrong-model" in outcomes:
        raise StageFailed("benchmark", f"the server at {server.base_url} no longer lists {server.served_model_name!r}")
    raise UserError(f"the server at {server.base_url} requires an API key roost does not know (it was started with a "
                    f"one-off key): set VLLM_API_KEY on the worker or save it as the Secret block {VLLM_API_KEY_BLOCK}, "
                    "and land with keep_serving again")


def _record_for(server: ServerInfo, prof: ModelProfile, target: HostProfile, asked: str | None) -> RunRecord:
    """A new record carrying the identity of the stored land run that started ``server`` (if stored),
    its serve stage skipped (already serving; ``asked``: the profile asked for, when another runs)."""
    record = _inherit(server, prof, target)
    note = (f"already serving since {server.started_at:%Y-%m-%d %H:%M:%S} UTC" if server.started_at else "already serving")
    if asked is not None and asked != prof.name:
        note += f"; profile {asked} was asked for, {prof.name} runs"
    record.stages.append(StageTiming(stage="serve", seconds=0.0, status="skipped",
                                     note=f"{note} ({f'pid {server.pid}' if server.pid else server.container})"))
    return record


def _found_serving(rec: RunRecord) -> bool:
    """Whether ``rec`` is a run that found the server already up (an earlier rebenchmark): it started
    nothing, so it is not the land run whose identity the server has (it may have found none)."""
    return any(s.stage == "serve" and s.status == "skipped" for s in rec.stages)


def _inherit(server: ServerInfo, prof: ModelProfile, target: HostProfile) -> RunRecord:
    """A new record carrying the identity of the stored land run that started ``server`` (if stored)."""
    base: RunRecord | None = None
    for rec in reversed(load_records(model=prof.repo_id, host=target.name)):
        if rec.status != "completed" or rec.meta.served_model_name != server.served_model_name or _found_serving(rec):
            continue
        if server.started_at is None or rec.meta.started_at <= server.started_at + LAND_RECORD_SLACK:
            base = rec
            break
    identity: dict[str, Any] = {"served_model_name": server.served_model_name, "backend": server.backend}
    if base is None:
        get_run_logger().warning("no stored land run of %s on %s found: the record has no commit, so the regression "
                                 "check cannot compare it", prof.repo_id, target.name)
        return new_record(prof, target, **identity)
    m = base.meta
    identity |= {"revision": m.revision, "commit": m.commit, "image": m.image, "image_digest": m.image_digest,
                 "vllm_version": m.vllm_version, "vllm_args": list(m.vllm_args)}
    record = new_record(prof, target, **identity)
    record.audit, record.plan, record.decode_ceiling_tok_s = base.audit, base.plan, base.decode_ceiling_tok_s
    return record
