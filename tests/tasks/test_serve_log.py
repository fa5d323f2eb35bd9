"""tasks/serve.py's callback for a server's lines, on a real Prefect server: each line at the level vLLM
wrote it (its banner, routes and access log left out), under ``roost.vllm.server``; a line the backend's
reader thread logs after the serve task ended goes to the flow run, never to the finished task."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.flow_logs import run_logs

from roost.serve.logs import ServerLine

EARLY = "(APIServer pid=1) WARNING 12-06 07:18:42 [system_utils.py:255] Found ulimit of 20000"
LATE = ["(APIServer pid=1) INFO 12-06 07:21:27 [launcher.py:186] Available routes are:",
        "(APIServer pid=1) INFO 12-06 07:21:27 [launcher.py:195] Route: /health, Methods: GET",
        "INFO:     Application startup complete.",
        'INFO:     127.0.0.1:40046 - "GET /health HTTP/1.1" 200 OK',
        "/x/vllm/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated",
        '  if hasattr(value, "__dict__"):']


def serve_in_a_flow(first: list[str], later: list[str]) -> tuple[str, str]:
    """A serve task's log callback (``tasks.serve.backend_log``) given ``first`` in the task and ``later`` from a
    reader thread (as a backend's runs: in a copy of the starting context) after the task ended; returns the
    flow run's and the task run's ids."""
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.context import get_run_context

    from tasks.serve import backend_log

    go = threading.Event()

    @task(cache_policy=NO_CACHE, persist_result=False)
    def start() -> tuple[str, threading.Thread]:
        log: Callable[[str], None] = backend_log()
        for line in first:
            log(line if line.startswith("warning: ") else ServerLine("vllm 1", line))

        def follow() -> None:
            go.wait(30)
            for line in later:
                log(ServerLine("vllm 1", line))

        reader = threading.Thread(target=contextvars.copy_context().run, args=(follow,))
        reader.start()
        return str(get_run_context().task_run.id), reader  # type: ignore[union-attr]

    @flow
    def serve_flow() -> tuple[str, str]:
        task_id, reader = start()
        go.set()  # the task has ended: its reader goes on
        reader.join(30)
        return str(get_run_context().flow_run.id), task_id  # type: ignore[union-attr]

    return serve_flow()


@pytest.mark.slow
def test_server_lines_keep_vllms_level_and_a_late_line_goes_to_the_flow_run(prefect_api: str,
                                                                             roost_to_the_api: None) -> None:
    from tasks.serve import VLLM_LOGGER

    run_id, task_id = serve_in_a_flow(
        ["warning: stopped 1 vLLM server(s) a crashed earlier run left on host cpu (pids [7])", EARLY], LATE)
    logs: list[Any] = run_logs(run_id, flush_s=5)
    vllm = [(line.message.removeprefix("[vllm 1] "), logging.getLevelName(line.level), str(line.task_run_id))
            for line in logs if line.name == VLLM_LOGGER]
    assert vllm == [(EARLY, "WARNING", task_id),
                    ("INFO:     Application startup complete.", "INFO", "None"),
                    (LATE[4], "WARNING", "None"), (LATE[5], "WARNING", "None")]
    assert all(str(line.flow_run_id) == run_id for line in logs)
    (reaped,) = [line for line in logs if line.message.startswith("stopped 1 vLLM server(s)")]
    assert (reaped.level, str(reaped.task_run_id)) == (logging.WARNING, task_id)


FAILED = ["(APIServer pid=1) INFO 12-06 07:18:42 [api_utils.py:286] non-default args: {'port': 1801}",
          "(EngineCore pid=2) ERROR 12-06 07:18:50 [core.py:708] EngineCore failed to start."]


@pytest.mark.slow
def test_without_roosts_api_handler_the_server_lines_go_to_the_run_logger_at_their_level(prefect_api: str) -> None:
    """``roost`` not among Prefect's extra loggers (an older deployment, a flow started directly): no API
    handler on ``roost.vllm.server`` and root's WARNING level; its lines reach the run's log all the same."""
    from prefect.logging.handlers import APILogHandler

    from roost.settings import ROOST_LOGGER
    from tasks.serve import VLLM_LOGGER

    assert not any(isinstance(h, APILogHandler) for h in logging.getLogger(ROOST_LOGGER).handlers)
    run_id, task_id = serve_in_a_flow([FAILED[0]], [FAILED[1]])
    logs: list[Any] = run_logs(run_id, flush_s=5)
    served = [(line.message.removeprefix("[vllm 1] "), logging.getLevelName(line.level), str(line.task_run_id))
              for line in logs if line.message.startswith("[vllm 1] ")]
    assert served == [(FAILED[0], "INFO", task_id), (FAILED[1], "ERROR", "None")]
    assert not [line for line in logs if line.name == VLLM_LOGGER]  # the run logger's, not roost's
