"""Stage 6, ``serve`` and ``health-wait``: a healthy server, failed cold loads classified and retried."""

from __future__ import annotations

from prefect import get_run_logger
from pydantic import SecretStr

from flows.stages.timing import stage
from roost.records import RunRecord
from roost.serve.base import Backend, Prepared, Readiness, Server, ServeSpec, stop_grace
from roost.serve.coldload import ColdLoad, ColdLoadFailed, cold_load
from roost.serve.observe import record_start, server_version
from tasks.health import health_wait_task
from tasks.serve import serve_task


def serve_stage(record: RunRecord, backend: Backend, spec: ServeSpec, key: SecretStr, prepared: Prepared,
                timeout_s: float) -> ColdLoad:
    """Start the server and wait until it answers; a failed cold load is classified and retried only
    when it can succeed (``roost.serve.policy``). Records one start attempt per try and what vLLM
    logged against what the plan predicted (``roost.serve.observe.record_start``)."""

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
        record.reclassify(exc.failure_class, exc.remediation, exc.message)
        raise
    try:
        record_start(record, loaded)
        record.meta.vllm_version = server_version(loaded.server.base_url, key)
    except BaseException as exc:  # a healthy server whose bookkeeping failed is never left running
        loaded.server.stop(stop_grace(exc))
        raise
    return loaded


def restart(record: RunRecord, backend: Backend, spec: ServeSpec, key: SecretStr, prepared: Prepared,
            timeout_s: float) -> ColdLoad:
    """A cold load outside the serving stage (its attempts are not the landing's: the MTP A/B's)."""
    def wait(srv: Server) -> Readiness:
        return health_wait_task(srv, key, timeout_s, profile=record.meta.profile, host=record.meta.host)

    return cold_load(lambda s: serve_task(backend, s, key, prepared), wait, spec, log=get_run_logger().warning)
