"""The results store: append-only, write-once, schema-versioned Parquet, partitioned by model and host,
in a local directory, a directory the team shares, or an S3-compatible bucket (``roost.store.location``).

Layout under the store's root (keys: ``roost.store.layout``)::

    runs/model=<slug>/host=<host>/<run_id>.parquet            one row per run (metadata + headline): the commit
    runs/_catalog/<YYYYMM>/<newest run>-<n>-<digest>.parquet  the runs table compacted (roost.store.catalog)
    runs/_late/model=<slug>/host=<host>/<run_id>.parquet      a copy of a run that committed late (same)
    points/model=<slug>/host=<host>/<run_id>.parquet          one row per BenchPoint, with run columns
    requests/model=<slug>/host=<host>/<run_id>.parquet        one row per benchmark request (timings, tokens, errors)
    requests/model=<slug>/host=<host>/<run_id>-gateway.parquet  the same through the metering gateway (kept servers)
    notifications/model=<slug>/host=<host>/<run_id>-<n>.parquet  one row per notification attempt
    evals/model=<slug>/host=<host>/<run_id>.parquet           one row per accuracy evaluation (roost.eval)
    eval_answers/model=<slug>/host=<host>/<run_id>-<task>.parquet  one row per question asked
    records/model=<slug>/host=<host>/<run_id>.json            the full RunRecord, for reports
    sweeps/model=<slug>/<sweep id>.json                       a sweep's outcome: variants, states, the best (flows/sweep.py)

Reports are rendered on the worker into its local results directory (``roost.store.layout.report_dir``).

Every run writes *new* objects only, each whole or not at all (``roost.store.objects``); nothing is
renamed over, rewritten or read-modified-written, so two workers appending at once never lose or
clobber a row. A run is committed when its ``runs/`` object exists; it is written last, after the
record and the points, and every reader here returns committed runs only (a raw read of ``points``
or ``requests`` may include the rows of a run that crashed before its commit: join on ``run_id``).
A local store still reads with one pandas call (``pd.read_parquet(results_dir() / "points")``;
``runs/_catalog`` and ``runs/_late`` are skipped by pyarrow, like every name starting with ``_`` or ``.``).

Every row carries ``store_version`` (this layout and its columns) and ``schema_version``
(``roost.records.SCHEMA_VERSION``). Columns are only ever added, never retyped; the partition keys
``model`` and ``host`` exist only as directory names (readers add them as columns). Store versions:
1 (roost 0.1); 2 adds, per distribution of a point, the columns ``<metric>_count``, ``_mean``,
``_p10``... beside the ones version 1 had; 3 adds the runs catalog (rows unchanged: a version 1 or 2
store is read as it is and compacted like any other). Records written by an older release are read
through ``roost.records.upgrade_record``.

Which store a function uses: the ``root`` it is given (an :class:`ObjectStore`, or a directory path),
else the one the running flow set (:func:`using_store`), else ``ROOST_RESULTS_STORE`` with credentials
from the AWS environment, else the local results directory.

pandas, ``pyarrow.dataset`` and ``pyarrow.parquet`` are imported where a table is read or written:
together they cost about 1.5 s of a cold process, which every flow's start (a deployment run's
Pending -> Running, measured by ``benchmarks/bench_orchestration.py``) would otherwise pay first.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from roost.errors import UserError
from roost.records import NotifyResult, RunMeta, RunRecord
from roost.settings import environment
from roost.store import catalog
from roost.store.atomic import AlreadyStored, atomic_write_bytes, atomic_write_text
from roost.store.catalog import ReadStats
from roost.store.credentials import StoreCredentials
from roost.store.layout import (
    TABLES,
    comparable_key_id,
    partition_key,
    record_key,
    report_dir,
    slug,
)
from roost.store.location import open_store
from roost.store.objects import LocalStore, MissingObject, ObjectStore, StoreError, StoreUnreachable
from roost.store.schema import (
    EVAL_ANSWERS_SCHEMA,
    EVALS_SCHEMA,
    NOTIFICATIONS_SCHEMA,
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
    "NOTIFICATIONS_SCHEMA",
    "POINTS_SCHEMA",
    "REQUESTS_SCHEMA",
    "RUNS_SCHEMA",
    "STORE_VERSION",
    "TABLES",
    "AlreadyStored",
    "LocalStore",
    "MissingObject",
    "ObjectStore",
    "ReadStats",
    "StoreError",
    "StoreLike",
    "StoreUnreachable",
    "StoredRun",
    "append_eval_answers",
    "append_notification",
    "append_requests",
    "append_run",
    "atomic_write_bytes",
    "atomic_write_text",
    "compact",
    "comparable_key_id",
    "current_store",
    "flatten_point",
    "load_eval_answers",
    "load_evals",
    "load_notifications",
    "load_points",
    "load_record",
    "load_records",
    "load_runs",
    "load_table",
    "point_rows",
    "record_batches_newest_first",
    "record_key",
    "report_dir",
    "resolve",
    "run_row",
    "slug",
    "using_store",
]

log = logging.getLogger("roost.store")

StoreLike = ObjectStore | Path | str | None
"""A store, a directory (path or string), or None: the current store (:func:`current_store`)."""

_CURRENT: contextvars.ContextVar[ObjectStore | None] = contextvars.ContextVar("roost_results_store", default=None)


@contextlib.contextmanager
def using_store(store: ObjectStore) -> Iterator[ObjectStore]:
    """Make ``store`` the default of every function here for the block (a flow's store)."""
    token = _CURRENT.set(store)
    try:
        yield store
    finally:
        _CURRENT.reset(token)


def current_store() -> ObjectStore:
    """The store a flow set (:func:`using_store`), else ``ROOST_RESULTS_STORE`` (AWS credentials from the
    environment), else the local results directory."""
    found = _CURRENT.get()
    if found is not None:
        return found
    url = environment().roost_results_store or ""
    return open_store(url or None, StoreCredentials.from_env() if url else None)


def resolve(root: StoreLike) -> ObjectStore:
    if isinstance(root, ObjectStore):
        return root
    if root is None:
        return current_store()
    return LocalStore(Path(root))


class StoredRun(BaseModel):
    """Where one run's objects landed (paths for a directory store, ``s3://`` URLs otherwise)."""

    run_id: str
    run_path: str
    points_path: str | None
    record_path: str


def _put(store: ObjectStore, key: str, data: bytes, *, once: bool = False) -> None:
    """Write ``key``; with ``once``, an object a crashed earlier attempt completed is kept as it is."""
    try:
        store.put_new(key, data)
    except AlreadyStored:
        if not once:
            raise


def append_run(record: RunRecord, root: StoreLike = None) -> StoredRun:
    """Add one run to the store: its record JSON, its points and evaluations, then its ``runs`` row (the commit).

    Raises ``AlreadyStored`` when the run is already committed. A retry after a crash re-uses a
    record or points object the crashed attempt already completed (same run id) and commits the run.
    After the commit, the runs catalog is compacted when the partition has grown enough
    (``roost.store.catalog``); a compaction that fails is logged and changes nothing.
    """
    store = resolve(root)
    meta = record.meta
    run_key = f"{partition_key('runs', meta.repo_id, meta.host)}{meta.run_id}.parquet"
    if store.exists(run_key):
        raise AlreadyStored(f"run {meta.run_id} is already in the results store ({store.display(run_key)})")
    rec_key = record_key(meta.repo_id, meta.host, meta.run_id)
    _put(store, rec_key, record.model_dump_json(indent=2).encode(), once=True)
    points_key: str | None = None
    if record.points:
        points_key = f"{partition_key('points', meta.repo_id, meta.host)}{meta.run_id}.parquet"
        _put(store, points_key, parquet_bytes(point_rows(record), POINTS_SCHEMA), once=True)
    if record.evals:
        evals_key = f"{partition_key('evals', meta.repo_id, meta.host)}{meta.run_id}.parquet"
        _put(store, evals_key, parquet_bytes(eval_rows(record), EVALS_SCHEMA), once=True)
    row = parquet_bytes([run_row(record, store.display(rec_key))], RUNS_SCHEMA)
    store.put_new(run_key, row)
    _after_commit(store, meta, run_key, row)
    return StoredRun(run_id=meta.run_id, run_path=store.display(run_key),
                     points_path=store.display(points_key) if points_key else None,
                     record_path=store.display(rec_key))


def _runs_schema() -> pa.Schema:
    return RUNS_SCHEMA.append(pa.field("model", pa.string())).append(pa.field("host", pa.string()))


def _after_commit(store: ObjectStore, meta: RunMeta, run_key: str, row: bytes) -> None:
    """A late commit's copy under ``runs/_late/`` (``catalog.commit_late``), then a compaction when the
    partition has :data:`catalog.COMPACT_AFTER` runs past the newest catalog. Neither fails the run (it is
    committed): a failure is logged, and through ``KeepLocalCopy`` a copy the store did not take is kept and
    pushed like the rest of the run."""
    try:
        cat = catalog.newest_catalog(store)
        catalog.commit_late(store, run_key, row, catalog.read_watermark(store, cat) if cat is not None else "")
        if catalog.fresh_count(store, slug(meta.repo_id), slug(meta.host), cat) >= catalog.COMPACT_AFTER:
            catalog.compact(store, _runs_schema())
    except Exception as exc:  # the run is committed; the catalog only makes reads faster
        log.warning("results store %s: after committing %s: %s", store.url, meta.run_id, exc)


def compact(root: StoreLike = None) -> str | None:
    """Write a new runs catalog now (``roost results compact``); its key, or None when it would hold nothing new."""
    return catalog.compact(resolve(root), _runs_schema())


def append_requests(meta: RunMeta, rows: list[dict[str, Any]], root: StoreLike = None,
                    route: str = "") -> str | None:
    """Store one row per benchmark request (``requests`` table), with the run's identifying columns.

    Written once per run and route; None when there is nothing to write. Column meanings are the metric
    definitions in ``roost/bench/metrics.py`` (times in seconds relative to the request's send).
    ``route`` ``"gateway"``: the sweep through the metering gateway (its own file, ``route`` column set;
    ``""``: direct, the column null as in files from before it existed).
    """
    if not rows:
        return None
    store = resolve(root)
    ident = {"store_version": STORE_VERSION, "run_id": meta.run_id, "profile": meta.profile,
             "repo_id": meta.repo_id, "commit": meta.commit, "host_name": meta.host, "route": route or None}
    names = set(REQUESTS_SCHEMA.names)
    data = parquet_bytes([{**ident, **{k: v for k, v in r.items() if k in names}} for r in rows], REQUESTS_SCHEMA)
    key = f"{partition_key('requests', meta.repo_id, meta.host)}{meta.run_id}{'-' + route if route else ''}.parquet"
    store.put_new(key, data)
    return store.display(key)


def append_eval_answers(meta: RunMeta, task: str, sample_digest: str, answers: list[dict[str, Any]],
                        root: StoreLike = None) -> str | None:
    """Store one row per question an evaluation asked (``eval_answers`` table), written once per run
    and task; None when there is nothing to write. Reasoning stays in the eval log."""
    if not answers:
        return None
    store = resolve(root)
    ident = {"store_version": STORE_VERSION, "run_id": meta.run_id, "profile": meta.profile, "repo_id": meta.repo_id,
             "commit": meta.commit, "host_name": meta.host, "task": task, "sample_digest": sample_digest}
    names = set(EVAL_ANSWERS_SCHEMA.names)
    rows = [{**ident, "question_id": a["id"], **{k: v for k, v in a.items() if k in names}} for a in answers]
    key = f"{partition_key('eval_answers', meta.repo_id, meta.host)}{meta.run_id}-{slug(task)}.parquet"
    _put(store, key, parquet_bytes(rows, EVAL_ANSWERS_SCHEMA), once=True)  # a retried stage wrote them already
    return store.display(key)


def append_notification(meta: RunMeta, result: NotifyResult, root: StoreLike = None) -> str:
    """Record one notification attempt (sent, skipped or failed) next to the run."""
    store = resolve(root)
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
    folder = partition_key("notifications", meta.repo_id, meta.host)
    taken = {o.key for o in store.list_objects(f"{folder}{meta.run_id}-")}
    for n in range(1, 1000):
        key = f"{folder}{meta.run_id}-{n}.parquet"
        if key in taken:
            continue
        try:
            store.put_new(key, data)
            return store.display(key)
        except AlreadyStored:  # another attempt took this number since the listing
            continue
    raise AlreadyStored(f"run {meta.run_id} has 999 notification rows already")


# ------------------------------------------------------------------------------------------- read


def _empty_frame(schema: pa.Schema) -> Any:
    import pandas as pd

    return pd.DataFrame({f.name: pd.Series(dtype=f.type.to_pandas_dtype()) for f in schema})


def load_table(
    table: str, root: StoreLike = None, model: str | None = None, host: str | None = None,
    stats: ReadStats | None = None,
) -> Any:
    """One table as a pandas DataFrame (``model``/``host`` as plain string columns), oldest first.

    ``model`` is a repo id or its slug, ``host`` a host name: only their partitions are read."""
    if table not in SCHEMAS:
        raise UserError(f"unknown results table {table!r}: choose one of {', '.join(TABLES)}")
    store = resolve(root)
    full = SCHEMAS[table].append(pa.field("model", pa.string())).append(pa.field("host", pa.string()))
    m, h = (slug(model) if model is not None else None), (slug(host) if host is not None else None)
    if table == "runs":
        arrow = catalog.read_runs(store, full, m, h, stats)
    else:
        keys = [o.key for pm, ph in catalog.partitions(store, table, m, h, stats)
                for o in catalog.list_partition(store, table, pm, ph, stats=stats)]
        blobs = catalog.fetch_all(store, keys, stats)
        arrow = catalog.conform_all(catalog.parse_tables(blobs, store, stats, catalog._slug_columns, full), full)
    if arrow.num_rows == 0:
        return _empty_frame(full)
    df = arrow.to_pandas()
    sort = [c for c in ("started_at", "run_id", "point_index", "point", "attempted_at") if c in df.columns]
    return df.sort_values(sort, kind="stable").reset_index(drop=True)


def load_runs(root: StoreLike = None, model: str | None = None, host: str | None = None,
              stats: ReadStats | None = None) -> Any:
    """All committed runs (one row each), oldest first; ``model`` is a repo id or its slug."""
    return load_table("runs", root, model, host, stats)


def load_points(
    root: StoreLike = None, model: str | None = None, host: str | None = None, run_id: str | None = None
) -> Any:
    """Benchmark points of committed runs, one row per point, oldest run first."""
    points = load_table("points", root, model, host)
    committed = set(load_runs(root, model, host)["run_id"])
    keep = points["run_id"].isin(committed)
    if run_id is not None:
        keep &= points["run_id"] == run_id
    return points[keep].reset_index(drop=True)


def load_notifications(root: StoreLike = None, model: str | None = None, host: str | None = None) -> Any:
    return load_table("notifications", root, model, host)


def load_evals(root: StoreLike = None, model: str | None = None, host: str | None = None) -> Any:
    """Evaluations of committed runs, one row each, oldest first."""
    evals = load_table("evals", root, model, host)
    committed = set(load_runs(root, model, host)["run_id"])
    return evals[evals["run_id"].isin(committed)].reset_index(drop=True)


def load_eval_answers(run_id: str, task: str, root: StoreLike = None, model: str | None = None,
                      host: str | None = None) -> Any:
    """The per-question rows of one run's evaluation of ``task`` (one object read when model and host are given)."""
    if model is not None and host is not None:
        store = resolve(root)
        key = f"{partition_key('eval_answers', model, host)}{run_id}-{slug(task)}.parquet"
        full = EVAL_ANSWERS_SCHEMA.append(pa.field("model", pa.string())).append(pa.field("host", pa.string()))
        tables = catalog.parse_tables(catalog.fetch_all(store, [key]), store, columns=catalog._slug_columns, schema=full)
        if not tables:
            return _empty_frame(full)
        df = catalog.conform(tables[0], full).to_pandas()
    else:
        df = load_table("eval_answers", root, model)
    return df[(df["run_id"] == run_id) & (df["task"] == task)].reset_index(drop=True)


def _records_of(store: ObjectStore, rows: list[Any], stats: ReadStats | None = None) -> list[RunRecord]:
    """The record JSON of each ``runs`` row, in order (found from the partition, so a moved store still reads)."""
    keys = [record_key(str(r["model"]), str(r["host"]), str(r["run_id"])) for r in rows]
    blobs = catalog.fetch_all(store, keys, stats)
    out = []
    for key in keys:
        if key not in blobs:
            log.warning("results store %s: the record of a committed run is missing (%s)", store.url, store.display(key))
            continue
        out.append(RunRecord.model_validate_json(blobs[key]))
    return out


def load_records(
    root: StoreLike = None, model: str | None = None, host: str | None = None, limit: int | None = None,
    stats: ReadStats | None = None,
) -> list[RunRecord]:
    """The full records of committed runs, oldest first (the latest ``limit`` when given)."""
    store = resolve(root)
    runs = load_runs(store, model, host, stats)
    rows = runs.to_dict(orient="records")
    if limit is not None:
        rows = rows[-limit:] if limit > 0 else []
    return _records_of(store, rows, stats)


def record_batches_newest_first(root: StoreLike = None, model: str | None = None, host: str | None = None,
                                batch: int = 32) -> Iterator[list[RunRecord]]:
    """The records of committed runs in batches of ``batch``, the newest batch first (a search that stops
    at the first batch with a match reads only what it needs)."""
    store = resolve(root)
    rows = load_runs(store, model, host).to_dict(orient="records")
    for end in range(len(rows), 0, -batch):
        yield _records_of(store, rows[max(0, end - batch):end])


def load_record(run_id: str, root: StoreLike = None, model: str | None = None, host: str | None = None) -> RunRecord:
    """One committed run's record by id (only its partition is read when ``model``/``host`` are given)."""
    store = resolve(root)
    runs = load_runs(store, model, host)
    match = runs[runs["run_id"] == run_id]
    if match.empty:
        raise UserError(f"no run {run_id!r} in the results store at {store.url}")
    found = _records_of(store, [match.iloc[0].to_dict()])
    if not found:
        raise StoreError(f"run {run_id} is committed but its record is missing from {store.url}")
    return found[0]
