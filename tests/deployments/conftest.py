"""Fixtures for the deployment tests: workers started on demand (stopped at module end), ``roost
setup`` applied twice per session, and the test-only hold deployments. Helpers: ``roost_workers``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from roost_workers import BIN, HOLD_ENTRYPOINT, POOL, REPO, Worker, run_setup, worker_online

from blocks.resolve import all_profiles, load_host
from deployments.deploy import apply_deployment, build_deployment


@pytest.fixture(scope="module")
def start_worker(prefect_api: str, session_dir: Path) -> Iterator[Callable[[str, str], Worker]]:
    """Start workers on demand (``start_worker(queue, name)``); all are stopped at the end."""
    started: list[Worker] = []

    def start(queue: str, name: str) -> Worker:
        log = session_dir / f"worker-{name}.log"
        env = dict(os.environ, PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_WORKER_PREFETCH_SECONDS="5",
                   PREFECT_WORKER_HEARTBEAT_SECONDS="5")
        proc = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--work-queue", queue, "--name", name,
             "--type", "process"],
            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        w = Worker(name=name, queue=queue, proc=proc, log=log)
        started.append(w)
        worker_online(name)
        return w

    yield start
    for w in started:
        w.stop()


@pytest.fixture(scope="session")
def roost_setup(prefect_api: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``roost setup`` run twice against the session's server (the reports of both runs).

    Earlier tests in the session (tests/blocks) may have registered roost's block types (and the
    legacy ``spark-host``) on the shared server; they are removed first so that the first run starts
    from a server roost never touched."""
    _forget_roost_block_types()
    return run_setup(), run_setup()


def _forget_roost_block_types() -> None:
    with get_client(sync_client=True) as client:
        for slug in ("roost-host", "spark-host", "model-profile", "roost-slack-notifier"):
            try:
                block_type = client.read_block_type_by_slug(slug)
            except ObjectNotFound:
                continue
            for doc in client.read_block_documents_by_type(slug):
                assert doc.id is not None
                client.delete_block_document(doc.id)
            client.delete_block_type(block_type.id)


@pytest.fixture(scope="session")
def hold_deployments(roost_setup: Any) -> list[str]:
    """``roost-test-hold/<host>`` for spark and cpu, on the hosts' queues like ``land``."""
    names = []
    for host in ("spark", "cpu"):
        dep = build_deployment("roost-test-hold", load_host(host), pool=POOL, profiles=all_profiles(),
                               source=REPO, entrypoint=HOLD_ENTRYPOINT)
        apply_deployment(dep)
        names.append(dep.full_name)
    return names


