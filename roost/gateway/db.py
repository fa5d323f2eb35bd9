"""The gateway's database: keys and one usage row per request, in SQLite (WAL, the default) or
PostgreSQL (a team's gateways sharing one database).

``--db`` takes a SQLAlchemy-style URL: ``sqlite:///PATH`` or ``postgresql://user@host/db`` (the
async drivers, aiosqlite and asyncpg, are chosen here). SQLite runs in WAL mode with
``synchronous=FULL`` and a busy timeout, so two gateway processes can share the file and a committed
row survives the process being killed (and the machine losing power).

Usage rows are written by :class:`UsageWriter`: requests hand their row over and the writer commits
whatever has queued in one transaction (group commit). A request that completed awaits its row's
commit before its last bytes go out, so a completed request is never lost to a crash; a request
that ended otherwise (client gone, backend cut) does not wait.

A database that does not take the rows (locked by another program for longer than the busy timeout,
unreachable) delays no answer beyond the app's ``commit_timeout_s``: the rows wait in memory and are
retried with back-off, and are committed late once it takes writes again. A gateway stopped meanwhile
writes the rows still waiting to a file (:attr:`GatewayDB.unwritten_dir`) and logs where; the next
gateway started on that database commits them (each request once: a row already there is not added
again) and removes the file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Literal

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from roost.errors import UserError
from roost.gateway.keys import KeyKind, Principal, check_kind, check_name, digest, new_key
from roost.settings import environment, roost_home

log = logging.getLogger("roost.gateway")

metadata = sa.MetaData()

keys_table = sa.Table(
    "gateway_keys", metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("trusted", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("revoked_at", sa.Float, nullable=True),
    sa.Column("note", sa.String(256), nullable=False, default=""),
)

usage_table = sa.Table(
    "gateway_usage", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("ts", sa.Float, nullable=False, index=True),  # request start, Unix seconds
    sa.Column("day", sa.String(10), nullable=False),  # UTC date of ts
    sa.Column("key_name", sa.String(128), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("user", sa.String(320), nullable=True),  # forwarded by a trusted front end
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("backend", sa.String(256), nullable=False),
    sa.Column("endpoint", sa.String(64), nullable=False),
    sa.Column("stream", sa.Boolean, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("http_status", sa.Integer, nullable=False),
    sa.Column("prompt_tokens", sa.Integer, nullable=False),
    sa.Column("completion_tokens", sa.Integer, nullable=False),
    sa.Column("prompt_source", sa.String(16), nullable=False),
    sa.Column("completion_source", sa.String(16), nullable=False),
    sa.Column("ttft_s", sa.Float, nullable=True),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("added_s", sa.Float, nullable=True),  # time the gateway added before the first byte
    sa.Column("gateway", sa.String(128), nullable=False),  # host:pid of the gateway that served it
    sa.Index("ix_gateway_usage_key_ts", "key_name", "ts"),
)

SCHEMA_LOCK = 0x726F6F7374  # "roost": the advisory lock gateways creating the tables take on PostgreSQL
USAGE_COLUMNS = [str(c.name) for c in usage_table.columns if c.name != "id"]  # plain str (JSON keys)
GroupBy = Literal["key", "kind", "model", "day", "user"]
GROUPS: dict[str, list[str]] = {
    "key": ["key_name", "kind", "model"], "kind": ["kind"], "model": ["model"], "day": ["day"], "user": ["user", "model"],
}
OUTPUT_NAMES = {"key_name": "key"}


def default_db_url() -> str:
    """``ROOST_GATEWAY_DB`` or SQLite under roost's home."""
    return environment().roost_gateway_db or f"sqlite:///{roost_home() / 'gateway' / 'gateway.db'}"


def display_db_url(url: str) -> str:
    """The URL with any password hidden (for messages and logs)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


def async_url(url: str, field: str = "--db") -> sa.URL:
    """The SQLAlchemy async URL for ``url``; a UserError for anything but SQLite or PostgreSQL."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise UserError(f"{field}: not a database URL; use sqlite:///PATH or postgresql://USER@HOST/DB") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            path = Path(parsed.database).expanduser()
            if path.exists() and not path.is_file():
                raise UserError(f"{field}: {path} is not a file; give the SQLite database's file path")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"{field}: cannot create {path.parent} ({exc.strerror}); choose another path") from None
            parsed = parsed.set(database=str(path))
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+asyncpg")
    raise UserError(f"{field}: {backend!r} databases are not supported; use sqlite:///PATH or postgresql://USER@HOST/DB")


class GatewayDB:
    """Keys and usage in one database. ``await connect()`` creates the tables if they are missing."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.display_url = display_db_url(url)
        target = async_url(url)
        self.sqlite = target.get_backend_name() == "sqlite"
        self.sqlite_path = target.database if self.sqlite else None
        self.engine: AsyncEngine = create_async_engine(target, pool_pre_ping=not self.sqlite)
        if self.sqlite:
            sa.event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)

    async def connect(self) -> GatewayDB:
        """Create the tables that are missing. On PostgreSQL, gateways starting together take turns
        (a transaction-scoped advisory lock): CREATE TABLE IF NOT EXISTS alone races there."""
        try:
            async with self.engine.begin() as conn:
                if not self.sqlite:
                    await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})
                await conn.run_sync(metadata.create_all)
        except (OSError, SQLAlchemyError) as exc:
            raise UserError(f"--db {self.display_url}: cannot open the database ({_reason(exc)})") from None
        return self

    async def close(self) -> None:
        await self.engine.dispose()

    @property
    def unwritten_dir(self) -> Path:
        """Where usage rows a stopping gateway could not commit wait for the next one: beside a SQLite file,
        else under roost's home (one folder per database, named by its URL without the password)."""
        if self.sqlite_path and self.sqlite_path != ":memory:":
            path = Path(self.sqlite_path)
            return path.with_name(f"{path.name}.unwritten-usage")
        return roost_home() / "gateway" / "unwritten-usage" / re.sub(r"[^A-Za-z0-9._-]", "_", self.display_url)

    # --- keys ---------------------------------------------------------------------------------

    async def add_key(self, name: str, kind: str, *, trusted: bool = False, note: str = "") -> str:
        """Create a key named ``name``; returns the key (the only time it exists in clear)."""
        check_name(name)
        kind_ = check_kind(kind)
        key = new_key()
        async with self.engine.begin() as conn:
            row = (await conn.execute(sa.select(keys_table.c.revoked_at).where(keys_table.c.name == name))).first()
            if row is not None and row.revoked_at is None:
                raise UserError(f"NAME {name!r}: a key of that name exists; revoke it first "
                                f"(roost gateway key revoke {name}) or choose another name")
            values = {"kind": kind_, "digest": digest(key), "trusted": trusted, "created_at": time.time(),
                      "revoked_at": None, "note": note[:256]}
            if row is None:
                await conn.execute(sa.insert(keys_table).values(name=name, **values))
            else:  # a revoked name given a new key
                await conn.execute(sa.update(keys_table).where(keys_table.c.name == name).values(**values))
        return key

    async def list_keys(self) -> list[dict[str, Any]]:
        """Every key's name, kind, trust, creation and revocation time (never the key or its digest)."""
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sa.select(
                keys_table.c.name, keys_table.c.kind, keys_table.c.trusted, keys_table.c.created_at,
                keys_table.c.revoked_at, keys_table.c.note).order_by(keys_table.c.name))).all()
        return [{"name": r.name, "kind": r.kind, "trusted": bool(r.trusted), "created_at": r.created_at,
                 "revoked": r.revoked_at is not None, "revoked_at": r.revoked_at, "note": r.note} for r in rows]

    async def revoke_key(self, name: str) -> bool:
        """Revoke the key ``name``; False when it was already revoked. A UserError for an unknown name."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(sa.select(keys_table.c.revoked_at).where(keys_table.c.name == name))).first()
            if row is None:
                raise UserError(f"NAME {name[:60]!r}: no such key (roost gateway key list shows them)")
            if row.revoked_at is not None:
                return False
            await conn.execute(sa.update(keys_table).where(keys_table.c.name == name).values(revoked_at=time.time()))
        return True

    async def active_keys(self) -> dict[str, Principal]:
        """digest -> who it names, for every key not revoked."""
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sa.select(keys_table.c.name, keys_table.c.kind, keys_table.c.trusted,
                                                 keys_table.c.digest).where(keys_table.c.revoked_at.is_(None)))).all()
        return {r.digest: Principal(name=r.name, kind=r.kind, trusted=bool(r.trusted)) for r in rows}

    async def find_key(self, key_digest: str) -> Principal | None:
        """Who an active key with this digest names (one indexed lookup), or None."""
        async with self.engine.connect() as conn:
            r = (await conn.execute(sa.select(keys_table.c.name, keys_table.c.kind, keys_table.c.trusted).where(
                keys_table.c.digest == key_digest, keys_table.c.revoked_at.is_(None)))).first()
        return Principal(name=r.name, kind=r.kind, trusted=bool(r.trusted)) if r is not None else None

    async def key_names(self) -> set[str]:
        async with self.engine.connect() as conn:
            return {r.name for r in (await conn.execute(sa.select(keys_table.c.name))).all()}

    # --- usage --------------------------------------------------------------------------------

    async def insert_usage(self, rows: list[dict[str, Any]]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(sa.insert(usage_table), rows)

    async def insert_usage_once(self, rows: list[dict[str, Any]]) -> int:
        """Insert the rows whose request id is not stored yet (one transaction); how many were inserted.
        Two gateways doing it at once insert each row once (SQLite: one writer, whose snapshot must be the
        newest; PostgreSQL: an advisory lock for the transaction)."""
        if not rows:
            return 0
        ts = [float(r["ts"]) for r in rows]
        async with self.engine.begin() as conn:
            if not self.sqlite:
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK + 1})
            else:
                await conn.execute(sa.text("DELETE FROM gateway_usage WHERE 0"))  # take the write lock first
            found = await conn.execute(sa.select(usage_table.c.request_id).where(
                usage_table.c.ts >= min(ts), usage_table.c.ts <= max(ts)))
            stored = {r.request_id for r in found}
            new = [r for r in rows if r["request_id"] not in stored]
            if new:
                await conn.execute(sa.insert(usage_table), new)
        return len(new)

    async def usage(self, *, since: float | None = None, by: GroupBy = "key") -> list[dict[str, Any]]:
        """Requests and tokens per group since ``since`` (Unix seconds), largest token count first."""
        cols = [usage_table.c[name] for name in GROUPS[by]]
        query = sa.select(
            *cols, sa.func.count().label("requests"),
            sa.func.coalesce(sa.func.sum(usage_table.c.prompt_tokens), 0).label("prompt_tokens"),
            sa.func.coalesce(sa.func.sum(usage_table.c.completion_tokens), 0).label("completion_tokens"),
        ).group_by(*cols)
        if since is not None:
            query = query.where(usage_table.c.ts >= since)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        out = [{OUTPUT_NAMES.get(k, k): (int(v) if k in ("requests", "prompt_tokens", "completion_tokens") else v)
                for k, v in r.items()} for r in rows]
        order = "day" if by == "day" else None
        return sorted(out, key=(lambda r: r["day"]) if order else
                      (lambda r: (-(r["prompt_tokens"] + r["completion_tokens"]), str(r.get(GROUPS[by][0] if by != "key" else "key")))))

    async def usage_rows(self, *, since: float | None = None) -> list[dict[str, Any]]:
        """Every usage row since ``since``, oldest first (tests and exports)."""
        query = sa.select(usage_table).order_by(usage_table.c.id)
        if since is not None:
            query = query.where(usage_table.c.ts >= since)
        async with self.engine.connect() as conn:
            return [dict(r) for r in (await conn.execute(query)).mappings().all()]


SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=FULL", "busy_timeout=10000")
"""Every SQLite connection of the gateway (SQLAlchemy's and the usage writer's): WAL, a durable commit, a busy wait."""

WRITER_BUSY_S = 1.0
"""The usage writer's own busy wait: it retries with back-off itself, so one attempt never holds its thread
(and a stopping gateway) long behind a lock another program keeps."""


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    for pragma in SQLITE_PRAGMAS:
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


def _reason(exc: BaseException) -> str:
    """One line about a database error, without the URL (it may hold a password)."""
    inner = getattr(exc, "orig", None) or exc
    text = " ".join(str(inner).split())
    return text[:200] or type(inner).__name__


class UsageWriter:
    """Group commit of usage rows: :meth:`submit` queues a row and returns a future set once it is
    committed; :meth:`run` commits whatever has queued, one transaction at a time. A failed commit
    (a locked or unreachable database) is retried with back-off; its rows are kept in memory meanwhile.

    On SQLite the commits run on a thread of their own with the standard ``sqlite3`` module (one
    ``executemany`` per batch), so the event loop that forwards tokens pays one hand-off per batch;
    PostgreSQL goes through SQLAlchemy's asyncpg driver."""

    BATCH = 512

    def __init__(self, db: GatewayDB, on_error: Any = None) -> None:
        self.db = db
        self._queue: asyncio.Queue[tuple[dict[str, Any], asyncio.Future[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._on_error = on_error
        self.pending = 0
        self.failing = False
        """Whether the last commit attempt failed (the rows wait in memory)."""
        self._inflight: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        cols = ", ".join(f'"{c}"' for c in USAGE_COLUMNS)
        self._insert_sql = f"INSERT INTO gateway_usage ({cols}) VALUES ({', '.join('?' for _ in USAGE_COLUMNS)})"

    def start(self) -> None:
        if self.db.sqlite_path is not None:
            self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-sqlite")
        self._task = asyncio.get_running_loop().create_task(self.run(), name="usage-writer")

    def submit(self, row: dict[str, Any]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((row, fut))
        self.pending += 1
        return fut

    async def run(self) -> None:
        await self._recover()
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < self.BATCH:
                batch.append(self._queue.get_nowait())
            self._inflight = batch
            await self._commit(batch)
            self._inflight = []

    def _sqlite_insert(self, rows: list[tuple[Any, ...]]) -> None:
        """On the writer thread: one transaction for the batch."""
        if self._conn is None:
            assert self.db.sqlite_path is not None
            conn = sqlite3.connect(self.db.sqlite_path, timeout=WRITER_BUSY_S, isolation_level=None)
            for pragma in (*SQLITE_PRAGMAS, f"busy_timeout={int(WRITER_BUSY_S * 1000)}"):
                conn.execute(f"PRAGMA {pragma}")
            self._conn = conn  # only once every pragma is in force
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(self._insert_sql, rows)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    async def _commit(self, batch: list[tuple[dict[str, Any], asyncio.Future[None]]]) -> None:
        delay = 0.05
        while True:
            try:
                if self._thread is not None:
                    rows = [tuple(row[c] for c in USAGE_COLUMNS) for row, _ in batch]
                    await asyncio.get_running_loop().run_in_executor(self._thread, self._sqlite_insert, rows)
                else:
                    await self.db.insert_usage([row for row, _ in batch])
                break
            except (OSError, SQLAlchemyError, sqlite3.Error) as exc:
                self.failing = True
                if self._on_error is not None:
                    self._on_error()
                log.error("usage: could not write %d row(s) to %s (%s); retrying in %.1f s",
                          len(batch), self.db.display_url, _reason(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        if self.failing:
            log.info("usage: wrote %d row(s) to %s after it refused them", len(batch), self.db.display_url)
        self.failing = False
        self.pending -= len(batch)
        for _, fut in batch:
            if not fut.done():
                fut.set_result(None)

    async def close(self, timeout_s: float = 10.0, failing_s: float = 2.0) -> None:
        """Commit what is queued (within ``timeout_s``; ``failing_s`` while the database refuses it), then
        stop; rows still not committed go to a file for the next gateway (:meth:`_spill`)."""
        if self._task is None:
            return
        start = time.monotonic()
        while self.pending and not self._task.done():
            waited = time.monotonic() - start
            if waited >= timeout_s or (self.failing and waited >= failing_s):
                break
            await asyncio.sleep(0.02)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        left = [row for row, _ in self._inflight]
        while not self._queue.empty():
            left.append(self._queue.get_nowait()[0])
        if left:  # the in-flight batch may still commit on the thread: the next gateway adds each row once
            self._spill(left)
        if self._thread is not None:
            if self._conn is not None:
                conn = self._conn
                self._thread.submit(conn.close)
            self._thread.shutdown(wait=True)

    def _spill(self, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` (not committed) to a new file of :attr:`GatewayDB.unwritten_dir`, and say where."""
        folder = self.db.unwritten_dir
        path = folder / f"{time.time_ns()}-{os.getpid()}.jsonl"
        try:
            from roost.store.atomic import atomic_write_bytes  # the store package loads pyarrow: only here

            atomic_write_bytes(path, b"".join(orjson.dumps({c: r.get(c) for c in USAGE_COLUMNS}) + b"\n" for r in rows))
        except OSError as exc:
            log.error("usage: %d row(s) were not written to %s and cannot be kept in %s (%s): they are LOST",
                      len(rows), self.db.display_url, folder, exc.strerror or exc)
            return
        log.error("usage: %d row(s) not written to %s before the gateway stopped; kept in %s: the next gateway "
                  "started on this database writes them", len(rows), self.db.display_url, path)

    async def _recover(self) -> None:
        """Commit the rows an earlier gateway kept in :attr:`GatewayDB.unwritten_dir` (each request once), then
        remove their file; retried with back-off while the database refuses them."""
        folder = self.db.unwritten_dir
        files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
        for path in files:
            try:
                rows = [{c: r.get(c) for c in USAGE_COLUMNS}
                        for r in map(orjson.loads, path.read_bytes().splitlines()) if isinstance(r, dict)]
            except (OSError, orjson.JSONDecodeError) as exc:
                log.error("usage: cannot read %s (%s); left in place", path, exc)
                continue
            delay = 0.05
            while True:
                try:
                    added = await self.db.insert_usage_once(rows)
                    break
                except (IntegrityError, DataError, KeyError, TypeError, ValueError) as exc:
                    added = -1  # rows edited by hand, or of another release: never retried, never dropped
                    log.error("usage: the rows kept in %s do not fit the usage table (%s); left in place as %s",
                              path, _reason(exc), path.with_suffix(".bad"))
                    with contextlib.suppress(OSError):
                        path.rename(path.with_suffix(".bad"))
                    break
                except (OSError, SQLAlchemyError) as exc:
                    log.error("usage: could not write the %d row(s) kept in %s to %s (%s); retrying in %.1f s",
                              len(rows), path, self.db.display_url, _reason(exc), delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            if added < 0:
                continue
            path.unlink(missing_ok=True)
            log.info("usage: wrote %d row(s) an earlier gateway kept in %s (%d were there already)", added, path,
                     len(rows) - added)
        with contextlib.suppress(OSError):
            if files:
                folder.rmdir()  # only when empty


__all__ = ["GROUPS", "USAGE_COLUMNS", "GatewayDB", "GroupBy", "KeyKind", "UsageWriter",
           "async_url", "default_db_url", "display_db_url"]
