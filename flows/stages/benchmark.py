"""Stage 8, ``benchmark``: the concurrency and prompt-length sweep into the record and the store."""

from __future__ import annotations

from prefect import get_run_logger
from pydantic import SecretStr

from flows.stages.timing import stage
from roost.bench.settings import for_server
from roost.errors import RoostError
from roost.profiles import ModelProfile
from roost.records import RunRecord
from roost.serve.base import Server
from roost.serve.observe import exit_diagnosis
from roost.store import append_requests
from tasks.benchmark import BenchFailed, benchmark_task


def benchmark_stage(record: RunRecord, base_url: str, prof: ModelProfile, key: SecretStr,
                    served_model_name: str | None = None, server: Server | None = None) -> None:
    """Benchmark the server into ``record.points`` and store one row per request; a sweep cut short
    by a dead server keeps (and stores) every row it measured before failing the stage, with what
    stopped ``server`` (the one this run started, when given) as the failure class."""
    settings = for_server(record.meta.vllm_args, record.decode_ceiling_tok_s, prof.bench)
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


def classify_exit(exc: RoostError, server: Server) -> None:
    """A measurement cut short by ``server`` exiting fails with what stopped it
    (``roost.serve.observe.exit_diagnosis``), not as a generic stage failure. A server still running
    leaves ``exc`` as it is."""
    death = exit_diagnosis(server)
    if death is None:
        return
    exc.failure_class, exc.remediation = death.failure_class, f"{death.evidence}: {death.remediation}"
    get_run_logger().error("the vLLM server exited mid-run: %s (%s)", death.evidence, death.failure_class)
