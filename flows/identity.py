"""The current flow run as the Prefect UI shows it: its name, its verdict tag, and roost's own loggers.

- :func:`initial_run_name` is the ``flow_run_name`` of roost's flows, which Prefect resolves before the
  run's first log line ("Beginning flow run ..."): ``land · <profile> · <host> · 12-06 07:31:02 UTC``
  from the parameters given and the time it starts (UTC, to the second: two runs of one configuration
  differ), with the commit when ``revision`` is a full sha (anything else only the Hub resolves: no
  network call in a name). :func:`name_run` renames the run once the profile's host and the resolved
  commit are known, keeping its start time (``roost.naming.run_name``), and the engine's own last line
  ("Finished in state ...", logged through a logger it made before the rename) carries the new name.
- :func:`server_ui_url`: the Prefect UI of the lasting server the run lives on (recorded on the run,
  so a later report links it only from that server's UI); ``""`` for ``roost run``'s temporary server.
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
import datetime as dt
import logging
from typing import TypeVar

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect.settings import PREFECT_API_URL, PREFECT_LOGGING_EXTRA_LOGGERS, PREFECT_UI_URL

from blocks.slack import STAGE_LABEL
from roost.naming import pinned_commit, run_name
from roost.records import utcnow
from roost.settings import ROOST_LOGGER

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
"""Prefect's run loggers: their lines carry the flow run's name (``flow_run_name``) for its console format."""
REMEMBERED = 256
"""Flow runs of this process whose start and name are kept (a worker process runs one; a test session many)."""

V = TypeVar("V")

_started: dict[str, dt.datetime] = {}
"""Flow run id -> when its name says it started (set by the first name given, kept by the renames)."""
_renamed: dict[str, str] = {}
"""Flow run id -> its name after :func:`name_run` (what :class:`_CurrentName` writes on its lines)."""


class _CurrentName(logging.Filter):
    """A line of a renamed flow run shows the run's current name: Prefect's engine made its logger (and
    its ``flow_run_name``) when the run began, and logs "Finished in state ..." through it at the end."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = _renamed.get(str(getattr(record, "flow_run_id", "")))
        if name is not None and hasattr(record, "flow_run_name"):
            record.flow_run_name = name
        return True


_CURRENT_NAME = _CurrentName()


def _remember(store: dict[str, V], key: str, value: V) -> None:
    """``store[key] = value`` as its newest entry, the oldest dropped beyond :data:`REMEMBERED`."""
    store.pop(key, None)
    store[key] = value
    while len(store) > REMEMBERED:
        store.pop(next(iter(store)))


def _start_of(flow_run: FlowRun | None) -> dt.datetime:
    """When the run's name says it started: remembered from its first name, else its start (or now)."""
    if flow_run is None:
        return utcnow()
    key = str(flow_run.id)
    if key not in _started:
        _remember(_started, key, flow_run.start_time or utcnow())
    return _started[key]


def initial_run_name() -> str:
    """The run's name when it starts (Prefect calls this inside the run's context, before the run's
    first log line): flow, profile, host and the commit as given (a ``land`` without ``host`` gets its
    profile's host, and one of a branch or tag its commit, when :func:`name_run` renames it), and now."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow is None:
        return "roost"
    params = ctx.parameters or {}
    return run_name(ctx.flow.name, str(params.get("profile") or ""), str(params.get("host") or ""),
                    pinned_commit(str(params.get("revision") or "")), _start_of(ctx.flow_run))


def name_run(profile: str, host: str, commit: str = "") -> None:
    """Rename the current flow run to ``<flow> · profile · host · commit7 · <its start>`` (nothing outside
    a run, or when the name is that already); Prefect's own lines of the run say the new name from here on."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    flow_run = ctx.flow_run
    name = run_name(ctx.flow.name if ctx.flow is not None else flow_run.name, profile, host, commit,
                    _start_of(flow_run))
    if name == flow_run.name:
        return
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(flow_run.id, name=name)
    except Exception as exc:  # the name is for people: never fail a run over it
        get_run_logger().warning("could not rename the flow run to %r: %s", name, exc)
        return
    flow_run.name = name  # the engine's own flow run object (the context holds the same one)
    _remember(_renamed, str(flow_run.id), name)
    for logger_name in RUN_LOGGERS:
        logger = logging.getLogger(logger_name)
        if _CURRENT_NAME not in logger.filters:
            logger.addFilter(_CURRENT_NAME)


def server_ui_url() -> str:
    """The Prefect UI of the server this process's flow runs live on: ``PREFECT_UI_URL`` (by default
    ``PREFECT_API_URL`` without ``/api``) when ``PREFECT_API_URL`` names a server; ``""`` without one, as
    ``roost run`` goes when unset: its temporary server is gone after the run, nothing can link to it."""
    if not PREFECT_API_URL.value():
        return ""
    return str(PREFECT_UI_URL.value() or "").rstrip("/")


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
