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
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import SecretStr

from roost import catalogue as C
from roost.bench.sweep import BenchFailed, BenchResult, BenchSettings, make_settings, run_benchmark
from roost.headline import point_name
from roost.naming import artifact_key
from roost.progress import terminal_progress
from roost.records import BenchPoint
from roost.report.markdown import pane_tables

__all__ = ["BenchFailed", "benchmark_task", "point_table"]


def point_table(points: list[BenchPoint]) -> list[dict[str, object]]:
    """The points as the table artifact shows them: one row each, the measured columns the catalogue's
    (``roost.catalogue.POINT_COLUMNS``: headed and printed as the report's tables)."""
    rows: list[dict[str, object]] = []
    for p in points:
        row: dict[str, object] = {"kind": p.kind, "prompt tokens": p.prompt_tokens, "concurrency": p.concurrency,
                                  "requests": p.requests, "errors": p.errors}
        row |= {column.header: column.cell_of(p) for column in C.POINT_COLUMNS}
        row["skipped"] = p.skip_reason if p.skipped else ""
        rows.append(row)
    return rows


def point_markdown(points: list[BenchPoint]) -> str:
    """The points' table (:func:`point_table`, each named as the report names it) as Markdown that fits the
    Prefect UI's artifact pane: split into narrower tables that each start with the point's name."""
    rows = [{"point": point_name(p)} | {k: v for k, v in row.items() if k != "kind"}
            for p, row in zip(points, point_table(points), strict=True)]
    return pane_tables(rows, text=("point", "skipped"))


@task(name="benchmark", cache_policy=NO_CACHE, persist_result=False)
def benchmark_task(
    base_url: str,
    model: str,
    settings: BenchSettings | dict[str, Any] | None = None,
    api_key: SecretStr | str | None = None,
    *,
    profile: str = "",
    host: str = "",
    server_url: str | None = None,
    server_key: SecretStr | None = None,
) -> BenchResult:
    """Run the benchmark against ``base_url`` (serving ``model``); return every point and request.

    ``profile`` and ``host`` key the artifacts (``roost-benchmark-progress-<profile>-<host>``,
    ``roost-benchmark-points-<profile>-<host>``), so the UI shows each one's history per model and host.
    ``server_url``: ``base_url`` is the metering gateway in front of this vLLM server (its key
    ``server_key``): the artifacts are ``roost-benchmark-gateway-*``."""
    logger = get_run_logger()
    s = settings if isinstance(settings, BenchSettings) else make_settings(**(settings or {}))
    key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
    upstream = server_key.get_secret_value() if server_key is not None else None
    via = " through the gateway" if server_url else ""
    kind = "roost-benchmark-gateway" if server_url else "roost-benchmark"
    where = f"benchmark of {model}{via}" + (f" ({profile} on {host})" if profile and host else "")
    artifact_id = cast(UUID, create_progress_artifact(
        progress=0.0, key=artifact_key(f"{kind}-progress", profile, host), description=f"{where}: starting"))
    logger.info(
        "benchmark of %s%s: prompt lengths %s, concurrency %s, %d output tokens, %d repeats, thinking %s",
        model, via, s.prompt_lengths, s.levels(), s.output_tokens, s.repeats, "on" if s.thinking else "off",
    )

    # bars on a terminal; elsewhere the log lines are the plain form
    terminal = terminal_progress(f"benchmark of {model}{via}", unit="steps", plain=False,
                                 secrets=[key or "", upstream or ""])

    def on_progress(message: str, fraction: float) -> None:
        logger.info("%s", message)
        update_progress_artifact(artifact_id=artifact_id, progress=round(100 * fraction, 1),
                                 description=f"{where}: {message}")
        terminal.update(*s.points_done(fraction), status=message)  # points measured of all

    with terminal:
        result = run_benchmark(base_url, model, s, api_key=key or None, progress=on_progress, server_url=server_url,
                               server_key=upstream)
    for note in result.notes:
        logger.warning("%s", note)
    if result.points:
        create_markdown_artifact(markdown=point_markdown(result.points), key=artifact_key(f"{kind}-points", profile, host),
                                 description=f"{where}: one row per point, numbers as the report prints them "
                                 "(definitions: roost/catalogue.py)")
    if result.knee is not None:
        logger.info("knee: %s", result.knee.describe())
    if result.failed:
        logger.error("benchmark failed: %s", "; ".join(result.errors))
        raise BenchFailed(result)
    return result
