"""The results store: append-only, atomic, schema-versioned Parquet, partitioned by model and host.

Layout under the root (``roost.settings.results_dir()`` unless a root is passed)::

    runs/model=<slug>/host=<host>/<run_id>.parquet            one row per run (metadata + headline)
    points/model=<slug>/host=<host>/<run_id>.parquet          one row per BenchPoint, with run columns
    requests/model=<slug>/host=<host>/<run_id>.parquet        one row per benchmark request (timings, tokens, errors)
    notifications/model=<slug>/host=<host>/<run_id>-<n>.parquet  one row per notification attempt
    records/model=<slug>/host=<host>/<run_id>.json            the full RunRecord, for reports
    reports/model=<slug>/host=<host>/<run_id>/                the rendered report (see roost.report)

Every run writes *new* files only; nothing is ever rewritten. Each file is written to a hidden
temporary file in the same directory (``.<name>.<random>.tmp``), fsynced, then hard-linked to its
final name (which fails rather than overwrite) and the temporary removed, so a crash leaves either
the complete file or an invisible temporary, never a torn file. Parquet readers (pyarrow, pandas)
skip names starting with ``.``; one call reads a whole table::

    pd.read_parquet(results_dir() / "points")

A run is committed when its ``runs/`` file exists; it is written last, after the record and the
points, and ``load_points``/``load_records`` only return committed runs. A raw read of ``points``
or ``requests`` may include the rows of a run that crashed before its commit: join on ``run_id``
with ``runs`` (as ``load_points`` does) to leave them out.

Every row carries ``store_version`` (this layout and its columns) and ``schema_version``
(``roost.records.SCHEMA_VERSION``). Columns are only ever added, never retyped; the partition keys
``model`` and ``host`` exist only as directory names (pyarrow adds them as columns on read).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import types
import typing
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pydantic import BaseModel

from roost.errors import RoostError, UserError
from roost.headline import headline
from roost.notify import NotifyResult
from roost.records import BenchPoint, RunMeta, RunRecord, utcnow
from roost.settings import results_dir

STORE_VERSION = 1

TABLES = ("runs", "points", "requests", "notifications")


class AlreadyStored(RoostError):
    """The run (or file) is already in the store; the store never overwrites."""


class StoredRun(BaseModel):
    """Where one run's files landed."""

    run_id: str
    run_path: Path
    points_path: Path | None
    record_path: Path


# --------------------------------------------------------------------------------------------- paths


def slug(text: str) -> str:
    """A directory-safe form of a repo id or host name: ``org/name`` -> ``org--name``."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text.strip().replace("/", "--"))
    if not out or out.startswith("."):
        out = "_" + out
    return out


def _root(root: Path | None) -> Path:
    return Path(root) if root is not None else results_dir()


def partition(root: Path | None, table: str, repo_id: str, host: str) -> Path:
    """``<root>/<table>/model=<slug>/host=<slug>``."""
    return _root(root) / table / f"model={slug(repo_id)}" / f"host={slug(host)}"


def report_dir(meta: RunMeta, root: Path | None = None) -> Path:
    """Where the report of a run is written."""
    return partition(root, "reports", meta.repo_id, meta.host) / meta.run_id


def record_path(meta: RunMeta, root: Path | None = None) -> Path:
    return partition(root, "records", meta.repo_id, meta.host) / f"{meta.run_id}.json"


def comparable_key_id(meta: RunMeta) -> str:
    """A short stable id of ``meta.comparable_key()`` (runs with the same id are compared)."""
    blob = json.dumps(list(meta.comparable_key())).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# ------------------------------------------------------------------------------------ atomic writes


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()
"""mkstemp makes 0600 files; stored results get the mode a plain open() would give them."""


def _write_fully(f: IO[bytes], data: bytes) -> None:
    f.write(data)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened/fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` so that readers see the whole file or nothing.

    Without ``overwrite`` an existing ``path`` is left untouched and ``AlreadyStored`` is raised.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            _write_fully(f, data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # atomic and never clobbers
            except FileExistsError:
                raise AlreadyStored(f"{path} already exists; the results store never overwrites a file") from None
            except OSError:  # a filesystem without hard links: still atomic, checked just before
                if path.exists():
                    raise AlreadyStored(f"{path} already exists; the results store never overwrites a file") from None
                os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: Path, text: str, *, overwrite: bool = False) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


# ------------------------------------------------------------------------------------------- schema

_TS = pa.timestamp("us", tz="UTC")

_META_FIELDS: list[tuple[str, pa.DataType]] = [
    ("store_version", pa.int32()),
    ("schema_version", pa.int32()),
    ("run_id", pa.string()),
    ("started_at", _TS),
    ("roost_version", pa.string()),
    ("profile", pa.string()),
    ("repo_id", pa.string()),
    ("revision", pa.string()),
    ("commit", pa.string()),
    ("served_model_name", pa.string()),
    ("host_name", pa.string()),
    ("backend", pa.string()),
    ("image", pa.string()),
    ("image_digest", pa.string()),
    ("vllm_version", pa.string()),
    ("vllm_args", pa.string()),
    ("prefect_flow_run_id", pa.string()),
    ("comparable_key", pa.string()),
    ("status", pa.string()),
]

RUNS_SCHEMA = pa.schema(
    [
        *_META_FIELDS,
        ("failed_stage", pa.string()),
        ("failure_class", pa.string()),
        ("failure_message", pa.string()),
        ("remediation", pa.string()),
        ("decode_tok_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("reference_prompt_tokens", pa.int64()),
        ("decode_ceiling_tok_s", pa.float64()),
        ("decode_pct_of_ceiling", pa.float64()),
        ("peak_output_tok_s", pa.float64()),
        ("peak_concurrency", pa.int64()),
        ("knee_concurrency", pa.int64()),
        ("knee_output_tok_s", pa.float64()),
        ("predicted_kv_cache_tokens", pa.int64()),
        ("logged_kv_cache_tokens", pa.int64()),
        ("predicted_max_concurrency", pa.float64()),
        ("logged_max_concurrency", pa.float64()),
        ("start_to_healthy_s", pa.float64()),
        ("load_s", pa.float64()),
        ("compile_s", pa.float64()),
        ("ready_s", pa.float64()),
        ("points", pa.int64()),
        ("requests", pa.int64()),
        ("error_requests", pa.int64()),
        ("stages_s", pa.float64()),
        ("stages", pa.string()),
        ("record_path", pa.string()),
        ("report_path", pa.string()),
        ("stored_at", _TS),
    ],
    metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "runs"},
)


def _arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a BenchPoint field: numbers stay numbers, dicts become JSON text."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _arrow_type(args[0])
    if annotation is bool:
        return pa.bool_()
    if annotation is int:
        return pa.int64()
    if annotation is float:
        return pa.float64()
    return pa.string()  # str, Literal[...], dict (as JSON)


_POINT_FIELDS: list[tuple[str, pa.DataType]] = [
    (name, _arrow_type(field.annotation)) for name, field in BenchPoint.model_fields.items()
]

POINTS_SCHEMA = pa.schema(
    [*_META_FIELDS, ("point_index", pa.int32()), *_POINT_FIELDS],
    metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "points"},
)

NOTIFICATIONS_SCHEMA = pa.schema(
    [
        ("store_version", pa.int32()),
        ("run_id", pa.string()),
        ("profile", pa.string()),
        ("repo_id", pa.string()),
        ("host_name", pa.string()),
        ("attempted_at", _TS),
        ("kind", pa.string()),
        ("status", pa.string()),
        ("transport", pa.string()),
        ("channel", pa.string()),
        ("message_ts", pa.string()),
        ("file_id", pa.string()),
        ("retries", pa.int64()),
        ("detail", pa.string()),
    ],
    metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "notifications"},
)

REQUESTS_SCHEMA = pa.schema([
    ("store_version", pa.int64()), ("run_id", pa.string()), ("profile", pa.string()), ("repo_id", pa.string()),
    ("commit", pa.string()), ("host_name", pa.string()),
    ("request_id", pa.string()), ("phase", pa.string()), ("point", pa.int64()), ("repeat", pa.int64()),
    ("concurrency", pa.int64()), ("prompt_tokens_target", pa.int64()), ("max_tokens", pa.int64()),
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("usage_missing", pa.bool_()),
    ("finish_reason", pa.string()), ("status_code", pa.int64()), ("error", pa.string()), ("error_kind", pa.string()),
    ("t_first_s", pa.float64()), ("t_last_s", pa.float64()), ("t_end_s", pa.float64()),
    ("ttft_s", pa.float64()), ("tpot_s", pa.float64()), ("e2el_s", pa.float64()), ("decode_tok_s", pa.float64()),
    ("token_chunks", pa.int64()), ("itl_s_max", pa.float64()),
], metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "requests"})

SCHEMAS: dict[str, pa.Schema] = {"runs": RUNS_SCHEMA, "points": POINTS_SCHEMA, "requests": REQUESTS_SCHEMA,
                                  "notifications": NOTIFICATIONS_SCHEMA}

_PARTITIONING = ds.partitioning(pa.schema([("model", pa.string()), ("host", pa.string())]), flavor="hive")


# ------------------------------------------------------------------------------------------- rows


def _meta_row(record: RunRecord) -> dict[str, Any]:
    m = record.meta
    return {
        "store_version": STORE_VERSION,
        "schema_version": record.schema_version,
        "run_id": m.run_id,
        "started_at": m.started_at,
        "roost_version": m.roost_version,
        "profile": m.profile,
        "repo_id": m.repo_id,
        "revision": m.revision,
        "commit": m.commit,
        "served_model_name": m.served_model_name,
        "host_name": m.host,
        "backend": m.backend,
        "image": m.image,
        "image_digest": m.image_digest,
        "vllm_version": m.vllm_version,
        "vllm_args": json.dumps(m.vllm_args),
        "prefect_flow_run_id": m.prefect_flow_run_id,
        "comparable_key": comparable_key_id(m),
        "status": record.status,
    }


def run_row(record: RunRecord, record_file: Path) -> dict[str, Any]:
    """The ``runs`` row of a record."""
    h = headline(record)
    s = record.serve
    return {
        **_meta_row(record),
        "failed_stage": record.failed_stage,
        "failure_class": record.failure_class,
        "failure_message": record.failure_message,
        "remediation": record.remediation,
        "decode_tok_s": h.decode_tok_s,
        "ttft_s": h.ttft_s,
        "reference_prompt_tokens": h.reference_prompt_tokens,
        "decode_ceiling_tok_s": h.decode_ceiling_tok_s,
        "decode_pct_of_ceiling": h.decode_pct_of_ceiling,
        "peak_output_tok_s": h.peak_output_tok_s,
        "peak_concurrency": h.peak_concurrency,
        "knee_concurrency": h.knee_concurrency,
        "knee_output_tok_s": h.knee_output_tok_s,
        "predicted_kv_cache_tokens": s.predicted_kv_cache_tokens,
        "logged_kv_cache_tokens": s.logged_kv_cache_tokens,
        "predicted_max_concurrency": s.predicted_max_concurrency,
        "logged_max_concurrency": s.logged_max_concurrency,
        "start_to_healthy_s": s.start_to_healthy_s,
        "load_s": s.load_s,
        "compile_s": s.compile_s,
        "ready_s": s.ready_s,
        "points": h.points,
        "requests": h.requests,
        "error_requests": h.error_requests,
        "stages_s": sum(t.seconds for t in record.stages),
        "stages": json.dumps([t.model_dump(mode="json") for t in record.stages]),
        "record_path": str(record_file),
        "report_path": record.report_path,
        "stored_at": utcnow(),
    }


def point_rows(record: RunRecord) -> list[dict[str, Any]]:
    """The ``points`` rows of a record: each BenchPoint with the run's metadata columns."""
    meta = _meta_row(record)
    rows = []
    for i, p in enumerate(record.points):
        d = p.model_dump(mode="python")
        d["metrics_delta"] = json.dumps(d["metrics_delta"], sort_keys=True)
        rows.append({**meta, "point_index": i, **d})
    return rows


def _parquet_bytes(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


# ------------------------------------------------------------------------------------------ write


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
            atomic_write_bytes(points_file, _parquet_bytes(point_rows(record), POINTS_SCHEMA))
    atomic_write_bytes(run_file, _parquet_bytes([run_row(record, rec_file)], RUNS_SCHEMA))
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
    table = pa.Table.from_pylist([{**ident, **{k: v for k, v in r.items() if k in names}} for r in rows],
                                 schema=REQUESTS_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    path = partition(root, "requests", meta.repo_id, meta.host) / f"{meta.run_id}.parquet"
    return atomic_write_bytes(path, bytes(sink.getvalue().to_pybytes()))


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
    data = _parquet_bytes([row], NOTIFICATIONS_SCHEMA)
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
    import pandas as pd

    if table not in SCHEMAS:
        raise UserError(f"unknown results table {table!r}: choose one of {', '.join(TABLES)}")
    schema = SCHEMAS[table]
    full = schema.append(pa.field("model", pa.string())).append(pa.field("host", pa.string()))
    folder = _root(root) / table
    if not folder.is_dir():
        return pd.DataFrame({f.name: pd.Series(dtype=f.type.to_pandas_dtype()) for f in full})
    dataset = ds.dataset(folder, format="parquet", partitioning=_PARTITIONING, schema=full)
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
    return _root(root) / "records" / f"model={row['model']}" / f"host={row['host']}" / f"{row['run_id']}.json"


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
        raise UserError(f"no run {run_id!r} in the results store at {_root(root)}")
    return RunRecord.model_validate_json(_record_file(root, match.iloc[0]).read_bytes())
