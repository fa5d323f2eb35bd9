"""The preflight task against an unreachable Hub: one retry layer. roost's client asks as often as its
message says (3 attempts at an endpoint that never answered, "the most roost makes"); Prefect's own
``retries`` do not ask again, so the task run has one attempt (issue 39: it used to be 9 requests)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client

from roost.hub.errors import HubUnreachable
from roost.net import free_port
from roost.plan.inputs import PlanInputs
from roost.profiles import ModelProfile
from tasks.preflight import preflight_task

pytestmark = pytest.mark.slow

PROFILE = ModelProfile(name="nowhere", repo_id="acme/nowhere", served_model_name="nowhere", host="cpu")


class HangUp:
    """A loopback listener that accepts each connection and closes it before any answer: a Hub that
    never answers, counting how often it was asked."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.connections += 1
            conn.close()

    def __enter__(self) -> HangUp:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.fixture
def hang_up() -> Iterator[HangUp]:
    with HangUp() as server:
        yield server


def _preflight_at(endpoint: str) -> dict[str, Any]:
    """Run the preflight task (its own retries as declared) in a flow; what the test needs from its state."""

    @flow
    def preflight_flow() -> dict[str, Any]:
        state = preflight_task(PROFILE, None, "cpu", PlanInputs(), endpoint=endpoint, return_state=True)
        error = state.result(raise_on_failure=False)
        return {"failed": state.is_failed(), "task_run_id": state.state_details.task_run_id,
                "error": error if isinstance(error, BaseException) else None}

    out: dict[str, Any] = preflight_flow()
    with get_client(sync_client=True) as client:
        out["run_count"] = client.read_task_run(out["task_run_id"]).run_count
    return out


def test_a_closed_port_is_tried_three_times_by_roost_and_not_again_by_prefect(prefect_api: str) -> None:
    assert preflight_task.retries == 2  # Prefect's retries stay for faults roost does not retry
    out = _preflight_at(f"http://127.0.0.1:{free_port()}")
    assert out["failed"] and out["run_count"] == 1
    assert isinstance(out["error"], HubUnreachable)
    assert "3 attempts" in str(out["error"]) and "the most roost makes" in str(out["error"])


def test_a_hub_that_hangs_up_is_asked_exactly_three_times_in_all(prefect_api: str, hang_up: HangUp) -> None:
    out = _preflight_at(hang_up.endpoint)
    assert out["failed"] and out["run_count"] == 1 and isinstance(out["error"], HubUnreachable)
    assert hang_up.connections == 3
