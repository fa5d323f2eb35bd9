"""The ``land`` flow: a checkpoint on the Hub -> a measured vLLM server, top to bottom.

Each call is a stage (``flows/stages/<stage>.py``, one Prefect task or more in ``tasks/``); the run
around them (``flows/lifecycle.py``) stops the server this run started whatever happened (unless it
is kept serving), frees the host's serving slot, and reports failed runs too.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from blocks.resolve import load_host, load_profile
from flows.identity import initial_run_name
from flows.lifecycle import api_key, pipeline_run
from flows.stages import (
    audit_stage,
    benchmark_stage,
    build_stage,
    download_stage,
    eval_datasets_stage,
    eval_stage,
    gateway_benchmark_stage,
    gateway_door,
    gateway_stage,
    host_check_stage,
    host_slot_stage,
    hub_source,
    measured_directly,
    mtp_ab_stage,
    preflight_stage,
    probe_stage,
    serve_stage,
    vision_stage,
)
from roost.serve.backends import backend_for
from roost.serve.base import RestartPolicy, check_vllm_args


@flow(name="land", flow_run_name=initial_run_name, log_prints=False)
def land(profile: str = "local", revision: str | None = None, host: str | None = None,
         vllm_overrides: list[str] | None = None, keep_serving: bool | None = None, port: int | None = None,
         notify: bool = True, restart_policy: RestartPolicy | None = None, replace: bool = False,
         mtp_ab: bool | None = None, evaluate: bool = True) -> dict[str, Any]:
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
    overrides = list(vllm_overrides or [])
    check_vllm_args(overrides, source="vllm_overrides")
    prof = load_profile(profile)  # a saved model-profile block document wins over the built-in
    check_vllm_args(list(prof.vllm_overrides), source=f"model profile {prof.name}: vllm_overrides")
    keep_serving = prof.keeps_serving(keep_serving)
    target = load_host(host or prof.host)
    backend, key = backend_for(target), api_key()
    health_timeout_s = prof.health_timeout_s or target.health_timeout_s
    with pipeline_run("land", prof, target, notify=notify, revision=revision) as run:  # the shared store, or the worker's
        record = run.record
        with hub_source(prof) as endpoint:  # HF_ENDPOINT, or the demo's mirror
            pre = preflight_stage(record, prof, target, overrides, endpoint)
            checkpoint = download_stage(record, prof, endpoint)
            evals = eval_datasets_stage(record, prof, endpoint) if evaluate else []
        plan = audit_stage(record, prof, target, checkpoint, overrides, pre)
        prepared = build_stage(record, backend)
        host_slot_stage(record, target, run.teardown)
        spec = prof.serve_spec(checkpoint.model_dir, plan.vllm_args, port=port, keep_serving=keep_serving,
                               restart_policy=restart_policy)
        host_check_stage(record, backend, spec, plan, replace=replace)
        loaded = serve_stage(record, backend, spec, key, prepared, health_timeout_s)
        if keep_serving:
            gateway_stage(record, loaded.server.base_url, prof.served_model_name, target)
        else:
            run.stop_when_done(loaded.server)
        base_url = loaded.server.base_url
        # a kept server is measured as its clients reach it too: through the gateway, with a key of the run's own
        with gateway_door(record, target, prof.served_model_name, keep_serving) as door:
            with measured_directly(base_url, keep_serving):  # the bypass alert knows this traffic is roost's
                probe_stage(record, base_url, key, prof)
                vision_stage(record, plan, base_url, key, prof.served_model_name)
                benchmark_stage(record, base_url, prof, key, server=loaded.server)
            gateway_benchmark_stage(record, door, prof, key, base_url)
            eval_stage(record, door.url if door else base_url, prof, door.key if door else key, evals)
            if prof.mtp_ab if mtp_ab is None else mtp_ab:
                with measured_directly(base_url, keep_serving):
                    mtp_ab_stage(record, backend, loaded, key, prepared, prof, health_timeout_s,
                                 keep_serving=keep_serving)
    return run.result()
