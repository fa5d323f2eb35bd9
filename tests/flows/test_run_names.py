"""A flow run's name as the Prefect UI and its log show it (issue 39): unique and final before the run's first
log line, renamed with the commit once known, and Prefect's own last line ("Finished in state ...") under the
final name; the record keeps which Prefect UI holds the run.

Real parts: roost's naming (``flows/identity.py``) and record factory (``flows/lifecycle.new_record``) in a
small in-process flow against the session's Prefect server (``prefect_api``); the log lines read back from
its API (``support.flow_logs``), and Prefect's console lines caught as the engine emits them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL, temporary_settings
from support.flow_logs import run_log_messages

from flows.identity import initial_run_name, name_run, server_ui_url
from flows.lifecycle import new_record
from roost.hosts import get_host
from roost.profiles import get_profile

COMMIT = "be05eef0c0ffee0123456789abcdef0123456789"
TIME = r"\d\d-\d\d \d\d:\d\d:\d\d UTC"

_given: list[str] = []
"""The name each run had when Prefect asked for roost's (Prefect's random one)."""


def _named() -> str:
    ctx = FlowRunContext.get()
    assert ctx is not None and ctx.flow_run is not None
    _given.append(ctx.flow_run.name)
    return initial_run_name()


@flow(name="roost-test-named", flow_run_name=_named)
def named(profile: str = "local", host: str = "", revision: str | None = None, commit: str = "") -> dict[str, Any]:
    """What ``land`` does to its name: a record made (renamed with the profile's host), then the commit."""
    ctx = FlowRunContext.get()
    assert ctx is not None and ctx.flow_run is not None
    prof = get_profile(profile)
    record = new_record(prof, get_host(host or prof.host), revision)
    before = ctx.flow_run.name
    name_run(record.meta.profile, record.meta.host, commit)  # the download stage, once the Hub answered
    get_run_logger().info("commit known")
    return {"id": str(ctx.flow_run.id), "before": before, "name": ctx.flow_run.name,
            "ui": record.meta.prefect_ui_url}


class _Lines(logging.Handler):
    """Prefect's flow-run lines as emitted (the console shows ``Flow run <flow_run_name> - <message>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((str(getattr(record, "flow_run_id", "")), str(getattr(record, "flow_run_name", "")),
                           record.getMessage()))


@pytest.fixture
def lines() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("prefect.flow_runs")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_run_has_its_name_before_its_first_line_and_ends_under_the_final_one(prefect_api: str,
                                                                                 lines: _Lines) -> None:
    out = named(profile="local", commit=COMMIT)
    random_name = _given[-1]
    messages = run_log_messages(out["id"], flush_s=10)
    first = re.fullmatch(rf"Beginning flow run 'roost-test-named · local · ({TIME})' for flow 'roost-test-named'",
                         messages[0])  # no host given: the profile's came with the record, no commit yet
    assert first, messages[0]
    assert out["before"] == f"roost-test-named · local · cpu · {first.group(1)}"
    assert out["name"] == f"roost-test-named · local · cpu · be05eef · {first.group(1)}"  # its start kept
    assert not [m for m in messages if random_name in m]
    assert "commit known" in messages and any(m.startswith("Finished in state Completed") for m in messages)

    mine = [(name, message) for run_id, name, message in lines.lines if run_id == out["id"]]
    assert not [name for name, _ in mine if random_name in name]
    finished = [name for name, message in mine if message.startswith("Finished in state")]
    assert finished == [out["name"]]  # the engine's logger was made before the rename
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(out["id"]).name == out["name"]

    assert out["ui"] == prefect_api.removesuffix("/api")  # the server that holds the run, for later reports


def test_a_full_sha_names_the_run_from_the_start_and_each_run_ends_under_its_own_name(prefect_api: str,
                                                                                      lines: _Lines) -> None:
    renamed = named(profile="local", host="cpu", commit=COMMIT)
    pinned = named(profile="local", host="cpu", revision=COMMIT.upper(), commit=COMMIT)
    assert pinned["before"] == pinned["name"] and " · be05eef · " in pinned["name"]
    finished = {run_id: name for run_id, name, message in lines.lines if message.startswith("Finished in state")}
    assert finished[pinned["id"]] == pinned["name"] and finished[renamed["id"]] == renamed["name"]


def test_no_lasting_server_no_ui_recorded() -> None:
    with temporary_settings(updates={PREFECT_UI_URL: "http://127.0.0.1:4200"}, restore_defaults={PREFECT_API_URL}):
        assert server_ui_url() == ""  # roost run's temporary server: gone after the run
    with temporary_settings(updates={PREFECT_API_URL: "http://prefect.team:4200/api"}, restore_defaults={PREFECT_UI_URL}):
        assert server_ui_url() == "http://prefect.team:4200"
