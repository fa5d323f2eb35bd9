"""The ``land`` flow: a checkpoint on the Hub -> a measured vLLM server, top to bottom.

    download -> integrity audit (+ KV plan) -> container build -> serve -> health-wait
             -> benchmark -> report (+ Slack)

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
from flows.stages import (
    api_key,
    audit_stage,
    benchmark_stage,
    build_stage,
    download_stage,
    fail_unexpected,
    finish,
    new_record,
    report_stage,
    serve_stage,
    stage,
)
from roost.errors import RoostError
from roost.net import free_port
from roost.serve.backends import backend_for
from roost.serve.base import RestartPolicy, Server, ServeSpec, check_vllm_args
from tasks.host_slot import ensure_host_limit, host_slot


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
    logger = get_run_logger()
    overrides = list(vllm_overrides or [])
    check_vllm_args(overrides, source="vllm_overrides")
    prof = load_profile(profile)  # a saved model-profile block document wins over the built-in
    check_vllm_args(list(prof.vllm_overrides), source=f"model profile {prof.name}: vllm_overrides")
    host_p = load_host(host or prof.host)
    backend = backend_for(host_p)
    key = api_key()
    record = new_record(prof, host_p, revision)
    server: Server | None = None
    failure: RoostError | None = None
    with contextlib.ExitStack() as teardown:
        try:
            checkpoint = download_stage(record, prof)                          # 1. download + integrity
            plan = audit_stage(record, prof, host_p, checkpoint, overrides)    # 2. audit + KV plan
            prepared = build_stage(record, backend)                            # 3. image (docker hosts)
            with stage(record, "host-slot"):                                   # one server per host
                ensure_host_limit(host_p.name)
                teardown.enter_context(host_slot(host_p.name))
            spec = ServeSpec(model_dir=checkpoint.model_dir, served_model_name=prof.served_model_name,
                             port=port or free_port(), vllm_args=plan.vllm_args, restart_policy=restart_policy)
            loaded = serve_stage(record, backend, spec, key, prepared,        # 4+5. serve + health-wait
                                 prof.health_timeout_s or host_p.health_timeout_s)
            server = loaded.server
            if not keep_serving:
                teardown.callback(_stop, server)
            benchmark_stage(record, server.base_url, prof, key)                # 6. benchmark
        except RoostError as exc:
            logger.error("run failed at %s: %s", record.failed_stage or "setup", exc)
            failure = exc
        except BaseException as exc:  # not roost's own: still a failed run, reported and stored as one
            fail_unexpected(record, exc)
            raise
        finally:
            teardown.close()                                                    # stop the server, free the slot
            report_stage(record, notify, prof)                                  # 7. report (failed runs too) + Slack
    return finish(record, "land", failure)


def _stop(server: Server) -> None:
    server.stop()
    get_run_logger().info("server stopped")
