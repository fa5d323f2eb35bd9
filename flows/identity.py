"""The current flow run as the Prefect UI shows it: its name, its verdict tag, and roost's own loggers.

- :func:`initial_run_name` is the ``flow_run_name`` of roost's flows: ``land · <profile> · <host>``
  from the parameters given (the commit is not known yet); :func:`name_run` renames the run once
  the profile's host and the resolved commit are (``roost.naming.run_name``).
- :func:`tag_run` adds tags (``verdict:<kind>``) to the run; :func:`label_stage` sets its label
  ``roost.stage`` to the stage it is in (the crash alert reports it).
- :func:`roost_logs_to_run`: with ``roost`` among Prefect's extra loggers
  (``PREFECT_LOGGING_EXTRA_LOGGERS``; the deployments and ``roost run`` set it), roost's module
  loggers (``roost.hub`` retries and resumes, ...) send their lines to the run at INFO. Prefect gives
  an extra logger its API handler only; its level is left to roost.

None of these fails a run: a Prefect API problem is logged as a warning and the run carries on.
"""

from __future__ import annotations

import contextlib
import logging

from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect.settings import PREFECT_LOGGING_EXTRA_LOGGERS

from blocks.slack import STAGE_LABEL
from roost.naming import run_name
from roost.settings import ROOST_LOGGER


def initial_run_name() -> str:
    """The run's name when it starts (Prefect calls this inside the run's context): flow, profile and
    host as given (a ``land`` without ``host`` gets its profile's host when :func:`name_run` renames it)."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow is None:
        return "roost"
    params = ctx.parameters or {}
    return run_name(ctx.flow.name, str(params.get("profile") or ""), str(params.get("host") or ""))


def name_run(profile: str, host: str, commit: str = "") -> None:
    """Rename the current flow run to ``<flow> · profile · host · commit7`` (nothing outside a run, or
    when the name is that already)."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    name = run_name(ctx.flow.name if ctx.flow is not None else ctx.flow_run.name, profile, host, commit)
    if name == ctx.flow_run.name:
        return
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, name=name)
        ctx.flow_run.name = name
    except Exception as exc:  # the name is for people: never fail a run over it
        get_run_logger().warning("could not rename the flow run to %r: %s", name, exc)


def tag_run(*tags: str) -> None:
    """Add ``tags`` to the current flow run (kept: the tags it has already)."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    have = list(ctx.flow_run.tags or [])
    want = have + [t for t in tags if t not in have]
    if want == have:
        return
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, tags=want)
        ctx.flow_run.tags = want
    except Exception as exc:
        get_run_logger().warning("could not tag the flow run %s: %s", ", ".join(tags), exc)


def label_stage(name: str) -> None:
    """Set the flow run's label ``roost.stage`` to ``name`` (what a crash alert reports as the last
    stage reached). One API call; outside a flow run nothing; a failure is logged, never raised."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    try:
        with get_client(sync_client=True) as client:  # the engine's own client inside a flow run
            client.update_flow_run_labels(ctx.flow_run.id, {STAGE_LABEL: name})
    except Exception as exc:
        with contextlib.suppress(Exception):
            get_run_logger().debug("could not label the flow run with stage %s: %s", name, type(exc).__name__)


def roost_logs_to_run() -> None:
    """roost's module loggers at INFO when Prefect sends them to the run (``roost`` is an extra
    logger); a level set explicitly (``roost download`` sets INFO itself) is kept."""
    extra = PREFECT_LOGGING_EXTRA_LOGGERS.value() or []
    names = [extra] if isinstance(extra, str) else list(extra)
    logger = logging.getLogger(ROOST_LOGGER)
    if ROOST_LOGGER in names and logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
