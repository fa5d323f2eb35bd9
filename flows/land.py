"""The ``land`` flow: a checkpoint on the Hub -> a measured vLLM server, top to bottom.

    download -> integrity audit (+ KV plan) -> container build -> serve -> health-wait
             -> benchmark -> report (+ Slack)

Every stage is one task in ``tasks/<stage>.py``; this file only chains them, times them into
the run record, and guarantees the teardown: the server it started is stopped whatever happened
(unless ``keep_serving``), and a report is written for failed runs too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from pydantic import SecretStr

import roost
from roost.errors import RoostError, StageFailed
from roost.hosts import HostProfile
from roost.net import free_port
from roost.plan.preflight import PlanRefused, PlanReport
from roost.profiles import ModelProfile
from roost.records import RunMeta, RunRecord, StageTiming
from roost.serve.base import RestartPolicy, ServeSpec, check_vllm_args
from roost.serve.health import server_version
from roost.settings import roost_home

MAX_COLD_LOAD_ATTEMPTS = 3


@contextlib.contextmanager
def _stage(record: RunRecord, name: str) -> Iterator[StageTiming]:
    """Time one stage into ``record.stages``; a failure marks the run failed at this stage."""
    timing = StageTiming(stage=name, seconds=0.0)
    t0 = time.perf_counter()
    try:
        yield timing
    except BaseException as exc:
        timing.status = "failed"
        if record.status != "failed":
            record.status, record.failed_stage = "failed", name
            record.failure_message = str(exc) or type(exc).__name__
            if not record.failure_class:  # a cold load sets its own (roost.serve.diagnose)
                record.failure_class = getattr(exc, "failure_class", "") or f"{name.replace('-', '_')}_failed"
                record.remediation = getattr(exc, "remediation", "")
        raise
    finally:
        timing.seconds = time.perf_counter() - t0
        record.stages.append(timing)


def _api_key() -> SecretStr:
    """The key vLLM requires: ``VLLM_API_KEY`` if set, else the ``roost-vllm-api-key`` Secret block
    if saved, else a fresh one for this run only. Never logged."""
    from blocks.resolve import load_vllm_api_key

    return load_vllm_api_key() or SecretStr(secrets.token_urlsafe(24))


def _checkpoint_dir(prof: ModelProfile) -> Path:
    return roost_home() / "models" / prof.repo_id.replace("/", "--")


@flow(name="land", flow_run_name="land-{profile}", log_prints=False)
def land(
    profile: str = "local",
    revision: str | None = None,
    host: str | None = None,
    vllm_overrides: list[str] | None = None,
    keep_serving: bool = False,
    port: int | None = None,
    notify: bool = True,
    restart_policy: RestartPolicy = "no",
) -> dict[str, Any]:
    """Land ``profile`` on ``host`` and measure it. Returns the run record (as JSON-able dict)."""
    from tasks.audit import audit_task, plan_task
    from tasks.download import download_task
    from tasks.health import health_wait_task
    from tasks.local_hub import local_hub_task
    from tasks.serve import ensure_host_limit, host_slot

    logger = get_run_logger()
    from blocks.resolve import load_host, load_profile

    check_vllm_args(list(vllm_overrides or []), source="vllm_overrides")
    prof = load_profile(profile)  # a saved model-profile block document wins over the built-in
    check_vllm_args(list(prof.vllm_overrides), source=f"model profile {prof.name}: vllm_overrides")
    host_p: HostProfile = load_host(host or prof.host)
    api_key = _api_key()
    ctx = get_run_context()
    record = RunRecord(meta=RunMeta(
        roost_version=roost.__version__, profile=prof.name, repo_id=prof.repo_id,
        revision=revision or prof.revision, commit="", served_model_name=prof.served_model_name,
        host=host_p.name, backend=host_p.backend,
        prefect_flow_run_id=str(getattr(getattr(ctx, "flow_run", None), "id", "")),
    ))
    mirror = None
    server = None
    failure: RoostError | None = None
    slot = contextlib.ExitStack()
    try:
        # 1. download (+ integrity): cached by resolved commit and file fingerprints
        with _stage(record, "download") as st:
            endpoint = None
            if prof.demo:
                mirror = local_hub_task(prof)
                endpoint = mirror.endpoint
            dl = download_task(prof, record.meta.revision, str(_checkpoint_dir(prof)), endpoint=endpoint,
                               token_secret=prof.hf_token_secret)
            record.meta.commit = dl["commit"]
            st.cached = bool(dl["cached"])
            model_dir = Path(dl["local_dir"])

        # 2. audit + plan: header-only; decides vLLM's arguments before any server starts
        with _stage(record, "audit") as st:
            audit_state = audit_task(str(model_dir), host_p.name, return_state=True)
            # the plan sizes what will really be asked for: the profile's and this run's overrides included
            plan_profile = {**prof.model_dump(), "vllm_overrides": [*prof.vllm_overrides, *(vllm_overrides or [])]}
            plan_state = plan_task(str(model_dir), host_p.name, plan_profile, return_state=True)
            record.audit, record.plan = audit_state.result(), plan_state.result()
            st.cached = audit_state.name == "Cached" and plan_state.name == "Cached"
            if st.cached:
                logger.info("audit and plan: cached (checkpoint files unchanged since they were computed)")
            record.decode_ceiling_tok_s = record.audit.get("decode_ceiling_tok_s")
            errors = [f for f in record.audit.get("findings", []) if f.get("severity") == "error"]
            if errors:
                raise StageFailed("audit", "; ".join(f"{f['code']}: {f['message']}" for f in errors))
            vllm_args = [*record.plan.get("vllm_args", []), *prof.vllm_overrides, *(vllm_overrides or [])]
            record.meta.vllm_args = vllm_args
            refusal = PlanReport.model_validate(record.plan).refusal()
            if refusal is not None:  # vLLM would refuse (or run out of memory): no cold load is spent on it
                raise PlanRefused(*refusal)

        # 3. container build (docker backend): base image + xgrammar patch, cached by Dockerfile hash
        with _stage(record, "build") as st:
            start = _build(record, st, host_p, restart_policy)

        # 4+5. serve and health-wait, holding the host's only serving slot until teardown; a failed
        # cold load is classified and retried only if it can succeed
        with _stage(record, "host-slot"):
            ensure_host_limit(host_p.name)
            slot.enter_context(host_slot(host_p.name))
            spec = ServeSpec(model_dir=model_dir, served_model_name=prof.served_model_name,
                             port=port or free_port(), vllm_args=vllm_args)
        server = _serve_until_healthy(record, spec, host_p, prof, api_key, start, health_wait_task)
        record.meta.vllm_version = server_version(server.base_url, api_key.get_secret_value() or None)

        # 6. benchmark
        benchmark_stage(record, server.base_url, prof, api_key)
    except RoostError as exc:
        logger.error("run failed at %s: %s", record.failed_stage or "setup", exc)
        failure = exc
    except BaseException as exc:  # not roost's own: still a failed run, reported and stored as one
        if record.status != "failed":
            record.status, record.failed_stage = "failed", record.failed_stage or "setup"
            record.failure_message = str(exc) or type(exc).__name__
            record.failure_class = record.failure_class or "internal_error"
        raise
    finally:
        if server is not None and not keep_serving:
            server.stop()
            logger.info("server stopped")
        slot.close()
        if mirror is not None:
            mirror.stop()
        # 7. report (failed runs too) and notify
        report_and_notify(record, notify, prof)
    return finish(record, "land", failure)


def benchmark_stage(record: RunRecord, base_url: str, prof: ModelProfile, api_key: SecretStr) -> None:
    """Benchmark the server into ``record.points`` and store one row per request; a sweep cut short
    by a dead server keeps (and stores) every row it measured before failing the stage."""
    from roost.bench.sweep import BenchFailed
    from roost.store import append_requests
    from tasks.benchmark import benchmark_task

    with _stage(record, "benchmark"):
        settings = {**({"max_num_seqs": prof.max_num_seqs} if prof.max_num_seqs else {}), **prof.bench}
        try:
            bench = benchmark_task(base_url, prof.served_model_name, settings, api_key)
        except BenchFailed as exc:
            record.points = exc.result.points
            append_requests(record.meta, exc.result.request_rows())
            raise
        record.points = bench.points
        append_requests(record.meta, bench.request_rows())


def report_and_notify(record: RunRecord, notify: bool, prof: ModelProfile | None = None) -> None:
    """The report stage (store, compare with the baseline as the profile's ``regress`` says, files,
    artifacts) and the Slack message."""
    from tasks.notify import notify_task
    from tasks.report import report_task

    with _stage(record, "report"):
        report = report_task(record, regress_config=prof.regress_config() if prof is not None else None)
        record.report_path = str(report.markdown or "")
    if notify:
        notify_task(record, report)


def finish(record: RunRecord, flow_name: str, failure: RoostError | None = None) -> dict[str, Any]:
    """Fail the flow run when the run failed (with ``failure`` itself when given, so a user's mistake
    keeps its exit code); else log where the report is and return the record."""
    if record.status == "failed":
        if failure is not None:
            raise failure
        raise StageFailed(record.failed_stage or flow_name, record.failure_message)
    get_run_logger().info("report: %s", record.report_path)
    return record.model_dump(mode="json")


def _build(record: RunRecord, st: StageTiming, host_p: HostProfile,
           restart_policy: RestartPolicy = "no") -> Callable[[ServeSpec, SecretStr], Any]:
    """Build the serving image when the host serves through Docker; return how to start a server."""
    from tasks.serve import serve_docker_task, serve_process_task

    logger = get_run_logger()
    if host_p.backend == "process":
        st.status, st.note = "skipped", "process backend: vLLM runs from the vLLM venv; no image to build"
        logger.info("build skipped: host %s uses the process backend", host_p.name)
        if restart_policy != "no":
            logger.warning("restart_policy %s applies to containers only; host %s runs vLLM as a process",
                           restart_policy, host_p.name)
        return lambda spec, key: serve_process_task(spec, key, host_p.name)

    from roost.serve.dockerfile import BuildSpec
    from tasks.build import build_stage

    built = build_stage(BuildSpec(base_image=host_p.base_image, roost_version=roost.__version__), host_p)
    record.meta.image = built.tag
    record.meta.image_digest = built.base_image_digest or built.image_id
    st.cached = built.skipped
    st.note = f"{built.tag} on {built.base_image}"
    return lambda spec, key: serve_docker_task(spec, key, host_p, built.tag, restart_policy=restart_policy)


def _with_kv_pool(args: list[str], pool_bytes: int) -> list[str]:
    """``args`` with ``--kv-cache-memory-bytes`` set to ``pool_bytes`` (replacing any earlier value)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--kv-cache-memory-bytes":
            skip = True
            continue
        if a.startswith("--kv-cache-memory-bytes="):
            continue
        out.append(a)
    return [*out, "--kv-cache-memory-bytes", str(pool_bytes)]


def _serve_until_healthy(record: RunRecord, spec: ServeSpec, host_p: HostProfile, prof: ModelProfile,
                         api_key: SecretStr, start: Callable[[ServeSpec, SecretStr], Any], health_task: Any) -> Any:
    """Start the server and wait for it; classify a failed cold load and retry only what can succeed.

    Transient classes (timeouts, OOM from a server still exiting, port races) are retried with
    backoff; deterministic ones fail at once with the remediation, except a KV pool too small for
    one request, which is raised to what vLLM said it needs and tried once more.
    """
    from roost.serve.diagnose import diagnose
    from roost.serve.health import HealthTimeout
    from roost.serve.vllm_log import parse_vllm_log

    logger = get_run_logger()
    timeout = prof.health_timeout_s or host_p.health_timeout_s
    autofixed = False
    for attempt in range(1, MAX_COLD_LOAD_ATTEMPTS + 1):
        t0 = time.perf_counter()
        server = None
        try:
            with _stage(record, "serve"):
                server = start(spec, api_key)
            with _stage(record, "health-wait"):
                health = health_task(server, api_key, timeout)
        except StageFailed as exc:
            timed_out = isinstance(exc, HealthTimeout)
            if server is None:  # it never started (e.g. Docker refused the port): the backend classified it
                diag = getattr(exc, "diagnosis", None)
            elif hasattr(server, "diagnose"):  # docker: the container's exit status and OOM flag too
                diag = server.diagnose(timed_out=timed_out)
                server.stop()
            else:
                log = server.logs()
                server.stop()
                diag = diagnose(log, server.exit_code(), timed_out=timed_out)
            entry: dict[str, Any] = {"attempt": attempt, "ok": False, "seconds": round(time.perf_counter() - t0, 2),
                                     "vllm_args": list(spec.vllm_args)}
            if diag is not None:
                entry |= {"failure_class": diag.failure_class, "retryable": diag.retryable,
                          "remediation": diag.remediation, "evidence": diag.evidence}
                record.failure_class, record.remediation = diag.failure_class, diag.remediation
            record.serve.attempts.append(entry)
            logger.error("cold load attempt %d failed: %s", attempt,
                         f"{diag.failure_class}: {diag.evidence}" if diag else exc)
            if diag is not None and diag.failure_class == "kv_pool_too_small" and diag.suggested_kv_cache_bytes \
                    and not autofixed and attempt < MAX_COLD_LOAD_ATTEMPTS:
                autofixed = True
                spec = spec.model_copy(update={"vllm_args": _with_kv_pool(spec.vllm_args, diag.suggested_kv_cache_bytes)})
                record.meta.vllm_args = spec.vllm_args
                logger.warning("raising the KV pool to %d bytes (what vLLM said one request needs) and retrying",
                               diag.suggested_kv_cache_bytes)
                continue
            if diag is None or not diag.retryable or attempt == MAX_COLD_LOAD_ATTEMPTS:
                if diag is None:
                    raise
                # the run's message: the class and what to change, then the evidence
                record.failure_message = f"{diag.failure_class}: {diag.remediation} (evidence: {diag.evidence})"
                raise StageFailed(record.failed_stage or "serve", record.failure_message) from None
            if diag.failure_class == "port_in_use":
                spec = spec.model_copy(update={"port": free_port()})  # someone took it: another port
            backoff = min(60.0, 5.0 * 2 ** (attempt - 1))
            logger.warning("retrying the cold load in %.0f s (%s is transient)", backoff, diag.failure_class)
            time.sleep(backoff)
            continue
        except BaseException:  # anything else (a crash, a cancellation): never leave the server behind
            if server is not None:
                server.stop()
            raise
        # healthy: whatever an earlier attempt failed with no longer describes the run (attempts keep it)
        record.status, record.failed_stage, record.failure_message = "completed", "", ""
        record.failure_class, record.remediation = "", ""
        facts = parse_vllm_log(server.logs())
        obs = record.serve
        obs.predicted_kv_cache_tokens = record.plan.get("kv_cache_tokens")
        obs.predicted_max_concurrency = record.plan.get("max_concurrency")
        obs.logged_kv_cache_tokens = facts.kv_cache_tokens
        obs.logged_max_concurrency = facts.max_concurrency
        obs.logged_block_size = facts.attention_block_size
        obs.start_to_healthy_s = health.completion_ok_s
        obs.health_detect_delay_s = health.detect_delay_s
        marks = {m.name: m.at_s for m in health.milestones}
        if hasattr(server, "phases"):  # docker: split from the container's own timestamped log
            phases = server.phases(dt.datetime.fromtimestamp(health.health_ok_at, dt.UTC))
            obs.load_s, obs.compile_s, obs.ready_s = phases.load_s, phases.compile_s, phases.ready_s
        elif "weights loaded" in marks:
            obs.load_s = marks["weights loaded"]
            end = marks.get("API server up", health.health_ok_s)
            obs.compile_s = max(0.0, end - marks["weights loaded"])
            obs.ready_s = max(0.0, health.completion_ok_s - end)
        obs.attempts.append({"attempt": attempt, "ok": True, "seconds": round(time.perf_counter() - t0, 2),
                             "vllm_args": list(spec.vllm_args)})
        return server
    raise StageFailed("serve", "no cold-load attempt left")  # pragma: no cover (loop always returns or raises)
