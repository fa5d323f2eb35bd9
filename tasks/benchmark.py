"""Benchmark stage: a thin Prefect task over ``roost.bench.sweep.run_benchmark``.

Progress shows as a Prefect progress artifact (updated between steps) and one log line per step
with its rates; the points end up in a table artifact. A benchmark stopped by a dead server
raises :class:`~roost.bench.sweep.BenchFailed` whose ``result`` keeps every row measured.
Never cached (a benchmark measures *now*); the API key is a ``SecretStr`` and is never logged.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from prefect import task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost import catalogue as C
from roost.bench.sweep import BenchFailed, BenchResult, BenchSettings, make_settings, run_benchmark
from roost.records import BenchPoint

__all__ = ["BenchFailed", "benchmark_task", "point_table"]


def point_table(points: list[BenchPoint]) -> list[dict[str, object]]:
    """The points as the table artifact shows them: one row each, columns named by the catalogue."""
    rows: list[dict[str, object]] = []
    for p in points:
        row: dict[str, object] = {"kind": p.kind, "prompt tokens": p.prompt_tokens, "concurrency": p.concurrency,
                                  "requests": p.requests, "errors": p.errors}
        for metric, dist, stat in ((C.TTFT, p.ttft_s, "median"), (C.TPOT, p.tpot_s, "median"),
                                   (C.DECODE, p.decode_tok_s, "median"), (C.DECODE, p.decode_tok_s, "min"),
                                   (C.DECODE, p.decode_tok_s, "max"), (C.OUTPUT_THROUGHPUT, p.output_tok_s, "median"),
                                   (C.REQUEST_RATE, p.request_rate, "median")):
            row[f"{metric.label} ({stat})"] = metric.format(getattr(dist, stat))
        row["skipped"] = p.skip_reason if p.skipped else ""
        rows.append(row)
    return rows


@task(name="benchmark", cache_policy=NO_CACHE, persist_result=False)
def benchmark_task(
    base_url: str,
    model: str,
    settings: BenchSettings | dict[str, Any] | None = None,
    api_key: SecretStr | str | None = None,
) -> BenchResult:
    """Run the benchmark against ``base_url`` (serving ``model``); return every point and request."""
    logger = get_run_logger()
    s = settings if isinstance(settings, BenchSettings) else make_settings(**(settings or {}))
    key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
    artifact_id = cast(UUID, create_progress_artifact(progress=0.0, description=f"benchmark of {model}: starting"))
    logger.info(
        "benchmark of %s: prompt lengths %s, concurrency %s, %d output tokens, %d repeats, thinking %s",
        model, s.prompt_lengths, s.levels(), s.output_tokens, s.repeats, "on" if s.thinking else "off",
    )

    def on_progress(message: str, fraction: float) -> None:
        logger.info("%s", message)
        update_progress_artifact(artifact_id=artifact_id, progress=100 * fraction, description=f"benchmark of {model}: {message}")

    result = run_benchmark(base_url, model, s, api_key=key or None, progress=on_progress)
    for note in result.notes:
        logger.warning("%s", note)
    if result.points:
        create_table_artifact(table=point_table(result.points), key="roost-benchmark-points",
                              description=f"benchmark of {model}: one row per point (definitions: roost/catalogue.py)")
    if result.knee is not None:
        logger.info("knee: %s", result.knee.describe())
    if result.failed:
        logger.error("benchmark failed: %s", "; ".join(result.errors))
        raise BenchFailed(result)
    return result
