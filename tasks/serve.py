"""Serve stage: start vLLM for a checkpoint on a host with the host's backend (``roost.serve``).

Not cached: a running server is not something to cache. The backend's own messages go to the task's
run logger (``warning: ...`` ones, e.g. a stale server reaped, as warnings). The server's lines go to
the logger ``roost.vllm.server`` (under ``roost``, which Prefect sends to the run as an extra logger)
at the level vLLM wrote them at (``roost.serve.vllm_levels``): its banner, route listing and
shutdown chatter at DEBUG, so not in the run's log at roost's INFO; without ``roost`` among the extra
loggers (no API handler there), to the run logger instead (:func:`server_log`). The API server's one access-log
line per HTTP request is dropped: a benchmark sends thousands, and they stay in the server's own log.

The server's lines keep coming long after this task ended (health wait, benchmark, shutdown). A line
logged from the backend's reader thread, whose context is a copy of this task's, goes to the flow run
itself, never to this task once it is done; a line read by a later task (the health wait's polls)
goes to that task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from uuid import UUID

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging import get_run_logger
from prefect.logging.handlers import APILogHandler
from pydantic import SecretStr

from roost.serve.base import Backend, Prepared, Server, ServeSpec
from roost.serve.logs import ServerLine
from roost.serve.vllm_levels import LevelReader
from roost.serve.vllm_log import is_access_log
from roost.settings import ROOST_LOGGER

WARNING_PREFIX = "warning: "
VLLM_LOGGER = f"{ROOST_LOGGER}.vllm.server"
"""The logger the server's lines go to."""


def _flow_run_id() -> UUID | None:
    """The flow run of the current context (a task's or the flow's own)."""
    ctx = TaskRunContext.get()
    if ctx is not None:
        return ctx.task_run.flow_run_id
    flow = FlowRunContext.get()
    return flow.flow_run.id if flow is not None and flow.flow_run is not None else None


def _reaches_the_api(logger: logging.Logger) -> bool:
    """Whether ``logger`` or an ancestor up to ``roost`` has a Prefect API handler (Prefect puts one on
    ``roost`` when it is among ``PREFECT_LOGGING_EXTRA_LOGGERS``)."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(isinstance(h, APILogHandler) for h in current.handlers):
            return True
        if current.name == ROOST_LOGGER or not current.propagate:
            return False
        current = current.parent
    return False


def server_log() -> Callable[[ServerLine], None]:
    """What the server's lines are logged with: at vLLM's level to :data:`VLLM_LOGGER`, access-log
    lines dropped. A line logged in the thread that made this goes to the task or flow run current
    there; from any other thread (a backend's reader) to the flow run current here, no task run.

    Without ``roost`` among Prefect's extra loggers (an older deployment, a flow started directly),
    :data:`VLLM_LOGGER` has no API handler and root's WARNING level: the lines go to the run logger
    instead, so a failed start's traceback still reaches the run's log."""
    vllm = logging.getLogger(VLLM_LOGGER)
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = (
        vllm if _reaches_the_api(vllm) else get_run_logger())
    levels = LevelReader()
    lock = threading.Lock()  # the reader is driven by the backend's follower and by its catch-up at stop
    home = threading.get_ident()
    elsewhere = {"flow_run_id": _flow_run_id(), "task_run_id": None}

    def log(line: ServerLine) -> None:
        with lock:
            level = levels.read(line.text).log_level  # every line: a continuation takes the level of its first
        if is_access_log(line.text) or not logger.isEnabledFor(level):
            return
        logger.log(level, "%s", str(line), extra=None if threading.get_ident() == home else elsewhere)

    return log


def backend_log() -> Callable[[str], None]:
    """A backend's ``log`` callback for the current run: the server's lines to :func:`server_log`;
    the backend's ``warning: ...`` lines as warnings, its other lines as info, to the run logger."""
    logger = get_run_logger()
    server_lines = server_log()

    def log(line: str) -> None:
        if isinstance(line, ServerLine):
            server_lines(line)
        elif line.startswith(WARNING_PREFIX):
            logger.warning(line.removeprefix(WARNING_PREFIX))
        else:
            logger.info(line)

    return log


@task(name="serve", cache_policy=NO_CACHE, persist_result=False)
def serve_task(backend: Backend, spec: ServeSpec, api_key: SecretStr, prepared: Prepared) -> Server:
    """Start one server for ``spec`` and return at once (``tasks/health.py`` waits for it)."""
    logger = get_run_logger()
    server = backend.start(spec, api_key.get_secret_value() or None, prepared, log=backend_log())
    info = server.describe()
    where = f"pid {info.pid}" if info.pid is not None else f"container {info.container}"
    logger.info("vLLM starting (%s) at %s serving %s; log: %s", where, info.base_url, info.served_model_name,
                info.log_location)
    return server
