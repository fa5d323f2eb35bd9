"""The ``land`` flow: a checkpoint on the Hub -> a measured vLLM server, top to bottom.

    preflight (audit + KV plan from the Hub's headers) -> download -> evaluation datasets
             -> integrity audit (+ KV plan) -> container build -> host check -> serve -> health-wait
             -> gateway registration (a kept server) -> probes (reasoning, tools, structured output)
             -> vision probe (towers) -> benchmark
             -> accuracy evaluations -> MTP A/B (when asked) -> report (+ Slack)

Each step is a stage in ``flows/stages.py`` (one Prefect task each, in ``tasks/<stage>.py``); this
file chains them and guarantees the teardown: the server it started is stopped whatever happened
(unless ``keep_serving``), the host's serving slot is released, and a report is written for failed
runs too.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prefect import flow, get_run_logger

from blocks.resolve import load_host, load_profile
from flows.identity import initial_run_name
from flows.stages import (
    api_key,
    audit_stage,
    benchmark_stage,
    build_stage,
    download_stage,
    eval_datasets_stage,
    eval_stage,
    fail_unexpected,
    finish,
    gateway_stage,
    host_check_stage,
    hub_source,
    mark_failed,
    mtp_ab_stage,
    new_record,
    preflight_stage,
    probe_stage,
    report_stage,
    results_store,
    serve_stage,
    stage,
    vision_stage,
)
from roost.errors import RoostError
from roost.regress import RegressionReport
from roost.serve.backends import backend_for
from roost.serve.base import RestartPolicy, Server, check_vllm_args, stop_grace
from tasks.host_slot import ensure_host_limit, host_slot


@flow(name="land", flow_run_name=initial_run_name, log_prints=False)
def land(
    profile: str = "local",
    revision: str | None = None,
    host: str | None = None,
    vllm_overrides: list[str] | None = None,
    keep_serving: bool | None = None,
    port: int | None = None,
    notify: bool = True,
    restart_policy: RestartPolicy | None = None,
    replace: bool = False,
    mtp_ab: bool | None = None,
    evaluate: bool = True,
) -> dict[str, Any]:
    """Land ``profile`` on ``host`` and measure it. Returns the run record (as JSON-able dict).

    ``keep_serving``: leave the server up after the run; None: when the profile is the host's production
    model (``production``; ``False`` is the recipe's one-off, ``RESTART=no``). ``port``: None serves on
    the profile's fixed port if it has one, else a free one. ``restart_policy``:
    None is ``unless-stopped`` when ``keep_serving`` (a production landing; the policy moves off the
    host's previous server) and ``no`` otherwise. ``replace``: stop containers roost did not start
    that hold the GPUs or the fixed port (refused otherwise). ``mtp_ab``: after the benchmark, benchmark
    again without ``--speculative-config`` (same image and commit); None: the profile's ``mtp_ab``.
    ``evaluate``: run the profile's accuracy evaluations after the benchmark (``evals``).
    """
    logger = get_run_logger()
    overrides = list(vllm_overrides or [])
    check_vllm_args(overrides, source="vllm_overrides")
    prof = load_profile(profile)  # a saved model-profile block document wins over the built-in
    check_vllm_args(list(prof.vllm_overrides), source=f"model profile {prof.name}: vllm_overrides")
    keep_serving = prof.keeps_serving(keep_serving)
    host_p = load_host(host or prof.host)
    backend = backend_for(host_p)
    key = api_key()
    record = new_record(prof, host_p, revision)
    server: Server | None = None
    failure: RoostError | None = None
    comparison: RegressionReport | None = None
    with results_store(host_p), contextlib.ExitStack() as teardown:     # the shared store, or the worker's
        try:
            with hub_source(prof) as endpoint:                                 # HF_ENDPOINT, or the demo's mirror
                pre = preflight_stage(record, prof, host_p, overrides, endpoint)  # 1. audit + plan from the Hub
                checkpoint = download_stage(record, prof, endpoint)             # 2. download + integrity
                evals = eval_datasets_stage(record, prof, endpoint) if evaluate else []  # 2b. eval questions
            plan = audit_stage(record, prof, host_p, checkpoint, overrides, pre)  # 3. audit on disk + KV plan
            prepared = build_stage(record, backend)                            # 4. image (docker hosts)
            with stage(record, "host-slot") as st:                             # one server per host
                ensure_host_limit(host_p.name)
                held = teardown.enter_context(host_slot(host_p.name))
                if held.waited_s >= 1:
                    st.note = f"waited {held.waited_s:.0f} s for another run on host {host_p.name} to finish"
            spec = prof.serve_spec(checkpoint.model_dir, plan.vllm_args, port=port, keep_serving=keep_serving,
                                   restart_policy=restart_policy)
            host_check_stage(record, backend, spec, plan, replace=replace)      # 5. occupants, memory
            loaded = serve_stage(record, backend, spec, key, prepared,        # 6+7. serve + health-wait
                                 prof.health_timeout_s or host_p.health_timeout_s)
            server = loaded.server
            if not keep_serving:
                teardown.callback(_stop, server)
            else:                                                               # 7a. the gateway routes to it
                gateway_stage(record, server.base_url, prof.served_model_name, host_p)
            probe_stage(record, server.base_url, key, prof)                     # 7b. reasoning, tools, JSON schema
            vision_stage(record, plan, server.base_url, key, prof.served_model_name)  # 7c. image request (towers)
            benchmark_stage(record, server.base_url, prof, key, server=server)  # 8. benchmark
            eval_stage(record, server.base_url, prof, key, evals)               # 8b. accuracy
            if prof.mtp_ab if mtp_ab is None else mtp_ab:                      # 8b. again without MTP
                mtp_ab_stage(record, backend, loaded, key, prepared, prof,
                             prof.health_timeout_s or host_p.health_timeout_s, keep_serving=keep_serving)
        except RoostError as exc:
            logger.error("run failed at %s: %s", record.failed_stage or "setup", exc)
            mark_failed(record, "setup", exc)  # one outside every stage (the demo's Hub mirror) too
            failure = exc
        except BaseException as exc:  # not roost's own: still a failed run, reported and stored as one
            fail_unexpected(record, exc)
            if server is not None and not keep_serving:  # cancelled: stopped fast, then the teardown frees the slot
                server.stop(stop_grace(exc))
            raise
        finally:
            teardown.close()                                                    # stop the server, free the slot
            comparison = report_stage(record, notify, prof, host_p)             # 9. report (failed runs too) + Slack
    return finish(record, "land", failure, comparison)                          # verdict: state message, tags


def _stop(server: Server) -> None:
    server.stop()
    get_run_logger().info("server stopped")
