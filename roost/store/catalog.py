"""The ``runs`` table read without a full scan: a compacted catalog plus each partition's newest objects.

Every run commits one object, ``runs/model=M/host=H/<run_id>.parquet`` (run ids begin with their UTC
start time, so a partition's keys are in start order). Reading 100,000 of them one by one would take
minutes on an object store; instead, from time to time, :func:`compact` writes every row known so far
into one new object::

    runs/_catalog/<YYYYMM of its newest run>/<newest run id>-<runs held>-<digest>.parquet

sorted by partition (model, host) and start, in row groups of :data:`ROW_GROUP_ROWS` whose statistics let a
reader fetch only the groups of the partition it wants (a ranged GET per group on an object store). Its
Parquet metadata carries a *watermark*: the newest run id it holds minus :data:`LATE_COMMIT_WINDOW`.
A reader takes the newest catalog (the newest month's folder, listed alone) and, per partition it reads,
lists only the keys after the watermark (``start_after``), keeping the rows the catalog does not have.

A run that commits long after it started (a landing of more than :data:`LATE_AFTER`, or one kept on a
worker while the store was unreachable and pushed days later) could be behind the watermark of a
catalog written meanwhile, so its writer also puts a copy under ``runs/_late/model=M/host=H/``
(:func:`commit_late`), a folder every reader and compaction lists whole (it holds only such runs).

Nothing is rewritten: a compaction writes a new object under a new name (``If-None-Match`` on S3, a
link on a directory), the per-run objects stay where they are (pandas and older roost releases read
them; pyarrow skips ``_catalog`` and ``_late``), and two compactions at once both write complete
catalogs (a reader takes the newest name; whatever either missed is after its watermark or under
``_late``, so the reader finds it).

Objects that are not readable Parquet (truncated by a tool that does not write atomically, or a
stray file) or not rows of the table (no ``run_id``, a column of another type than the table's) are
skipped with a warning naming them and counted in :class:`ReadStats`; they never fail a read. So is a
catalog that cannot be read: the next older one is used, else every run object is listed (slower,
never a run missed: a catalog only indexes the per-run objects, which stay).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from roost.inputs.text import shown
from roost.records import RUN_ID_TIME
from roost.store.atomic import AlreadyStored
from roost.store.layout import CATALOG_PREFIX, LATE_PREFIX
from roost.store.objects import MissingObject, ObjectInfo, ObjectStore

log = logging.getLogger("roost.store")

ROW_GROUP_ROWS = 1024
"""Rows per catalog row group: a partition's read fetches about this many rows more than it needs."""

LATE_COMMIT_WINDOW = dt.timedelta(days=7)
"""How far behind a catalog's newest run its watermark is: a run started within it is found by listing."""

LATE_AFTER = LATE_COMMIT_WINDOW - dt.timedelta(days=1)
"""A run committing this long after its start also goes under ``runs/_late/`` (a day's margin for clocks)."""


COMPACT_AFTER = 16
"""A partition with this many runs after the catalog's watermark gets a new catalog on the next commit."""

FETCH_THREADS = 16
"""Objects fetched at once (an object store's latency is hidden by asking in parallel)."""

FOOTER_READ = 64 * 1024
"""Parquet's C++ reader reads this much of a file's end to find its footer."""

_WATERMARK = b"roost.catalog.watermark"
_RUNS = b"roost.catalog.runs"


@dataclass
class ReadStats:
    """What a read touched: for the scale benchmark and the warnings of a read that skipped objects."""

    requests: int = 0
    objects: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    catalog: str = ""


def fetch_all(store: ObjectStore, keys: Sequence[str], stats: ReadStats | None = None) -> dict[str, bytes]:
    """``{key: bytes}`` of every key that still exists, fetched in parallel."""
    if not keys:
        return {}

    def one(key: str) -> tuple[str, bytes | None]:
        try:
            return key, store.get(key)
        except MissingObject:
            return key, None

    if len(keys) == 1:
        got = [one(keys[0])]
    else:
        with ThreadPoolExecutor(max_workers=min(FETCH_THREADS, len(keys))) as pool:
            got = list(pool.map(one, keys))
    out = {k: v for k, v in got if v is not None}
    if stats is not None:
        stats.requests += len(keys)
        stats.objects += len(out)
        stats.bytes += sum(len(v) for v in out.values())
    return out


def _skip(store: ObjectStore, key: str, why: str, stats: ReadStats | None) -> None:
    log.warning("results store: skipped %s: %s; a half-written or stray file, left in place",
                shown(store.display(key), 300), why)
    if stats is not None:
        stats.skipped.append(key)


REQUIRED = ("run_id", "started_at")
"""Columns every row roost writes has (where the table has them): an object without them is not rows of it."""


def fit(table: pa.Table, schema: pa.Schema) -> tuple[pa.Table | None, str]:
    """``table`` narrowed to the columns it shares with ``schema``, each of the schema's type; or None and
    why it cannot be rows of that table (a :data:`REQUIRED` column missing or null, a column that does not cast).
    Objects fitted so concatenate whatever else a stray file holds."""
    names = [n for n in table.column_names if n in schema.names]
    required = [n for n in REQUIRED if n in schema.names]
    missing = [n for n in required if n not in names]
    if missing:
        return None, f"not rows of the table (no {' or '.join(missing)} column)"
    table = table.select(names)
    for i, name in enumerate(names):
        want = schema.field(name).type
        col = table.column(i)
        if col.type != want:
            try:
                col = col.cast(want)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return None, f"column {shown(name, 60)} holds {shown(str(col.type), 60)}, not {want}"
            table = table.set_column(i, name, col)
    empty = [n for n in required if table[n].null_count]
    if empty:
        return None, f"not rows of the table (a row without {' or '.join(empty)})"
    return table, ""


def parse_tables(blobs: dict[str, bytes], store: ObjectStore, stats: ReadStats | None = None,
                 columns: Callable[[str], dict[str, str]] | None = None,
                 schema: pa.Schema | None = None) -> list[pa.Table]:
    """Each object as an Arrow table (plus constant ``columns(key)``), fitted to ``schema`` when given
    (:func:`fit`); unreadable and unfitting ones skipped and warned."""
    import pyarrow.parquet as pq

    tables = []
    for key, data in blobs.items():
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
            _skip(store, key, f"not a readable Parquet object ({shown(' '.join(str(exc).split()), 120)})", stats)
            continue
        for name, value in (columns(key) if columns else {}).items():
            table = table.drop_columns([name]) if name in table.column_names else table
            table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()))
        if schema is not None:
            fitted, why = fit(table, schema)
            if fitted is None:
                _skip(store, key, why, stats)
                continue
            table = fitted
        tables.append(table)
    return tables


# --- partitions ------------------------------------------------------------------------------------


def partitions(store: ObjectStore, table: str, model: str | None = None, host: str | None = None,
               stats: ReadStats | None = None) -> list[tuple[str, str]]:
    """The ``(model slug, host slug)`` partitions of ``table``, narrowed to ``model``/``host`` slugs."""
    if model is not None and host is not None:
        return [(model, host)]
    models: list[str] = []
    if model is not None:
        models = [model]
    else:
        models = [d.removeprefix("model=") for d in store.list_dirs(f"{table}/") if d.startswith("model=")]
        if stats is not None:
            stats.requests += 1
    out: list[tuple[str, str]] = []
    for m in models:
        hosts = [d.removeprefix("host=") for d in store.list_dirs(f"{table}/model={m}/") if d.startswith("host=")]
        if stats is not None:
            stats.requests += 1
        out += [(m, h) for h in hosts if host is None or h == host]
    return out


def _prefix(table: str, model: str, host: str) -> str:
    return f"{table}/model={model}/host={host}/"


def _slug_columns(key: str) -> dict[str, str]:
    """The partition of an object as the ``model`` and ``host`` columns (hive partitioning's)."""
    parts = dict(p.split("=", 1) for p in key.split("/")[:-1] if "=" in p)
    return {"model": parts.get("model", ""), "host": parts.get("host", "")}


def list_partition(store: ObjectStore, table: str, model: str, host: str, start_after: str | None = None,
                   stats: ReadStats | None = None) -> list[ObjectInfo]:
    prefix = _prefix(table, model, host)
    found = store.list_objects(prefix, start_after=f"{prefix}{start_after}" if start_after else None)
    if stats is not None:
        stats.requests += 1
    return [o for o in found if o.key.endswith(".parquet")]


# --- the catalog -----------------------------------------------------------------------------------


@dataclass
class Catalog:
    """The newest catalog of a store, as found by :func:`newest_catalog`."""

    key: str
    size: int
    file: Any = field(default=None, repr=False, compare=False)
    """Its ``pyarrow.parquet.ParquetFile``, opened (footer read) by :func:`newest_catalog`."""

    @property
    def newest_run(self) -> str:
        """The run id its name starts with (the newest run it holds, as a key-safe string)."""
        name = self.key.rpartition("/")[2]
        return name.rsplit("-", 2)[0]


def newest_catalog(store: ObjectStore, stats: ReadStats | None = None) -> Catalog | None:
    """The newest catalog that opens: the newest month's folder listed (two requests, however many catalogs
    there are) and its newest object's footer read; one that does not open (torn by a copy, a stray file)
    is skipped with a warning for the next older one."""
    months = sorted((d for d in store.list_dirs(CATALOG_PREFIX) if d.isdigit()), reverse=True)
    if stats is not None:
        stats.requests += 1
    for month in months:
        found = [o for o in store.list_objects(f"{CATALOG_PREFIX}{month}/") if o.key.endswith(".parquet")]
        if stats is not None:
            stats.requests += 1
        for newest in sorted(found, key=lambda o: o.key, reverse=True):
            cat = Catalog(newest.key, newest.size)
            try:
                cat.file = _open_catalog(store, cat, stats)
            except (pa.ArrowException, OSError, MissingObject) as exc:
                _skip(store, cat.key, f"not a readable catalog ({shown(' '.join(str(exc).split()), 120)})", stats)
                continue
            return cat
    return None


def run_started(run_id: str) -> dt.datetime | None:
    """The UTC start a run id begins with; None for an id not of roost's form (a row another tool wrote)."""
    try:
        return dt.datetime.strptime(run_id[:16], RUN_ID_TIME).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def late_key(run_key: str) -> str:
    """``runs/model=M/host=H/<run>.parquet`` -> ``runs/_late/model=M/host=H/<run>.parquet``."""
    return LATE_PREFIX + run_key.removeprefix("runs/")


def commit_late(store: ObjectStore, run_key: str, data: bytes, watermark: str | None = None,
                now: dt.datetime | None = None) -> bool:
    """Also put a committed run under ``runs/_late/`` when it started :data:`LATE_AFTER` or more before
    ``now`` or behind ``watermark`` (None: the newest catalog's); whether it did."""
    if run_key.startswith(LATE_PREFIX):
        return False
    run_id = run_key.rpartition("/")[2].removesuffix(".parquet")
    started = run_started(run_id)
    late = started is not None and started <= (now or dt.datetime.now(dt.UTC)) - LATE_AFTER
    if not late:
        if watermark is None:
            cat = newest_catalog(store)
            watermark = read_watermark(store, cat) if cat is not None else ""
        late = bool(watermark) and run_id[:16] <= watermark
    if late:
        with contextlib.suppress(AlreadyStored):
            store.put_new(late_key(run_key), data)
        log.info("results store %s: run %s committed after the late-commit window, also under %s", store.url,
                 run_id, LATE_PREFIX)
    return late


def list_late(store: ObjectStore, model: str | None, host: str | None,
              stats: ReadStats | None = None) -> list[ObjectInfo]:
    """The late commits of the partitions asked for (one listing: the folder holds only late runs)."""
    prefix = LATE_PREFIX + (f"model={model}/" if model is not None else "")
    found = store.list_objects(prefix)
    if stats is not None:
        stats.requests += 1
    return [o for o in found if o.key.endswith(".parquet")
            and (host is None or f"/host={host}/" in o.key)]


class _RangeFile(io.RawIOBase):
    """A catalog object as a seekable file over ranged GETs, fetched in aligned blocks and kept: the
    footer is one request, a row group one or two."""

    BLOCK = 1 << 20

    def __init__(self, store: ObjectStore, key: str, size: int, stats: ReadStats | None) -> None:
        self._store, self._key, self._size, self._stats = store, key, size, stats
        self._pos = 0
        self._blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _fetch(self, first: int, last: int) -> None:
        missing = [b for b in range(first, last + 1) if b not in self._blocks]
        if not missing:
            return
        start, end = missing[0] * self.BLOCK, min(self._size, (missing[-1] + 1) * self.BLOCK)
        data = self._store.get_range(self._key, start, end)
        if self._stats is not None:
            self._stats.requests += 1
            self._stats.bytes += len(data)
        for b in range(missing[0], missing[-1] + 1):
            self._blocks[b] = data[(b - missing[0]) * self.BLOCK:(b - missing[0] + 1) * self.BLOCK]

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        first, last = self._pos // self.BLOCK, (end - 1) // self.BLOCK
        self._fetch(first, last)
        buf = b"".join(self._blocks[b] for b in range(first, last + 1))
        out = buf[self._pos - first * self.BLOCK:end - first * self.BLOCK]
        self._pos = end
        return out

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


def _open_catalog(store: ObjectStore, cat: Catalog, stats: ReadStats | None) -> Any:
    import pyarrow.parquet as pq

    path = store.local_path(cat.key)
    if path is not None:
        if stats is not None:
            stats.requests += 1
            stats.bytes += cat.size
        return pq.ParquetFile(path)
    reader = _RangeFile(store, cat.key, cat.size, stats)
    reader.seek(max(0, cat.size - FOOTER_READ))
    reader.read()  # what Parquet's reader asks for first (the footer's end), in one request
    return pq.ParquetFile(reader)


PARTITION_COLUMN = "_partition"
"""``"<model slug> <host slug>"``: the catalog's sort key, whose row-group statistics bound each group's
partitions exactly (a space sorts before every character a slug has, so the order is model's, then host's)."""


def _partition_of(model: str, host: str) -> str:
    return f"{model} {host}"


def _groups_for(meta: Any, model: str | None, host: str | None) -> list[int]:
    """Row groups whose partition statistics admit the partition (a model's partitions: all its hosts)."""
    if model is None:
        return list(range(meta.num_row_groups))
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if PARTITION_COLUMN not in names:
        return list(range(meta.num_row_groups))
    pi = names.index(PARTITION_COLUMN)
    low = _partition_of(model, host) if host is not None else f"{model} "
    high = _partition_of(model, host) if host is not None else f"{model}!"  # "!" follows " ": every host of the model
    out = []
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(pi).statistics
        if st is None or not st.has_min_max or (st.min <= high and st.max >= low):
            out.append(g)
    return out


def read_catalog(store: ObjectStore, cat: Catalog, model: str | None = None, host: str | None = None,
                 stats: ReadStats | None = None) -> tuple[pa.Table, str]:
    """The catalog's rows of the partition (every row when unfiltered) and its watermark."""
    import pyarrow.compute as pc

    pf = cat.file if cat.file is not None else _open_catalog(store, cat, stats)
    watermark = (pf.metadata.metadata or {}).get(_WATERMARK, b"").decode()
    groups = _groups_for(pf.metadata, model, host)
    table = pf.read_row_groups(groups) if groups else pf.schema_arrow.empty_table()
    if not {"run_id", "model", "host"} <= set(table.column_names):
        raise pa.ArrowInvalid("not a runs catalog (no run_id, model or host column)")
    if model is not None:
        table = table.filter(pc.equal(table["model"], model))
    if host is not None:
        table = table.filter(pc.equal(table["host"], host))
    return table, watermark


def watermark_for(newest_run_id: str) -> str:
    """The run-id prefix the catalog is complete up to: its newest run's start minus the late-commit window
    ("" for an id not of roost's form: no watermark, every object is listed)."""
    started = run_started(newest_run_id)
    return (started - LATE_COMMIT_WINDOW).strftime(RUN_ID_TIME) if started is not None else ""


def conform_all(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """``tables`` as one table with ``schema`` (concatenated first: one conversion, not one per object)."""
    if not tables:
        return schema.empty_table()
    return conform(pa.concat_tables(tables, promote_options="permissive"), schema)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: missing ones null (an older object), extra ones dropped."""
    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table[f.name]
            cols.append(col if col.type == f.type else col.cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def read_runs(store: ObjectStore, schema: pa.Schema, model: str | None = None, host: str | None = None,
              stats: ReadStats | None = None) -> pa.Table:
    """Every committed run of the partitions asked for (slugs), as one table with ``schema`` (the runs
    schema plus ``model`` and ``host``): the newest catalog's rows and what came after its watermark."""
    stats = stats if stats is not None else ReadStats()
    tables, known, watermark = _catalog_rows(store, schema, model, host, stats)
    fresh = _unknown([o for m, h in partitions(store, "runs", model, host, stats)
                      for o in list_partition(store, "runs", m, h, watermark or None, stats)]
                     + list_late(store, model, host, stats), known)
    blobs = fetch_all(store, fresh, stats)
    tables += parse_tables(blobs, store, stats, _slug_columns, schema)
    if not tables:
        return schema.empty_table()
    table = conform_all(tables, schema)
    if len(fresh):  # a run both in the catalog and listed (before it was known), or listed twice: once
        table = _dedupe(table)
    return table


def _catalog_rows(store: ObjectStore, schema: pa.Schema, model: str | None, host: str | None,
                  stats: ReadStats) -> tuple[list[pa.Table], set[str], str]:
    """The newest catalog's rows of the partitions asked for (fitted to ``schema``), the run ids they hold
    and its watermark; none of them (every object is then listed) when it cannot be read whole."""
    cat = newest_catalog(store, stats)
    if cat is None:
        return [], set(), ""
    try:
        rows, watermark = read_catalog(store, cat, model, host, stats)
        fitted, why = fit(rows, schema)
        if fitted is None:
            raise pa.ArrowInvalid(why)
    except (pa.ArrowException, OSError, MissingObject) as exc:
        _skip(store, cat.key, f"not a readable catalog ({shown(' '.join(str(exc).split()), 120)}); every run "
              "object is read instead", stats)
        return [], set(), ""
    stats.catalog = cat.key
    return [fitted], set(fitted["run_id"].to_pylist()), watermark


def _unknown(objects: Iterable[ObjectInfo], known: set[str]) -> list[str]:
    """The keys of runs not in ``known``, each run once (a late run is listed twice: its object and its copy)."""
    out: dict[str, str] = {}
    for o in objects:
        run_id = o.key.rpartition("/")[2].removesuffix(".parquet")
        if run_id not in known:
            out.setdefault(run_id, o.key)
    return list(out.values())


def _dedupe(table: pa.Table) -> pa.Table:
    seen: set[str] = set()
    keep = []
    for run_id in table["run_id"].to_pylist():
        keep.append(run_id not in seen)
        seen.add(run_id)
    return table.filter(pa.array(keep))


def fresh_count(store: ObjectStore, model: str, host: str, cat: Catalog | None) -> int:
    """How many of the partition's runs are newer than the newest run of ``cat`` (every run without one)."""
    return len(list_partition(store, "runs", model, host, cat.newest_run if cat is not None else None))


def read_watermark(store: ObjectStore, cat: Catalog) -> str:
    pf = cat.file if cat.file is not None else _open_catalog(store, cat, None)
    return str((pf.metadata.metadata or {}).get(_WATERMARK, b"").decode())


def compact(store: ObjectStore, schema: pa.Schema) -> str | None:
    """Write a new catalog holding every committed run; its key, or None when nothing is new.

    Each partition is listed after the previous catalog's watermark only, and ``runs/_late/`` whole."""
    stats = ReadStats()
    tables, known, watermark = _catalog_rows(store, schema, None, None, stats)
    fresh = _unknown([o for m, h in partitions(store, "runs", stats=stats)
                      for o in list_partition(store, "runs", m, h, watermark or None, stats)]
                     + list_late(store, None, None, stats), known)
    new = parse_tables(fetch_all(store, fresh, stats), store, stats, _slug_columns, schema)
    if not new:
        return None
    return write_catalog(store, conform_all([*tables, *new], schema))


def write_catalog(store: ObjectStore, table: pa.Table) -> str:
    """Write ``table`` (runs rows with ``model`` and ``host``) as a new catalog; its key. Rows are kept once
    per run id, sorted by model, host and start; the name sorts after every earlier catalog's."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = _dedupe(table)
    if PARTITION_COLUMN in table.column_names:
        table = table.drop_columns([PARTITION_COLUMN])
    table = table.append_column(PARTITION_COLUMN, pc.binary_join_element_wise(table["model"], table["host"], " "))
    table = table.sort_by([(PARTITION_COLUMN, "ascending"), ("started_at", "ascending"), ("run_id", "ascending")])
    run_ids = sorted(table["run_id"].to_pylist())
    newest = run_ids[-1]
    meta = dict(table.schema.metadata or {})
    meta[_WATERMARK] = watermark_for(newest).encode()
    meta[_RUNS] = str(table.num_rows).encode()
    table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    # statistics only where a reader prunes by them: on every column they would make the footer (read first)
    # larger than the row groups a partition needs
    pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, compression="zstd",
                   write_statistics=[PARTITION_COLUMN, "run_id", "started_at"])
    digest = hashlib.sha256("\n".join(run_ids).encode()).hexdigest()[:12]
    # the newest catalog sorts last: by its newest run, then by how many runs it holds (a compaction
    # for a late commit adds an older run)
    month = newest[:6] if newest[:6].isdigit() else "000000"
    key = f"{CATALOG_PREFIX}{month}/{_safe(newest)}-{table.num_rows:010d}-{digest}.parquet"
    with contextlib.suppress(AlreadyStored):  # another worker compacted the same runs at once: the same catalog
        store.put_new(key, sink.getvalue().to_pybytes())
    log.info("results store %s: compacted %d runs into %s", store.url, table.num_rows, key)
    return key


def _safe(run_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in run_id)
