"""The log lines of a flow run (or a task run) as the Prefect server has them: the UI's Logs tab, every line.

Prefect's ``POST /logs/filter`` answers at most 200 lines a request (``PREFECT_SERVER_API_DEFAULT_LIMIT``: a
request without a limit gets 200, one above it is refused), ordered by timestamp only. A single read sees a
landing's first 200 lines (it logs hundreds: vLLM's own lines too); paging by offset repeats or skips a line
when lines share a timestamp (their order is not fixed from one request to the next) or when a batch of
earlier-stamped lines arrives between two pages (the API log handler sends in batches). So the pages here are
keyed by timestamp: each starts at the previous page's last timestamp (inclusive) and a line is kept once,
by its id. Only a whole page of lines stamped with one instant (the same microsecond) is stepped through by
offset, in the server's order of the moment.

Lines still queued in this process's API log worker are not on the server yet: a test that ran the flow in
this process sends them first (``flush_s``: wait that long at most, as ``APILogHandler().flush()`` does
with 5 s).
"""

from __future__ import annotations

from typing import Any

PAGE = 200
"""Prefect's cap on the lines of one ``/logs/filter`` answer (its default limit)."""


def run_logs(flow_run_id: Any = None, *, task_run_id: Any = None, flush_s: float | None = None) -> list[Any]:
    """Every log line (``prefect.client.schemas.objects.Log``) of the flow run ``flow_run_id`` or the task run
    ``task_run_id`` on the server, oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        LogFilter,
        LogFilterFlowRunId,
        LogFilterTaskRunId,
        LogFilterTimestamp,
    )
    from prefect.client.schemas.sorting import LogSort

    if (flow_run_id is None) == (task_run_id is None):
        raise TypeError("give a flow_run_id or a task_run_id")
    if flush_s is not None:
        send_queued_logs(flush_s)
    of: dict[str, Any] = ({"flow_run_id": LogFilterFlowRunId(any_=[flow_run_id])} if task_run_id is None
                          else {"task_run_id": LogFilterTaskRunId(any_=[task_run_id])})
    lines: dict[Any, Any] = {}
    since, offset = None, 0
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_logs(LogFilter(**of, timestamp=LogFilterTimestamp(after_=since)), limit=PAGE,
                                    offset=offset, sort=LogSort.TIMESTAMP_ASC)
            lines.update((line.id, line) for line in page)
            if len(page) < PAGE:
                return sorted(lines.values(), key=lambda line: line.timestamp)
            if page[-1].timestamp == since:  # a whole page within one instant: the next from its end
                offset += PAGE
            else:
                since, offset = page[-1].timestamp, 0


def send_queued_logs(timeout_s: float = 5) -> None:
    """Send the log lines this process's API log worker still queues, waiting ``timeout_s`` at most."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=timeout_s)


def run_log_messages(flow_run_id: Any = None, *, task_run_id: Any = None, flush_s: float | None = None) -> list[str]:
    """The messages of :func:`run_logs`, oldest first."""
    return [line.message for line in run_logs(flow_run_id, task_run_id=task_run_id, flush_s=flush_s)]


def run_log_text(flow_run_id: Any = None, *, task_run_id: Any = None, flush_s: float | None = None) -> str:
    """The messages of :func:`run_logs`, one a line."""
    return "\n".join(run_log_messages(flow_run_id, task_run_id=task_run_id, flush_s=flush_s))
