"""Serve stage: start vLLM for a checkpoint on a host with the host's backend (``roost.serve``).

Not cached: a running server is not something to cache. The server's log lines go to the Prefect
logger as they come (and backend warnings, e.g. a stale server reaped, as warnings), except the API
server's one access-log line per HTTP request: a benchmark sends thousands, and they stay in the
server's own log.
"""

from __future__ import annotations

from collections.abc import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost.serve.base import Backend, Prepared, Server, ServeSpec
from roost.serve.vllm_log import is_access_log

WARNING_PREFIX = "warning: "


def backend_log() -> Callable[[str], None]:
    """A backend's ``log`` callback for the current run: ``warning: ...`` lines as warnings, the API
    server's access-log lines dropped, the rest as info."""
    logger = get_run_logger()

    def log(line: str) -> None:
        if is_access_log(line):
            return
        if line.startswith(WARNING_PREFIX):
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
