"""Stage 5, ``host-slot`` and ``host-check``: one server per host, and room for this one.

The slot is held until the run's teardown (``flows.lifecycle``); the check refuses occupants roost did
not start (or stops them with ``replace``), stops roost's own server and measures the memory left.
"""

from __future__ import annotations

import contextlib

from prefect import get_run_logger

from flows.stages.audit import ServePlan
from flows.stages.timing import stage
from roost.hosts import HostProfile
from roost.records import RunRecord
from roost.serve.base import Backend, ServeSpec
from roost.serve.occupancy import memory_refusal, occupancy_refusal
from roost.units import format_memory
from tasks.host_slot import ensure_host_limit, host_slot
from tasks.serve import backend_log


def host_slot_stage(record: RunRecord, host: HostProfile, teardown: contextlib.ExitStack) -> None:
    """Wait for the host's serving slot (one run serves on a host at a time) and hold it until
    ``teardown`` closes."""
    with stage(record, "host-slot") as st:
        ensure_host_limit(host.name)
        held = teardown.enter_context(host_slot(host.name))
        if held.waited_s >= 1:
            st.note = f"waited {held.waited_s:.0f} s for another run on host {host.name} to finish"


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
            # imported here: the monitoring sync loads Docker's SDK, which a run that retires nothing never uses
            from tasks.gateway import deregister_host
            from tasks.monitor import sync_monitoring

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
