"""The results store: append-only, atomic, schema-versioned Parquet, partitioned by model and host.

Layout under the root (``roost.settings.results_dir()`` unless a root is passed)::

    runs/model=<slug>/host=<host>/<run_id>.parquet            one row per run (metadata + headline)
    points/model=<slug>/host=<host>/<run_id>.parquet          one row per BenchPoint, with run columns
    requests/model=<slug>/host=<host>/<run_id>.parquet        one row per benchmark request (timings, tokens, errors)
    notifications/model=<slug>/host=<host>/<run_id>-<n>.parquet  one row per notification attempt
    evals/model=<slug>/host=<host>/<run_id>.parquet           one row per accuracy evaluation (roost.eval)
    eval_answers/model=<slug>/host=<host>/<run_id>-<task>.parquet  one row per question asked
    records/model=<slug>/host=<host>/<run_id>.json            the full RunRecord, for reports
    reports/model=<slug>/host=<host>/<run_id>/                the rendered report (see roost.report)

Every run writes *new* files only; nothing is ever rewritten, and every file is written atomically
(``roost.store.atomic``). One call reads a whole table::

    pd.read_parquet(results_dir() / "points")

A run is committed when its ``runs/`` file exists; it is written last, after the record and the
points, and ``load_points``/``load_records`` only return committed runs. A raw read of ``points``
or ``requests`` may include the rows of a run that crashed before its commit: join on ``run_id``
with ``runs`` (as ``load_points`` does) to leave them out.

Every row carries ``store_version`` (this layout and its columns) and ``schema_version``
(``roost.records.SCHEMA_VERSION``). Columns are only ever added, never retyped; the partition keys
``model`` and ``host`` exist only as directory names (pyarrow adds them as columns on read).
Store versions: 1 (roost 0.1); 2 adds, per distribution of a point, the columns ``<metric>_count``,
``_mean``, ``_p10``... beside the ones version 1 had (``ttft_s_median``, and ``output_tok_s`` /
``request_rate`` holding the median over repeats, as they always did). Records written by an older
release are read through ``roost.records.upgrade_record``.

The package: ``atomic`` (whole-or-nothing files), ``layout`` (where each file lives), ``schema``
(the Arrow schemas and rows); this module writes and reads runs.

pandas, ``pyarrow.dataset`` and ``pyarrow.parquet`` are imported where a table is read or written:
together they cost about 1.5 s of a cold process, which every flow's start (a deployment run's
Pending -> Running, measured by ``benchmarks/bench_orchestration.py``) would otherwise pay first.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from roost.errors import UserError
from roost.notify import NotifyResult
from roost.records import RunMeta, RunRecord
from roost.store.atomic import AlreadyStored, atomic_write_bytes, atomic_write_text
from roost.store.layout import TABLES, comparable_key_id, partition, record_path, report_dir, slug, store_root
from roost.store.schema import (
    EVAL_ANSWERS_SCHEMA,
    EVALS_SCHEMA,
    NOTIFICATIONS_SCHEMA,
    PARTITION_SCHEMA,
    POINTS_SCHEMA,
    REQUESTS_SCHEMA,
    RUNS_SCHEMA,
    SCHEMAS,
    STORE_VERSION,
    eval_rows,
    flatten_point,
    parquet_bytes,
    point_rows,
    run_row,
)

__all__ = [
    "NOTIFICATIONS_SCHEMA", "POINTS_SCHEMA", "REQUESTS_SCHEMA", "RUNS_SCHEMA", "STORE_VERSION", "TABLES",
    "AlreadyStored", "StoredRun", "append_eval_answers", "append_notification", "append_requests", "append_run", "atomic_write_bytes",
    "atomic_write_text", "comparable_key_id", "flatten_point", "load_eval_answers", "load_evals", "load_notifications", "load_points", "load_record",
    "load_records", "load_runs", "load_table", "partition", "point_rows", "record_path", "report_dir", "run_row", "slug",
]


class StoredRun(BaseModel):
    """Where one run's files landed."""

    run_id: str
    run_path: Path
    points_path: Path | None
    record_path: Path


def append_run(record: RunRecord, root: Path | None = None) -> StoredRun:
    """Add one run to the store: its record JSON, its points, then its ``runs`` row (the commit).

    Raises ``AlreadyStored`` when the run is already committed. A retry after a crash re-uses a
    record or points file the crashed attempt already completed (same run id) and commits the run.
    """
    meta = record.meta
    run_file = partition(root, "runs", meta.repo_id, meta.host) / f"{meta.run_id}.parquet"
    if run_file.exists():
        raise AlreadyStored(f"run {meta.run_id} is already in the results store ({run_file})")
    rec_file = record_path(meta, root)
    with contextlib.suppress(AlreadyStored):
        atomic_write_text(rec_file, record.model_dump_json(indent=2))
    points_file: Path | None = None
    if record.points:
        points_file = partition(root, "points", meta.repo_id, meta.host) / f"{meta.run_id}.parquet"
        with contextlib.suppress(AlreadyStored):
            atomic_write_bytes(points_file, parquet_bytes(point_rows(record), POINTS_SCHEMA))
    if record.evals:
        evals_file = partition(root, "evals", meta.repo_id, meta.host) / f"{meta.run_id}.parquet"
        with contextlib.suppress(AlreadyStored):
            atomic_write_bytes(evals_file, parquet_bytes(eval_rows(record), EVALS_SCHEMA))
    atomic_write_bytes(run_file, parquet_bytes([run_row(record, rec_file)], RUNS_SCHEMA))
    return StoredRun(run_id=meta.run_id, run_path=run_file, points_path=points_file, record_path=rec_file)


def append_requests(meta: RunMeta, rows: list[dict[str, Any]], root: Path | None = None) -> Path | None:
    """Store one row per benchmark request (``requests`` table), with the run's identifying columns.

    Written once per run, atomically; None when there is nothing to write. Column meanings are the
    metric definitions in ``roost/bench/metrics.py`` (times in seconds relative to the request's send).
    """
    if not rows:
        return None
    ident = {"store_version": STORE_VERSION, "run_id": meta.run_id, "profile": meta.profile,
             "repo_id": meta.repo_id, "commit": meta.commit, "host_name": meta.host}
    names = set(REQUESTS_SCHEMA.names)
    data = parquet_bytes([{**ident, **{k: v for k, v in r.items() if k in names}} for r in rows], REQUESTS_SCHEMA)
    path = partition(root, "requests", meta.repo_id, meta.host) / f"{meta.run_id}.parquet"
    return atomic_write_bytes(path, data)


def append_eval_answers(meta: RunMeta, task: str, sample_digest: str, answers: list[dict[str, Any]],
                        root: Path | None = None) -> Path | None:
    """Store one row per question an evaluation asked (``eval_answers`` table), written once per run
    and task, atomically; None when there is nothing to write. Reasoning stays in the eval log."""
    if not answers:
        return None
    ident = {"store_version": STORE_VERSION, "run_id": meta.run_id, "profile": meta.profile, "repo_id": meta.repo_id,
             "commit": meta.commit, "host_name": meta.host, "task": task, "sample_digest": sample_digest}
    names = set(EVAL_ANSWERS_SCHEMA.names)
    rows = [{**ident, "question_id": a["id"], **{k: v for k, v in a.items() if k in names}} for a in answers]
    path = partition(root, "eval_answers", meta.repo_id, meta.host) / f"{meta.run_id}-{slug(task)}.parquet"
    with contextlib.suppress(AlreadyStored):  # a retried stage wrote the same answers already
        atomic_write_bytes(path, parquet_bytes(rows, EVAL_ANSWERS_SCHEMA))
    return path


def load_eval_answers(run_id: str, task: str, root: Path | None = None, model: str | None = None) -> Any:
    """The per-question rows of one run's evaluation of ``task``."""
    df = load_table("eval_answers", root, model)
    return df[(df["run_id"] == run_id) & (df["task"] == task)].reset_index(drop=True)


def load_evals(root: Path | None = None, model: str | None = None, host: str | None = None) -> Any:
    """Evaluations of committed runs, one row each, oldest first."""
    evals = load_table("evals", root, model, host)
    committed = set(load_runs(root, model, host)["run_id"])
    return evals[evals["run_id"].isin(committed)].reset_index(drop=True)


def append_notification(meta: RunMeta, result: NotifyResult, root: Path | None = None) -> Path:
    """Record one notification attempt (sent, skipped or failed) next to the run."""
    row = {
        "store_version": STORE_VERSION,
        "run_id": meta.run_id,
        "profile": meta.profile,
        "repo_id": meta.repo_id,
        "host_name": meta.host,
        "attempted_at": result.attempted_at,
        "kind": result.kind or "",
        "status": result.status,
        "transport": result.transport or "",
        "channel": result.channel,
        "message_ts": result.message_ts,
        "file_id": result.file_id,
        "retries": result.retries,
        "detail": result.detail,
    }
    data = parquet_bytes([row], NOTIFICATIONS_SCHEMA)
    folder = partition(root, "notifications", meta.repo_id, meta.host)
    for n in range(1, 1000):
        try:
            return atomic_write_bytes(folder / f"{meta.run_id}-{n}.parquet", data)
        except AlreadyStored:
            continue
    raise AlreadyStored(f"run {meta.run_id} has 999 notification rows already")



# ------------------------------------------------------------------------------------------- read


def load_table(
    table: str, root: Path | None = None, model: str | None = None, host: str | None = None
) -> Any:
    """One table as a pandas DataFrame (``model``/``host`` as plain string columns), oldest first."""
    if table not in SCHEMAS:
        raise UserError(f"unknown results table {table!r}: choose one of {', '.join(TABLES)}")
    import pandas as pd  # on first read, with pyarrow.dataset: see the module docstring
    import pyarrow.dataset as ds

    schema = SCHEMAS[table]
    full = schema.append(pa.field("model", pa.string())).append(pa.field("host", pa.string()))
    folder = store_root(root) / table
    if not folder.is_dir():
        return pd.DataFrame({f.name: pd.Series(dtype=f.type.to_pandas_dtype()) for f in full})
    dataset = ds.dataset(folder, format="parquet", partitioning=ds.partitioning(PARTITION_SCHEMA, flavor="hive"), schema=full)
    expr = None
    if model is not None:
        expr = ds.field("model") == slug(model)
    if host is not None:
        cond = ds.field("host") == slug(host)
        expr = cond if expr is None else expr & cond
    df = dataset.to_table(filter=expr).to_pandas()
    sort = [c for c in ("started_at", "run_id", "point_index", "point", "attempted_at") if c in df.columns]
    return df.sort_values(sort, kind="stable").reset_index(drop=True)


def load_runs(root: Path | None = None, model: str | None = None, host: str | None = None) -> Any:
    """All committed runs (one row each), oldest first; ``model`` is a repo id or its slug."""
    return load_table("runs", root, model, host)


def load_points(
    root: Path | None = None, model: str | None = None, host: str | None = None, run_id: str | None = None
) -> Any:
    """Benchmark points of committed runs, one row per point, oldest run first."""
    points = load_table("points", root, model, host)
    committed = set(load_runs(root, model, host)["run_id"])
    keep = points["run_id"].isin(committed)
    if run_id is not None:
        keep &= points["run_id"] == run_id
    return points[keep].reset_index(drop=True)


def load_notifications(root: Path | None = None, model: str | None = None, host: str | None = None) -> Any:
    return load_table("notifications", root, model, host)


def _record_file(root: Path | None, row: Any) -> Path:
    """The record JSON of a ``runs`` row, found from the partition (so a moved store still reads)."""
    return store_root(root) / "records" / f"model={row['model']}" / f"host={row['host']}" / f"{row['run_id']}.json"


def load_records(
    root: Path | None = None, model: str | None = None, host: str | None = None, limit: int | None = None
) -> list[RunRecord]:
    """The full records of committed runs, oldest first (the latest ``limit`` when given)."""
    runs = load_runs(root, model, host)
    rows = [row for _, row in runs.iterrows()]
    if limit is not None:
        rows = rows[-limit:] if limit > 0 else []
    return [RunRecord.model_validate_json(_record_file(root, row).read_bytes()) for row in rows]


def load_record(run_id: str, root: Path | None = None) -> RunRecord:
    """One committed run's record by id."""
    runs = load_runs(root)
    match = runs[runs["run_id"] == run_id]
    if match.empty:
        raise UserError(f"no run {run_id!r} in the results store at {store_root(root)}")
    return RunRecord.model_validate_json(_record_file(root, match.iloc[0]).read_bytes())

