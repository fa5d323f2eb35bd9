"""Stage 8c, ``benchmark-gateway``: a kept server measured through the door its clients use.

A landing that keeps its server registers it for the metering gateway (``flows.stages.gateway``).
From then on, clients reach it through the gateway; so do the landing's own measurements:

- :func:`gateway_door` opens the way (the run's key, kind ``app``, issued in the gateway's database,
  the served model routed) and revokes the key when the run's measurements end;
- :func:`measured_directly` marks the server's registration while roost sends it traffic directly
  (probes, the direct benchmark, the MTP A/B), so the bypass alert stays quiet for it;
- :func:`gateway_benchmark_stage` runs the same sweep through the gateway, checks that the gateway
  metered what the benchmark counted, and keeps both in ``record.gateway``;
- the evaluations then go through the gateway with the same key (``flows/land.py``).

No door (no gateway configured or answering, a gateway with another database): ``record.gateway``
says why, and the run measures directly only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from prefect import get_run_logger
from pydantic import SecretStr

from flows.stages.timing import stage
from roost import catalogue as C
from roost.bench.gateway_hop import counted_usage, hop_points, summarize
from roost.bench.settings import for_server
from roost.hosts import HostProfile
from roost.profiles import ModelProfile
from roost.records import GatewayPass, RunRecord, Usage
from roost.store import append_requests
from tasks.benchmark import BenchFailed, benchmark_task

if TYPE_CHECKING:
    from roost.gateway.door import Door

# The gateway's modules (its database layer: SQLAlchemy) load only when a run keeps its server: a one-off
# landing's flow-run process does not import them (``benchmarks/bench_orchestration.py --via-deployment``).


@contextlib.contextmanager
def gateway_door(record: RunRecord, host: HostProfile, served_model_name: str, keep_serving: bool) -> Iterator[Door | None]:
    """The way through the gateway for a kept server's measurements (None: measure directly only)."""
    if not keep_serving:
        yield None
        return
    from tasks.gateway_door import close_door_task, open_door_task

    door = open_door_task(host.gateway_url, host.name, served_model_name)
    if isinstance(door, str):
        record.gateway = GatewayPass(url="", status="skipped", note=door)
        yield None
        return
    record.gateway = GatewayPass(url=door.display, key_name=door.key_name, status="skipped",
                                 note="the run ended before its benchmark through the gateway")
    try:
        yield door
    finally:
        try:
            close_door_task(door)
        except Exception as exc:  # the key expires with nothing; the next run on the host revokes it
            get_run_logger().warning("gateway: could not revoke %s (%s); the next run on %s revokes it",
                                     door.key_name, type(exc).__name__, host.name)


@contextlib.contextmanager
def measured_directly(base_url: str, keep_serving: bool) -> Iterator[None]:
    """While roost sends a kept server traffic directly, its registration says so (the gateway exports
    it; the bypass rule exempts the model for its window)."""
    if not keep_serving:
        yield
        return
    from roost.gateway import registry

    with registry.direct_traffic(base_url):
        yield


def gateway_benchmark_stage(record: RunRecord, door: Door | None, prof: ModelProfile, key: SecretStr, base_url: str,
                            served_model_name: str | None = None) -> None:
    """The record's sweep again, through ``door`` (prompts sized and ``/metrics`` read at ``base_url``,
    the server, with ``key``): ``record.gateway`` gets its points, the benchmark's own count of requests
    and tokens and what the gateway metered for the key. A sweep the gateway cut short is kept and said,
    never a failed landing: the direct measurement stands."""
    if door is None:
        return
    from tasks.gateway_door import metered_task

    settings = for_server(record.meta.vllm_args, record.decode_ceiling_tok_s, prof.bench)
    bench_on = benchmark_task.with_options(name="benchmark-gateway")
    with stage(record, "benchmark-gateway") as st:
        since = time.time() - 1.0  # usage rows carry the request's start; the gateway runs on this host's clock
        status: Literal["measured", "failed"] = "measured"
        note = ""
        try:
            bench = bench_on(door.url, served_model_name or prof.served_model_name, settings, door.key,
                             profile=record.meta.profile, host=record.meta.host, server_url=base_url, server_key=key)
        except BenchFailed as exc:
            bench, status, note = exc.result, "failed", "; ".join(exc.result.errors)
        rows = bench.request_rows()
        append_requests(record.meta, rows, route="gateway")
        counted = counted_usage(rows)
        try:
            metered: Usage | None = metered_task(door, since, counted.requests)
        except Exception as exc:  # the database away: the measurement stands, the check is said undone
            metered = None
            note = "; ".join(filter(None, [note, f"the gateway's usage could not be read ({type(exc).__name__})"]))
        if metered is not None and metered != counted:
            note = "; ".join(filter(None, [note, f"the gateway metered {metered.model_dump()} for {door.key_name}, "
                                                 f"the benchmark counted {counted.model_dump()}"]))
        record.gateway = GatewayPass(url=door.display, key_name=door.key_name, status=status, note=note,
                                     points=bench.points, counted=counted, metered=metered)
        hop = summarize(hop_points(record.points, bench.points))
        st.note = (f"{door.display}: {C.GATEWAY_ADDED_TTFT.label} {C.fmt_value(hop.added_ttft_ms_median, 'ms')} "
                   f"(median of {hop.points} points), lowest {C.GATEWAY_THROUGHPUT_RATIO.label} "
                   f"{C.fmt_value(hop.throughput_ratio_min, 'x')}; metered "
                   f"{'= counted' if metered == counted else '≠ counted'}")
        log = get_run_logger()
        if note:
            log.warning("gateway benchmark: %s", note)
        log.info("gateway benchmark: %s", st.note)
