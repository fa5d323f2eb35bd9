"""The suite's own scaffolding (``tests/support``): polling with a deadline, the one-line error, and the flow-log
reader, which must return every line of a run however many there are and however their timestamps fall."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from typing import Any

import pytest
from support.errors import assert_one_line_error, assert_one_line_message
from support.flow_logs import PAGE, run_logs
from support.wait import poll, verdict, wait_for


def counter(*values: Any) -> Any:
    """A check that gives ``values`` in turn, then the last one for ever."""
    it = itertools.chain(values, itertools.repeat(values[-1]))
    return lambda: next(it)


def test_poll_returns_the_first_value_done_accepts_or_the_last_one() -> None:
    assert poll(counter(0, 1, 2, 3), lambda n: n >= 2, timeout_s=60, every_s=0) == 2
    assert poll(counter(0), timeout_s=0, every_s=0) == 0  # asked once at least, even with no time at all


def test_wait_for_fails_naming_what_and_the_last_value() -> None:
    assert wait_for("a value", counter(None, "", "found"), timeout_s=60, every_s=0) == "found"
    with pytest.raises(AssertionError, match=r"the server: not within 0 s \(last: ''\)"):
        wait_for("the server", counter(""), timeout_s=0, every_s=0)


def test_verdict_waits_through_none_and_keeps_a_false_one() -> None:
    assert verdict(counter(None, None, True), timeout_s=60, every_s=0) is True
    assert verdict(counter(None, False, True), timeout_s=60, every_s=0) is False
    assert verdict(counter(None), timeout_s=0, every_s=0) is False


def test_the_one_line_error() -> None:
    assert assert_one_line_error(2, "roost: error: --port 1: in use\n", "--port") == "roost: error: --port 1: in use"
    assert_one_line_error(1, "roost: error: the Hub does not answer\n", want_code=1)
    for code, err in [(1, "roost: error: x\n"), (2, "roost: error: x\nmore\n"), (2, "error: x\n"),
                      (2, "Traceback (most recent call last):\nroost: error: x\n")]:
        with pytest.raises(AssertionError):
            assert_one_line_error(code, err)
    with pytest.raises(AssertionError):
        assert_one_line_error(2, "roost: error: x\n\n", exact=True)
    assert assert_one_line_message(ValueError("a\\nb is escaped"), max_chars=100) == "a\\nb is escaped"
    for message in ["", "two\nlines", "a bell \x07"]:
        with pytest.raises(AssertionError):
            assert_one_line_message(ValueError(message))


@pytest.mark.slow
def test_run_logs_reads_every_line_once_across_pages_of_tied_timestamps(prefect_api: str) -> None:
    """Several pages of lines for one flow run, most of them in runs sharing one timestamp across a page's
    end (Prefect orders by timestamp only: offset paging may repeat or skip some of them), one run longer
    than a page, and another flow run's lines in between: each of the run's lines comes back once, oldest
    first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import LogCreate

    mine, other, task = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    stamps = ([t0] * 150 + [t0 + dt.timedelta(seconds=1)] * 150 + [t0 + dt.timedelta(seconds=2)] * (PAGE + 30)
              + [t0 + dt.timedelta(seconds=3, microseconds=i) for i in range(70)])
    lines = [LogCreate(name="roost.test", level=20, message=f"line {i}", timestamp=ts, flow_run_id=mine,
                       task_run_id=task if i % 3 == 0 else None) for i, ts in enumerate(stamps)]
    noise = [LogCreate(name="roost.test", level=20, message="another run's", timestamp=ts, flow_run_id=other)
             for ts in stamps[::7]]
    with get_client(sync_client=True) as client:
        arriving = [*noise, *lines[::-1]]  # arrival order is not time order
        for start in range(0, len(arriving), 100):
            client.create_logs(arriving[start:start + 100])
        assert len(client.read_logs()) == PAGE  # one read without paging: the first page only
    got = run_logs(mine)
    assert sorted(line.message for line in got) == sorted(line.message for line in lines)
    assert len({line.id for line in got}) == len(lines)
    assert [line.timestamp for line in got] == sorted(line.timestamp for line in got)
    assert sorted(line.message for line in run_logs(task_run_id=task)) == sorted(
        line.message for line in lines if line.task_run_id == task)


def test_the_sessions_children_get_sigint_as_from_a_terminal() -> None:
    """A suite started in the background inherits SIGINT ignored (tests/conftest.py): the processes it starts
    must not, or a Prefect worker told to stop (SIGTERM, which it turns into SIGINT) waits for SIGKILL."""
    import signal
    import subprocess
    import sys

    code = "import os; print(next(l for l in open('/proc/self/status') if l.startswith('SigIgn:')).split()[1])"
    ignored = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout, 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), f"SigIgn {ignored:#x}"
