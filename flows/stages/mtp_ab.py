"""Stage 9, ``mtp-ab``: the same image and commit again without ``--speculative-config``, compared
point by point with the speculative run, with its draft acceptance (``roost.bench.mtp``)."""

from __future__ import annotations

from prefect import get_run_logger
from pydantic import SecretStr

from flows.stages.benchmark import classify_exit
from flows.stages.serve import restart
from flows.stages.timing import stage
from roost.bench import mtp
from roost.bench.acceptance import spec_acceptance
from roost.bench.settings import for_server
from roost.profiles import ModelProfile
from roost.records import MtpAB, RunRecord
from roost.serve.base import Backend, Prepared, stop_grace
from roost.serve.coldload import ColdLoad
from tasks.benchmark import BenchFailed, benchmark_task


def mtp_ab_stage(record: RunRecord, backend: Backend, loaded: ColdLoad, key: SecretStr, prepared: Prepared,
                 prof: ModelProfile, timeout_s: float, *, keep_serving: bool = False) -> None:
    """Benchmark the same image and commit again without ``--speculative-config``, and compare point by
    point (``roost.bench.mtp``) into ``record.mtp_ab``, with the speculative run's draft acceptance.

    Stops the speculative server (``loaded``) first: one server per host. The baseline server is
    always stopped. With ``keep_serving`` the speculative server is started again from the same spec
    (same port: the gateway's registration still holds) and left serving. Skipped (with a warning)
    when the server runs without ``--speculative-config``.
    """
    logger = get_run_logger()
    args = list(loaded.spec.vllm_args)
    config = mtp.speculative_config(args)
    with stage(record, "mtp-ab") as st:
        if config is None:
            st.status, st.note = "skipped", "the server runs without --speculative-config: nothing to compare"
            logger.warning("MTP A/B: %s", st.note)
            return
        ab = MtpAB(speculative_config=config, baseline_vllm_args=mtp.without_speculative(args),
                   acceptance=spec_acceptance(loaded.server, key))
        record.mtp_ab = ab
        loaded.server.stop()
        logger.info("MTP A/B: speculative server stopped; starting without --speculative-config (same image)")
        base = restart(record, backend, loaded.spec.model_copy(update={"vllm_args": ab.baseline_vllm_args}), key,
                       prepared, timeout_s)
        try:
            _measure_baseline(record, ab, base, key, prof)
        except BaseException as exc:
            base.server.stop(stop_grace(exc))
            raise
        base.server.stop()
        st.note = mtp.describe(ab)
        logger.info("MTP A/B: %s", st.note)
    if keep_serving:
        with stage(record, "mtp-ab-restore"):
            restart(record, backend, loaded.spec, key, prepared, timeout_s)


def _measure_baseline(record: RunRecord, ab: MtpAB, base: ColdLoad, key: SecretStr, prof: ModelProfile) -> None:
    """Benchmark the server started without ``--speculative-config`` into ``ab``, point by point
    against the speculative run's points (kept as far as they go when the sweep is cut short)."""
    ab.baseline_start_to_healthy_s = base.readiness.completion_ok_s
    settings = for_server(ab.baseline_vllm_args, record.decode_ceiling_tok_s, prof.bench)
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
