"""What a landing's log looks like in the Prefect UI, checked (issue 39): vLLM's lines under their own logger
at vLLM's own level, its banner, route listing and shutdown noise below INFO, none filed under a task run that
had finished when it was logged, and each benchmark progress line once. Used by every test that lands."""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

# vLLM's lines in the run's log: its own logger and level (``tasks/serve.py``, ``roost/serve/vllm_levels.py``)
VLLM_LINE = re.compile(r"^\[vllm \d+\] ")
VLLM_WARNING = re.compile(r"\bWARNING\s+\d\d-\d\d \d\d:\d\d:\d\d|\bWARNING:\s|: \w*Warning: ")
VLLM_NOISE = re.compile(
    r"[█▀▄]|\[api_utils\.py:\d+\]\s*$"  # the banner
    r"|Available routes are:|\bRoute: /"  # the route listing
    r"|\[shutdown\]|EngineDeadError|output_handler failed|nanobind: |leaked (?:instance|type|function)"  # shutdown
    r"|Shutting down|Waiting for application shutdown|Application shutdown complete|resource_tracker")
PROGRESS = re.compile(r"^(?:warm-up: |benchmark (?:completed|failed)|.+, repeat \d+/\d+: )")


def check_run_log(flow_run_id: Any) -> str:
    """Assert the above of the flow run's log as the API holds it; returns the tally of its lines by source
    (``vLLM`` or the logger's name) and level, which every failure message carries."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from support.flow_logs import run_logs

    logs = run_logs(flow_run_id)
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    ended = {t.id: t.end_time for t in tasks}
    vllm = [line for line in logs if VLLM_LINE.match(line.message)]
    counts = Counter(("vLLM" if VLLM_LINE.match(line.message) else line.name, logging.getLevelName(line.level))
                     for line in logs)
    tally = f"{len(logs)} lines by source and level: {sorted(counts.items())}"
    assert vllm and {line.name for line in vllm} == {"roost.vllm.server"}, tally
    loud = [line.message for line in vllm if line.level >= logging.INFO and VLLM_NOISE.search(line.message)]
    assert loud == [], tally
    warnings = [line for line in vllm if VLLM_WARNING.search(line.message)]
    assert warnings and all(line.level == logging.WARNING for line in warnings), tally
    late = [(line.message, line.timestamp, ended[line.task_run_id]) for line in vllm
            if line.task_run_id is not None and ended.get(line.task_run_id) is not None
            and line.timestamp > ended[line.task_run_id]]
    assert late == [], tally
    progress = Counter(line.message for line in logs if PROGRESS.match(line.message))
    assert progress and max(progress.values()) == 1, (tally, progress)
    return tally
