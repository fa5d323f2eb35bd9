"""The benchmark task on a real Prefect server, against the synthetic streaming server.

Checks what the flow gets back, the progress and table artifacts, the log lines, that the API key
appears nowhere in them, and that a server dying mid-run fails the task with the rows measured.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from bench_synthetic import start_synthetic
from pydantic import SecretStr
from support.flow_logs import run_log_messages

KEY = "bench-task-key-" + os.urandom(4).hex()


@pytest.fixture
def synthetic_url() -> Iterator[str]:
    syn = start_synthetic("--tokens-per-s", "200", "--ttft-s", "0.01", api_key=KEY)
    try:
        yield syn.base_url
    finally:
        syn.stop()


@pytest.mark.slow
def test_benchmark_task_reports_progress_and_points(prefect_api: str, synthetic_url: str) -> None:
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.context import get_run_context

    from roost.bench.sweep import BenchResult
    from tasks.benchmark import benchmark_task

    settings = {"prompt_lengths": [64, 256], "output_tokens": 32, "concurrency": [1, 4], "repeats": 2, "warmup": 1}

    @flow
    def bench_flow(url: str) -> tuple[BenchResult, str]:
        ctx = get_run_context()
        result = benchmark_task(url, "synthetic", settings, SecretStr(KEY))
        return result, str(ctx.flow_run.id)  # type: ignore[union-attr]

    result, run_id = bench_flow(synthetic_url)
    assert result.status == "completed"
    assert [(p.kind, p.prompt_tokens, p.concurrency) for p in result.points] == [
        ("prompt_length", 64, 1), ("prompt_length", 256, 1), ("concurrency", 512, 1), ("concurrency", 512, 4)]
    assert result.knee is not None

    async def fetch() -> list[Any]:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))

    messages = run_log_messages(run_id, flush_s=5)  # the log lines still queued for the API sent first
    arts = asyncio.run(fetch())
    progress = [a for a in arts if a.type == "progress"]
    assert progress and progress[0].data == 100.0
    tables = [a for a in arts if a.key == "roost-benchmark-points"]  # Markdown fitted to the artifact pane
    assert len(tables) == 1 and tables[0].type == "markdown" and "| 64-token prompt |" in str(tables[0].data)
    assert any("decode" in m and "tok/s" in m for m in messages), messages
    assert any(m.startswith("knee:") for m in messages)
    everything = " ".join(messages) + " ".join(str(a.data) + str(a.description) for a in arts)
    assert KEY not in everything


@pytest.mark.slow
def test_a_dead_server_fails_the_task_with_what_was_measured(prefect_api: str, synthetic_url: str) -> None:
    import httpx
    from prefect import flow

    from roost.bench.sweep import BenchFailed, BenchResult
    from tasks.benchmark import benchmark_task

    httpx.post(f"{synthetic_url}/_control", json={"faults": ["ok", "ok", "die"]}, timeout=10).raise_for_status()

    @flow
    def bench_flow(url: str) -> BenchResult:
        try:
            benchmark_task(url, "synthetic", {"prompt_lengths": [64, 128], "output_tokens": 16, "concurrency": [],
                                              "repeats": 1, "warmup": 1, "ttft_timeout_base_s": 5.0}, KEY)
        except BenchFailed as exc:
            return exc.result
        raise AssertionError("the benchmark of a dead server did not fail")

    partial = bench_flow(synthetic_url)
    assert partial.status == "failed" and "stopped answering" in partial.errors[0]
    assert [p.prompt_tokens for p in partial.points] == [64, 128]
    assert partial.points[0].errors == 0 and partial.points[1].errors == 1
