"""Serve stage: start vLLM for a checkpoint on a host, with the backend the host uses.

``process`` backend (the embedded default): vLLM from the vLLM venv as a child process.
``docker`` backend: see ``roost.serve.docker_backend`` (one container per host, label-managed).
Neither persists its result: a running server is not something to cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost.hosts import HostProfile
from roost.serve.base import ServeSpec
from roost.serve.docker_backend import DockerServer, pump_logs, start_docker_server
from roost.serve.process import ProcessServer, reap_stale_servers, start_process_server


@task(name="serve", cache_policy=NO_CACHE, persist_result=False)
def serve_process_task(spec: ServeSpec, api_key: SecretStr, host_name: str) -> ProcessServer:
    """Start vLLM as a local process; stops what a crashed earlier run left on this host first."""
    logger = get_run_logger()
    stale = reap_stale_servers(host_name)
    if stale:
        logger.warning("stopped %d vLLM server(s) a crashed earlier run left on host %s (pids %s)",
                       len(stale), host_name, stale)
    server = start_process_server(spec, api_key=api_key.get_secret_value() or None, host_name=host_name)
    logger.info("vLLM starting (pid %d) at %s serving %s; log %s", server.pid, server.base_url,
                spec.served_model_name, server.log_path)
    return server


# --- docker backend -------------------------------------------------------------------------------

HOST_LIMIT_PREFIX = "roost-serve-"


def host_limit_name(host_name: str) -> str:
    """The global concurrency limit that keeps one server per host: ``roost-serve-<host>``."""
    return f"{HOST_LIMIT_PREFIX}{host_name}"


def ensure_host_limit(host_name: str, limit: int = 1) -> None:
    """Create the host's global concurrency limit when missing (``roost setup`` does this too)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    name = host_limit_name(host_name)
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # created concurrently: fine
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit, active=True))


@contextlib.contextmanager
def host_slot(host_name: str, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the host's single serving slot for the block (serve -> benchmark -> teardown).

    ``strict=True``: a missing limit is an error (ConcurrencySlotAcquisitionError) instead of the
    warning Prefect gives by default, so an unconfigured host can never run two servers at once.
    Run ``roost setup`` (or ``ensure_host_limit``) to create it. ``timeout_s`` bounds the wait for
    a busy host (TimeoutError); None waits as long as the other run serves.
    """
    from prefect.concurrency.sync import concurrency

    # A 60 s lease (renewed while held): a crashed holder frees the host a minute later, not five.
    with concurrency(host_limit_name(host_name), occupy=1, strict=True, timeout_seconds=timeout_s, lease_duration=60):
        yield


@task(name="serve-docker", cache_policy=NO_CACHE, persist_result=False)
def serve_docker_task(spec: ServeSpec, api_key: SecretStr, host: HostProfile, image: str,
                      restart_policy: str = "no", replace_existing: bool = True) -> DockerServer:
    """Start vLLM in a roost-managed container on ``host`` (hold ``host_slot`` around it).

    A roost container already serving on the host is stopped first when ``replace_existing``;
    containers roost did not start are never touched. The container log streams to the Prefect
    logger in the background.
    """
    logger = get_run_logger()
    server = start_docker_server(spec, host, image=image, api_key=api_key.get_secret_value() or None,
                                 restart_policy=restart_policy, replace_existing=replace_existing,
                                 log=logger.info)
    logger.info("container %s (%s) starting from %s at %s serving %s", server.name, server.id[:12], image,
                server.base_url, spec.served_model_name)
    pump_logs(server, lambda line: logger.info("[%s] %s", server.name, line))
    return server
