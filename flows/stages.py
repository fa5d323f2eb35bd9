"""The pipeline's stages, shared by every flow: ``land``, ``rebenchmark`` and ``audit`` call these.

Each stage function runs one step through its Prefect task(s) (``tasks/<stage>.py``), times it into
the run record (:func:`stage`) and returns what the next stage needs as a typed result:

    hub_source                           (the Hub to read: HF_ENDPOINT, or the demo profile's local mirror)
    preflight_stage -> PreflightOutcome  (audit + KV plan from the Hub's headers, before any weight byte;
                                          stops the run on an error finding or a pool vLLM would refuse)
    download_stage -> Checkpoint         (the verified local directory and its commit)
    audit_stage    -> ServePlan          (the audit of the files on disk, their headers checked against
                                          the preflight's, the KV plan and the vLLM arguments; stops the
                                          run on an error finding or a pool vLLM would refuse)
    build_stage    -> Prepared           (the serving image, or nothing to build)
    host_check_stage                     (refuse occupants roost did not start, or stop them with
                                          --replace; stop roost's own server; the memory left)
    serve_stage    -> ColdLoad           (a healthy server; failed cold loads classified and retried)
    probe_stage                          (reasoning split, named tool call, structured output: each pass/fail
                                          with latency; a failure fails the run with the probe's class)
    vision_stage                         (an image request when a vision tower is served; fails the run if refused)
    eval_datasets_stage -> [PreparedEval] (every evaluation's dataset read and sampled, before serving)
    benchmark_stage                      (points and per-request rows into the record and the store)
    eval_stage                           (accuracy evaluations: scores, answers in the store, paired with
                                          the baseline run by McNemar's test)
    mtp_ab_stage                         (the same image again without --speculative-config: speed-up, acceptance)
    report_stage                         (store, compare with the baseline, report files, artifacts, Slack)
    finish         -> the record as JSON (or the failure, with its exit code)

A flow reads top to bottom as calls to these; nothing here branches on the serving backend.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from prefect import get_run_logger
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.states import Completed
from pydantic import BaseModel, SecretStr

import roost
from blocks.resolve import load_vllm_api_key, vllm_api_key_with_source
from blocks.store import results_store_for
from flows.identity import label_stage, name_run, roost_logs_to_run, tag_run
from roost import catalogue as C
from roost.bench import mtp
from roost.bench.validity import stream_ceiling_tok_s
from roost.errors import RoostError, StageFailed
from roost.eval.log import read_answers, sample_digest
from roost.eval.runner import EvalResult
from roost.eval.scoring import paired, summarize
from roost.hosts import HostProfile
from roost.hub.snapshot import DownloadResult
from roost.monitor.targets import decode_floor
from roost.naming import run_verdict
from roost.plan.args import parse_overrides
from roost.plan.preflight import PlanRefused, PlanReport
from roost.plan.report import AuditReport
from roost.profiles import ModelProfile
from roost.records import (
    EvalRecord,
    MtpAB,
    OtherModelScore,
    RunMeta,
    RunRecord,
    SpecAcceptance,
    StageTiming,
    VisionProbe,
)
from roost.regress import RegressionReport, accuracy_baseline, latest_scores
from roost.serve.base import Backend, Prepared, Readiness, Server, ServeSpec, stop_grace
from roost.serve.coldload import ColdLoad, ColdLoadFailed, cold_load
from roost.serve.diagnose import diagnose_exit
from roost.serve.occupancy import memory_refusal, occupancy_refusal
from roost.serve.probes import check as check_probes
from roost.serve.probes import probes_for
from roost.serve.vision import VisionProbeFailed, needs_probe
from roost.settings import checkpoint_dir, roost_home
from roost.store import (
    append_eval_answers,
    append_requests,
    current_store,
    load_eval_answers,
    record_batches_newest_first,
    using_store,
)
from roost.store.fallback import KeepLocalCopy
from roost.units import format_memory
from roost.vllm import prometheus, specdecode_log
from roost.vllm.client import VllmClient, run_sync
from tasks.audit import audit_task, plan_task
from tasks.benchmark import BenchFailed, benchmark_task
from tasks.build import build_task
from tasks.download import cached_line, download_task
from tasks.evaluate import PreparedEval, eval_datasets_task, eval_task
from tasks.gateway import deregister_host, register_backend
from tasks.health import health_wait_task
from tasks.local_hub import local_hub_task
from tasks.monitor import sync_monitoring
from tasks.notify import notify_task
from tasks.preflight import PreflightOutcome, preflight_task
from tasks.probes import probes_task
from tasks.report import ReportOutcome, publish_artifacts, report_task, results_url_for
from tasks.serve import backend_log, serve_task
from tasks.vision_probe import vision_probe_task


@contextlib.contextmanager
def stage(record: RunRecord, name: str) -> Iterator[StageTiming]:
    """Time one stage into ``record.stages``; a failure marks the run failed at this stage (the first
    failure is the run's, unless a later retry succeeds and clears it). The flow run's ``roost.stage``
    label names the stage, for the crash alert of a run whose process dies in it."""
    label_stage(name)
    timing = StageTiming(stage=name, seconds=0.0)
    t0 = time.perf_counter()
    try:
        yield timing
    except BaseException as exc:
        timing.status = "failed"
        mark_failed(record, name, exc)
        raise
    finally:
        timing.seconds = time.perf_counter() - t0
        record.stages.append(timing)


def mark_failed(record: RunRecord, stage_name: str, exc: BaseException) -> None:
    """The run failed at ``stage_name`` with ``exc`` (its class and remediation when roost classified it),
    unless an earlier failure is already the run's."""
    if record.status == "failed":
        return
    record.status, record.failed_stage = "failed", stage_name
    record.failure_message = str(exc) or type(exc).__name__
    known = exc if isinstance(exc, RoostError) else RoostError()
    record.failure_class = known.failure_class or f"{stage_name.replace('-', '_')}_failed"
    record.remediation = known.remediation


@contextlib.contextmanager
def results_store(host: HostProfile) -> Iterator[KeepLocalCopy]:
    """The results store of a run on ``host`` (``blocks.store.results_store_for``) for the whole flow,
    every write it cannot take kept on the worker (``roost.store.fallback``)."""
    store = KeepLocalCopy(results_store_for(host))
    with using_store(store):
        yield store


def api_key() -> SecretStr:
    """The key vLLM requires: ``VLLM_API_KEY`` if set, else the ``roost-vllm-api-key`` Secret block
    if saved, else a fresh one for this run only. Never logged."""
    return load_vllm_api_key() or SecretStr(secrets.token_urlsafe(24))


def new_record(prof: ModelProfile, host: HostProfile, revision: str | None = None, **meta: Any) -> RunRecord:
    """An empty record for a run of ``prof`` on ``host``, tied to the current Prefect flow run (renamed
    ``<flow> · profile · host[ · commit]``, and roost's own loggers sent to it: ``flows/identity.py``)."""
    ctx = FlowRunContext.get()
    flow_run = ctx.flow_run if ctx is not None else None
    fields: dict[str, Any] = {
        "roost_version": roost.__version__, "profile": prof.name, "repo_id": prof.repo_id,
        "revision": revision or prof.revision, "commit": "", "served_model_name": prof.served_model_name,
        "host": host.name, "backend": host.backend,
        "prefect_flow_run_id": str(flow_run.id) if flow_run is not None else "",
    }
    record = RunRecord(meta=RunMeta(**(fields | meta)))
    roost_logs_to_run()
    name_run(record.meta.profile, record.meta.host, record.meta.commit)
    return record


# --- 1. preflight from the Hub ----------------------------------------------------------------------


@contextlib.contextmanager
def hub_source(prof: ModelProfile) -> Iterator[str | None]:
    """The endpoint the preflight and the download read: None (``HF_ENDPOINT``, else huggingface.co),
    or for the embedded demo the local mirror serving its generated checkpoint, stopped on exit."""
    if not prof.demo:
        yield None
        return
    hub = local_hub_task(prof)
    try:
        yield hub.endpoint
    finally:
        hub.stop()


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


# --- 2. download ------------------------------------------------------------------------------------


class Checkpoint(BaseModel):
    """A verified checkpoint on local disk."""

    model_dir: Path
    commit: str
    cached: bool
    download: DownloadResult


def download_stage(record: RunRecord, prof: ModelProfile, endpoint: str | None = None) -> Checkpoint:
    """Fetch and verify the profile's repo at the record's revision (the preflight's commit when it ran)
    into its checkpoint directory, from ``endpoint`` (:func:`hub_source`).

    The Hub token comes from the profile's Secret block (``hf_token_secret``), else ``HF_TOKEN``.
    """
    with stage(record, "download") as st:
        revision = record.meta.commit or record.meta.revision  # the commit the preflight audited
        state = download_task(prof, revision, str(checkpoint_dir(prof.repo_id)), endpoint=endpoint,
                              token_secret=prof.hf_token_secret, return_state=True)
        result: DownloadResult = state.result()
        record.meta.commit = result.commit
        prefect_cached = state.name == "Cached"  # Prefect's cache: the task did not run, so it logged nothing
        if prefect_cached:
            get_run_logger().info("%s", cached_line(result))
        st.cached = result.cached or prefect_cached
    name_run(record.meta.profile, record.meta.host, result.commit)
    return Checkpoint(model_dir=Path(result.local_dir), commit=result.commit, cached=st.cached, download=result)


# --- 3. audit and plan ------------------------------------------------------------------------------


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
    logger = get_run_logger()
    expected = preflight.header_digests if preflight is not None and preflight.commit == checkpoint.commit else None
    with stage(record, "audit") as st:
        audit_state = audit_task(str(checkpoint.model_dir), host.name, expected, return_state=True)
        audit: AuditReport = audit_state.result()
        inputs = prof.plan_inputs(overrides)
        plan_state = plan_task(str(checkpoint.model_dir), host.name, audit, inputs, return_state=True)
        plan: PlanReport = plan_state.result()
        record.audit, record.plan = audit.to_json(), plan.to_json()
        record.decode_ceiling_tok_s = audit.decode_ceiling_tok_s
        record.serve.predicted_kv_cache_tokens = plan.kv_cache_tokens
        record.serve.predicted_max_concurrency = plan.max_concurrency
        record.serve.predicted_kv_pool_bytes = plan.kv_cache_memory_bytes
        record.serve.predicted_kv_pool_range = (
            None if plan.pool.low_bytes == plan.pool.high_bytes else (plan.pool.low_bytes, plan.pool.high_bytes))
        st.cached = audit_state.name == "Cached" and plan_state.name == "Cached"
        if st.cached:
            logger.info("audit and plan: cached (checkpoint files unchanged since they were computed)")
        vllm_args = list(plan.vllm_args)  # derived + the profile's serving settings + overrides
        if not audit.errors:
            record.meta.vllm_args = vllm_args
        refuse_unservable("audit", audit, plan)
    return ServePlan(audit=audit, plan=plan, vllm_args=vllm_args, cached=st.cached)


# --- 3. build ---------------------------------------------------------------------------------------


def build_stage(record: RunRecord, backend: Backend) -> Prepared:
    """What the backend needs before a server can start: the serving image (vLLM base + xgrammar
    patch, cached by its Dockerfile's hash), or nothing for a process host."""
    with stage(record, "build") as st:
        prepared = build_task(backend)
        record.meta.image, record.meta.image_digest = prepared.image, prepared.image_digest
        record.meta.xgrammar_version = prepared.xgrammar_version
        record.meta.xgrammar_base_version = prepared.xgrammar_base
        record.meta.vllm_version = prepared.vllm_version or record.meta.vllm_version  # the server's, once it answers
        st.cached, st.note = prepared.cached, prepared.note
        if prepared.skipped:
            st.status = "skipped"
    return prepared


# --- 4. host check ----------------------------------------------------------------------------------


def host_check_stage(record: RunRecord, backend: Backend, spec: ServeSpec, plan: ServePlan, *,
                     replace: bool = False) -> None:
    """Before a cold load: refuse (``HostBusy``) when something roost did not start holds the GPUs
    or the fixed port, unless ``replace`` (then stop it: restart policy ``no``, stopped, kept);
    stop roost's own server on the host (one per host; its restart policy moves to ``no``); refuse
    (``HostMemoryShort``) when the memory left cannot hold weights + KV pool + headroom."""
    logger = get_run_logger()
    notes = record.serve.host_check
    with stage(record, "host-check"):
        occupants = backend.occupants(spec)
        refusal = occupancy_refusal(occupants, backend.host.name, replace=replace)
        if refusal is not None:
            raise refusal
        for occ in occupants:
            backend.release(occ, log=logger.warning)
            notes.append(f"stopped {occ.describe()} (--replace; restart policy now no)")
        retired = backend.retire(spec, log=backend_log())
        notes += [f"stopped roost's {what}" for what in retired]
        if retired:  # the metering gateway must not route to what was stopped, nor Prometheus scrape it
            deregister_host(backend.host.name)
            sync_monitoring()
        needed = plan.plan.fit.total_bytes
        available = backend.available_memory_bytes()
        notes.append(f"memory: {format_memory(available) if available is not None else 'unknown'} available, "
                     f"plan needs {format_memory(needed)} (weights + KV pool + headroom)")
        logger.info("host check: %s", "; ".join(notes))
        short = memory_refusal(available, needed, backend.host.name)
        if short is not None:
            raise short


def gateway_stage(record: RunRecord, base_url: str, served_model_name: str, host: HostProfile) -> None:
    """A landing that keeps its server registers it for the metering gateway on the host (the host's
    earlier servers are deregistered): the gateway routes ``served_model_name`` without a restart."""
    with stage(record, "gateway") as st:
        floor = decode_floor(record)
        replaced = register_backend(base_url, served_model_name, host.name, record.meta.run_id,
                                    floor.tok_s if floor else None, floor.concurrency if floor else 0)
        st.note = f"registered {base_url}" + (f", replaced {', '.join(replaced)}" if replaced else "")
        if reload := sync_monitoring():  # Prometheus scrapes it from now on (roost monitor render/up)
            st.note += f"; Prometheus {reload}"
        if vllm_api_key_with_source()[1] == "none":
            get_run_logger().warning(
                "gateway: this server's key is one-off (no VLLM_API_KEY, no %s Secret block), so the gateway "
                "cannot reach it; set one for both", "roost-vllm-api-key")


# --- 5+6. serve and health-wait ---------------------------------------------------------------------


def serve_stage(record: RunRecord, backend: Backend, spec: ServeSpec, key: SecretStr, prepared: Prepared,
                timeout_s: float) -> ColdLoad:
    """Start the server and wait until it answers; a failed cold load is classified and retried only
    when it can succeed (``roost.serve.policy``). Records one start attempt per try and what vLLM
    logged against what the plan predicted."""

    def start(s: ServeSpec) -> Server:
        with stage(record, "serve"):
            server: Server = serve_task(backend, s, key, prepared)
            return server

    def wait(server: Server) -> Readiness:
        with stage(record, "health-wait"):
            ready: Readiness = health_wait_task(server, key, timeout_s, profile=record.meta.profile,
                                                host=record.meta.host)
            return ready

    try:
        loaded = cold_load(start, wait, spec, log=get_run_logger().warning)
    except ColdLoadFailed as exc:
        record.serve.attempts = list(exc.attempts)
        record.failure_class, record.remediation, record.failure_message = exc.failure_class, exc.remediation, exc.message
        raise
    try:
        _observe(record, loaded, key)
    except BaseException as exc:  # a healthy server whose bookkeeping failed is never left running
        loaded.server.stop(stop_grace(exc))
        raise
    return loaded


def _observe(record: RunRecord, loaded: ColdLoad, key: SecretStr) -> None:
    """Record what the healthy server's start showed against what the plan predicted."""
    # what an earlier attempt failed with no longer describes the run (the attempts keep it)
    record.status, record.failed_stage, record.failure_message = "completed", "", ""
    record.failure_class, record.remediation = "", ""
    record.meta.vllm_args = list(loaded.spec.vllm_args)
    obs = record.serve
    obs.restart_policy = loaded.spec.restart_policy
    obs.attempts = list(loaded.attempts)
    obs.logged_kv_cache_tokens = loaded.facts.kv_cache_tokens
    obs.logged_max_concurrency = loaded.facts.max_concurrency
    obs.logged_block_size = loaded.facts.attention_block_size
    obs.logged_kv_pool_gib = loaded.facts.kv_pool_gib
    obs.logged_weights_gib, obs.logged_model_load_s = loaded.facts.model_load_gib, loaded.facts.model_load_s
    obs.attention_backends = list(loaded.facts.attention_backends)
    obs.moe_backends = list(loaded.facts.moe_backends)
    obs.explained_log_lines = [e.model_dump() for e in loaded.facts.explained]
    obs.start_to_healthy_s = loaded.readiness.completion_ok_s
    obs.health_detect_delay_s = loaded.readiness.detect_delay_s
    obs.load_s, obs.compile_s, obs.ready_s = loaded.phases.load_s, loaded.phases.compile_s, loaded.phases.ready_s
    record.meta.vllm_version = server_version(loaded.server.base_url, key)


def server_version(base_url: str, key: SecretStr) -> str:
    """vLLM's version as the server reports it (``/version``); "" when it does not say."""

    async def ask() -> str:
        async with VllmClient(base_url, api_key=key.get_secret_value() or None) as client:
            return await client.version()

    return run_sync(ask)


# --- 7. benchmark -----------------------------------------------------------------------------------


def benchmark_stage(record: RunRecord, base_url: str, prof: ModelProfile, key: SecretStr,
                    served_model_name: str | None = None, server: Server | None = None) -> None:
    """Benchmark the server into ``record.points`` and store one row per request; a sweep cut short
    by a dead server keeps (and stores) every row it measured before failing the stage, with what
    stopped ``server`` (the one this run started, when given) as the failure class."""
    settings = bench_settings(record, prof, record.meta.vllm_args)
    with stage(record, "benchmark"):
        try:
            bench = benchmark_task(base_url, served_model_name or prof.served_model_name, settings, key,
                                   profile=record.meta.profile, host=record.meta.host)
        except BenchFailed as exc:
            record.points = exc.result.points
            append_requests(record.meta, exc.result.request_rows())
            if server is not None:
                classify_exit(exc, server)
            raise
        record.points = bench.points
        append_requests(record.meta, bench.request_rows())


EXIT_WAIT_S = 10.0
"""How long a server that stopped answering mid-run is given to exit before it counts as still running."""


def classify_exit(exc: RoostError, server: Server, wait_s: float = EXIT_WAIT_S) -> None:
    """A measurement cut short by ``server`` exiting fails with what stopped it (``server_died``: the
    signal, or the log's error line; ``out_of_memory``: ``roost.serve.diagnose.diagnose_exit``), not
    as a generic stage failure. A server still running after ``wait_s`` leaves ``exc`` as it is."""
    deadline = time.monotonic() + wait_s
    while server.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    if server.is_running():
        return
    death = diagnose_exit(server.exit_code(), server.diagnose())
    exc.failure_class, exc.remediation = death.failure_class, f"{death.evidence}: {death.remediation}"
    get_run_logger().error("the vLLM server exited mid-run: %s (%s)", death.evidence, death.failure_class)


# --- 8b. accuracy evaluations -----------------------------------------------------------------------


def eval_datasets_stage(record: RunRecord, prof: ModelProfile, endpoint: str | None = None) -> list[PreparedEval]:
    """Read every evaluation's dataset and draw its sample from ``endpoint`` (:func:`hub_source`), before
    any server starts: a dataset that cannot be read stops the run before the model loads."""
    settings = prof.eval_settings()
    if not settings:
        return []
    with stage(record, "eval-datasets") as st:
        prepared: list[PreparedEval] = eval_datasets_task(settings, endpoint, prof.hf_token_secret)
        st.note = ", ".join(f"{p.settings.task}: {len(p.dataset.questions)} questions" for p in prepared)
    return prepared


def eval_log_path(record: RunRecord, task_name: str) -> Path:
    """Where an evaluation's per-question log lives: per flow run (a retried run resumes it), else per run."""
    run = record.meta.prefect_flow_run_id or record.meta.run_id
    return roost_home() / "evals" / run / f"{task_name}.jsonl"


def eval_stage(record: RunRecord, base_url: str, prof: ModelProfile, key: SecretStr, prepared: list[PreparedEval],
               served_model_name: str | None = None) -> None:
    """Run each evaluation against the server into ``record.evals``: answers into the store's
    ``eval_answers`` table, paired with the newest earlier run of the same model and evaluation
    (McNemar, ``roost.regress.accuracy_baseline``), and the other models the profile compares with.
    An evaluation the server cuts short keeps its answers (log and store) and fails the stage."""
    if not prepared:
        return
    with stage(record, "evaluate") as st:
        notes = []
        for p in prepared:
            log_path = eval_log_path(record, p.settings.task)
            try:
                result = eval_task(base_url, served_model_name or prof.served_model_name, p, key, log_path=log_path,
                                   profile=record.meta.profile, host=record.meta.host)
            except RoostError as exc:
                _keep_partial(record, p, log_path, exc)
                raise
            append_eval_answers(record.meta, result.task, result.sample_digest,
                                [a.model_dump(exclude={"reasoning"}) for a in result.answers])
            ev = EvalRecord(task=result.task, dataset=result.dataset, sampling=result.sampling, seed=result.seed,
                            limit=result.limit, per_category=result.per_category, sample_digest=result.sample_digest,
                            summary=result.summary, elapsed_s=result.elapsed_s, resumed=result.resumed)
            _pair_with_baseline(record, ev, result)
            ev.others = _other_models(prof, ev)
            record.evals.append(ev)
            notes.append(f"{result.task} {C.fmt_accuracy(result.summary.accuracy)}"
                         + (f" ({ev.comparison.describe()})" if ev.comparison else ""))
        st.note = "; ".join(notes)


def _keep_partial(record: RunRecord, p: PreparedEval, log_path: Path, exc: RoostError) -> None:
    """An evaluation cut short: what its log holds goes to the store and the record (status failed)."""
    answers = read_answers(log_path) if log_path.is_file() else []
    digest = sample_digest(p.dataset.questions)
    append_eval_answers(record.meta, p.settings.task, digest, [{k: v for k, v in a.items() if k != "reasoning"}
                                                               for a in answers])
    record.evals.append(EvalRecord(task=p.settings.task, status="failed", error=str(exc), dataset=p.dataset.info,
                                   sampling=p.settings.sampling, seed=p.settings.seed, limit=p.settings.limit,
                                   per_category=p.settings.per_category, sample_digest=digest,
                                   summary=summarize(answers)))


def _pair_with_baseline(record: RunRecord, ev: EvalRecord, result: EvalResult) -> None:
    """``ev.comparison``: this run's verdicts against the baseline run's, question by question (the
    model's stored runs read newest first, until the baseline is found)."""
    found = next((f for batch in record_batches_newest_first(model=record.meta.repo_id)
                  if (f := accuracy_baseline(ev, batch, before=record.meta.started_at)) is not None), None)
    if found is None:
        return
    base_rec, base_ev = found
    rows = load_eval_answers(base_rec.meta.run_id, base_ev.task, model=base_rec.meta.repo_id, host=base_rec.meta.host)
    before = {str(r.question_id): (str(r.category or ""), r.verdict == "correct") for r in rows.itertuples()}
    now = {a.id: (a.category, a.verdict == "correct") for a in result.answers}
    ev.baseline_run_id = base_rec.meta.run_id
    ev.baseline = _score_of(base_rec, base_ev)
    ev.comparison = paired(before, now)
    if ev.comparison is not None and ev.comparison.significant:
        log = get_run_logger().warning if ev.comparison.direction == "worse" else get_run_logger().info
        log("%s accuracy vs run %s: %s", ev.task, base_rec.meta.run_id, ev.comparison.describe())


def _other_models(prof: ModelProfile, ev: EvalRecord) -> list[OtherModelScore]:
    """The profile's ``eval_compare_with`` models' newest scores on the same dataset revision."""
    out = []
    for repo_id in prof.eval_compare_with:
        found = next((f for batch in record_batches_newest_first(model=repo_id)
                      if (f := latest_scores(ev.task, ev.dataset.revision, batch)) is not None), None)
        if found is None:
            continue
        out.append(_score_of(*found))
    return out


def _score_of(rec: RunRecord, ev: EvalRecord) -> OtherModelScore:
    s = ev.summary
    return OtherModelScore(repo_id=rec.meta.repo_id, run_id=rec.meta.run_id, host=rec.meta.host, accuracy=s.accuracy,
                           ci_low=s.ci_low, ci_high=s.ci_high, n=s.n, per_category=s.per_category)


# --- after the health-wait: the vision probe ---------------------------------------------------------


def vision_stage(record: RunRecord, plan: ServePlan, base_url: str, key: SecretStr, served_model_name: str,
                 timeout_s: float = 300.0) -> None:
    """When the checkpoint ships a vision tower and the server runs without ``--language-model-only``:
    one chat request with a generated PNG must succeed (``roost.serve.vision``), else the landing fails
    with ``vision_probe_failed``. A text-only checkpoint records nothing."""
    if not needs_probe(plan.audit.visual_tensor_count, record.meta.vllm_args):
        return
    with stage(record, "vision-probe") as st:
        result: VisionProbe = vision_probe_task(base_url, served_model_name, key, timeout_s)
        record.vision_probe = result
        st.note = f"{'passed' if result.ok else 'failed'} in {C.VISION_PROBE_LATENCY.format(result.latency_s)}"
        if not result.ok:
            raise VisionProbeFailed(result)


def probe_stage(record: RunRecord, base_url: str, key: SecretStr, prof: ModelProfile, timeout_s: float = 120.0) -> None:
    """The capability probes the server's arguments call for (``roost.serve.probes.probes_for``): the
    reasoning split, a named tool call validated against its schema, JSON-schema structured output (and
    ``tool_choice: auto`` when the profile asks). A failed probe fails the landing with its own class."""
    names = probes_for(record.meta.vllm_args, tool_auto=prof.tool_auto_probe)
    with stage(record, "probes") as st:
        record.probes = probes_task(base_url, prof.served_model_name, key, names, timeout_s)
        st.note = ", ".join(f"{r.name} {'passed' if r.ok else 'FAILED'} in {C.PROBE_LATENCY.format(r.latency_s)}"
                            for r in record.probes)
        check_probes(record.probes)


# --- after the benchmark: the MTP A/B ---------------------------------------------------------------


def bench_settings(record: RunRecord, prof: ModelProfile, vllm_args: list[str]) -> dict[str, Any]:
    """The benchmark settings for a server run with ``vllm_args``: its --max-num-seqs cap as a level,
    the stream ceiling (roofline x (speculative tokens + 1)), then the profile's ``bench``."""
    cap = parse_overrides(vllm_args).max_num_seqs
    ceiling = stream_ceiling_tok_s(record.decode_ceiling_tok_s, vllm_args)
    return {**({"max_num_seqs": cap} if cap else {}), **({"decode_ceiling_tok_s": ceiling} if ceiling else {}),
            **prof.bench}


def spec_acceptance(server: Server, key: SecretStr) -> SpecAcceptance | None:
    """Draft acceptance over the server's life so far (health-wait, warm-up, benchmark): its
    ``/metrics`` counters, else the engine's SpecDecoding log lines; None when neither has any."""

    async def scrape() -> str | None:
        async with VllmClient(server.base_url, api_key=key.get_secret_value() or None) as client:
            return await client.metrics_text()

    text = run_sync(scrape)
    counters = prometheus.spec_counters(prometheus.parse_text(text)) if text else None
    if counters is not None:
        return mtp.acceptance(counters, "metrics")
    logged = specdecode_log.aggregate(specdecode_log.parse_lines(server.logs()))
    return mtp.acceptance(logged, "log") if logged is not None else None


def mtp_ab_stage(record: RunRecord, backend: Backend, loaded: ColdLoad, key: SecretStr, prepared: Prepared,
                 prof: ModelProfile, timeout_s: float, *, keep_serving: bool = False) -> Server | None:
    """Benchmark the same image and commit again without ``--speculative-config``, and compare point by
    point (``roost.bench.mtp``) into ``record.mtp_ab``, with the speculative run's draft acceptance.

    Stops the speculative server (``loaded``) first: one server per host. The baseline server is
    always stopped. With ``keep_serving`` the speculative server is started again and returned (the
    landing leaves it serving); else None. Skipped (with a warning) when the server runs without
    ``--speculative-config``.
    """
    logger = get_run_logger()
    args = list(loaded.spec.vllm_args)
    config = mtp.speculative_config(args)
    with stage(record, "mtp-ab") as st:
        if config is None:
            st.status, st.note = "skipped", "the server runs without --speculative-config: nothing to compare"
            logger.warning("MTP A/B: %s", st.note)
            return None
        ab = MtpAB(speculative_config=config, baseline_vllm_args=mtp.without_speculative(args),
                   acceptance=spec_acceptance(loaded.server, key))
        record.mtp_ab = ab
        loaded.server.stop()
        logger.info("MTP A/B: speculative server stopped; starting without --speculative-config (same image)")
        base = _cold_load(record, backend, loaded.spec.model_copy(update={"vllm_args": ab.baseline_vllm_args}), key,
                          prepared, timeout_s)
        try:
            ab.baseline_start_to_healthy_s = base.readiness.completion_ok_s
            settings = bench_settings(record, prof, ab.baseline_vllm_args)
            try:
                bench = benchmark_task(base.server.base_url, prof.served_model_name, settings, key,
                                       profile=record.meta.profile, host=record.meta.host)
            except BenchFailed as exc:
                ab.baseline_points = exc.result.points
                ab.points = mtp.compare(record.points, ab.baseline_points)
                classify_exit(exc, base.server)
                raise
            ab.baseline_points = bench.points
            ab.points = mtp.compare(record.points, bench.points)
        except BaseException as exc:
            base.server.stop(stop_grace(exc))
            raise
        base.server.stop()
        st.note = mtp.describe(ab)
        logger.info("MTP A/B: %s", st.note)
    if not keep_serving:
        return None
    with stage(record, "mtp-ab-restore"):
        return _cold_load(record, backend, loaded.spec, key, prepared, timeout_s).server


def _cold_load(record: RunRecord, backend: Backend, spec: ServeSpec, key: SecretStr, prepared: Prepared,
               timeout_s: float) -> ColdLoad:
    """A cold load outside the serving stage (its attempts are not the landing's)."""
    def wait(srv: Server) -> Readiness:
        return health_wait_task(srv, key, timeout_s, profile=record.meta.profile, host=record.meta.host)

    return cold_load(lambda s: serve_task(backend, s, key, prepared), wait, spec, log=get_run_logger().warning)


# --- 8. report --------------------------------------------------------------------------------------


def report_stage(
    record: RunRecord, notify: bool, prof: ModelProfile | None = None, host: HostProfile | None = None
) -> RegressionReport | None:
    """Store the run, compare it with its baseline (as the profile's ``regress`` says), write the
    report, and publish its artifacts on the flow run (with the results URL of ``ROOST_RESULTS_URL`` or
    ``host.results_url``, so the UI opens the charts and the report); then the Slack message (failed
    runs too). An artifact the API refuses is logged; the run is still reported. Returns the comparison
    with the baseline (None when it could not be made), for ``finish``'s verdict."""
    url = results_url_for(host.results_url if host is not None else "", get_run_logger())
    report: ReportOutcome | None = None
    with stage(record, "report"):
        report = report_task(record, regress_config=prof.regress_config() if prof is not None else None,
                             results_url=url)
        record.report_path = str(report.markdown or "")
        store = current_store()
        if isinstance(store, KeepLocalCopy) and store.failed:  # measured, stored on the worker only (or nowhere)
            get_run_logger().error("%s", store.message)
            mark_failed(record, "report", store.kept_failure())
        try:
            report.artifact_keys = publish_artifacts(record, report)
        except Exception as exc:  # the API refused an artifact: the files and the store have the report
            get_run_logger().error("could not publish the report artifacts: %s", exc)
            report.errors.append(f"artifacts: {exc}")
    if notify:
        notify_task(record, report)
    return report.comparison if report is not None else None


def finish(record: RunRecord, flow_name: str, failure: RoostError | None = None,
           comparison: RegressionReport | None = None) -> dict[str, Any]:
    """Tag the flow run with the run's verdict (``verdict:<kind>``, ``roost.naming.run_verdict`` of the
    report stage's ``comparison``); fail it when the run failed (with ``failure`` itself when given,
    so a user's mistake keeps its exit code); else log where the report is and end the run Completed
    with the verdict as its message ("regressed: Decode -46.0% vs runs A, B, C", "ok", ...).

    The Completed state carries the record as JSON: Prefect makes a returned state the run's final
    state and hands its data to whoever called the flow, so to every caller this is the record dict.
    """
    verdict = run_verdict(record, comparison)
    tag_run(verdict.tag)
    if record.status == "failed":
        if failure is not None:
            raise failure
        raise StageFailed(record.failed_stage or flow_name, record.failure_message)
    logger = get_run_logger()
    logger.info("report: %s", record.report_path)
    logger.info("verdict: %s", verdict.message)
    final: State[dict[str, Any]] = Completed(message=verdict.message, data=record.model_dump(mode="json"))
    return cast(dict[str, Any], final)


def fail_unexpected(record: RunRecord, exc: BaseException) -> None:
    """Record a failure that is not roost's own (a crash, a cancellation) as a failed run, so it is
    reported and stored like any other."""
    if record.status != "failed":
        record.status, record.failed_stage = "failed", record.failed_stage or "setup"
        record.failure_message = str(exc) or type(exc).__name__
        record.failure_class = record.failure_class or "internal_error"
