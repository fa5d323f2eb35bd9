"""Fixtures for the deployment tests: workers started on demand (stopped at module end), ``roost
setup`` applied twice per session, crash alerts turned on towards a local Slack receiver, and the
test-only hold deployments. Helpers: ``roost_workers``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from roost_workers import HOLD_ENTRYPOINT, POOL, REPO, run_setup
from support import workers
from support.legacy_blocks import delete_document
from support.slack import HOOK_SECRET, TOKEN, bot
from support.slack_receiver import SlackReceiver
from support.wait import wait_for
from support.workers import Worker

from blocks.resolve import all_profiles, load_host
from blocks.slack import SLACK_BLOCK
from deployments.deploy import apply_deployment, build_deployment


@pytest.fixture(scope="module")
def start_worker(prefect_api: str, session_dir: Path) -> Iterator[Callable[[str, str], Worker]]:
    """Start workers on demand (``start_worker(queue, name)``); all are stopped at the end."""
    started: list[Worker] = []

    def start(queue: str, name: str) -> Worker:
        started.append(workers.start_worker(name, [queue], pool=POOL, log=session_dir / f"worker-{name}.log"))
        return started[-1]

    yield start
    for w in started:
        w.stop()


@pytest.fixture(scope="session")
def roost_setup(prefect_api: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``roost setup`` run twice against the session's server (the reports of both runs; the first by the
    installed executable, the second in this process).

    Earlier tests in the session (tests/blocks) may have registered roost's block types (and the
    legacy ``spark-host``) on the shared server; they are removed first so that the first run starts
    from a server roost never touched."""
    _forget_roost_block_types()
    return run_setup(executable=True), run_setup()


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


@dataclass
class CrashAlerts:
    """The local Slack receiver crash alerts go to, and the report of the ``roost setup`` that turned them on."""

    receiver: SlackReceiver
    report: dict[str, Any]

    def text_mentioning(self, needle: str, timeout_s: float = 90) -> str:
        """The text of the first ``chat.postMessage`` (to C0ROOSTALERTS, with the bot token) mentioning ``needle``."""
        def mentioning() -> Any:
            return next((c for c in self.receiver.calls("chat.postMessage")
                         if needle in str(c.json().get("text", ""))), None)

        call = wait_for(f"a Slack message mentioning {needle}", mentioning, timeout_s=timeout_s, every_s=1)
        body = call.json()
        assert body["channel"] == "C0ROOSTALERTS"
        assert call.headers.get("Authorization") == f"Bearer {TOKEN}"
        return str(body["text"])


@pytest.fixture(scope="module")
def crash_alerts(roost_setup: Any) -> Iterator[CrashAlerts]:
    """Slack settings (the ``roost-slack`` block: a bot token and channel C0ROOSTALERTS) pointing at a
    local receiver, then ``roost setup``: crash alerts are on. Afterwards the block is deleted and
    ``roost setup`` run again, which turns the alerts off."""
    receiver = SlackReceiver(token=TOKEN, webhook_secret=HOOK_SECRET)
    try:
        bot(receiver).save(SLACK_BLOCK, overwrite=True)
        yield CrashAlerts(receiver, run_setup())
    finally:
        delete_document("roost-slack-notifier", SLACK_BLOCK)
        run_setup()
        receiver.close()


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


