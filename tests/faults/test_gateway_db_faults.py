"""The gateway's SQLite database locked by another program, with the real parts: two ``roost gateway serve``
processes sharing one database in front of the synthetic server (FAKE backend,
``tests/roost/bench/synthetic_server.py``), and a third connection holding ``BEGIN EXCLUSIVE`` for longer
than the gateway's busy timeout (``roost.gateway.db.SQLITE_PRAGMAS``: 10 s), as a backup tool or a
``sqlite3`` shell left in a transaction does.

Requests are answered, not refused (the answer is the backend's, and what it cost is kept): each one is
delayed at most the app's ``commit_timeout_s`` (10 s) waiting for its row; the rows wait in memory and are
committed late once the lock is released; a gateway stopped while the lock is still held writes its
waiting rows to a file beside the database, and the next gateway started on it commits them: no row is
lost, none is counted twice."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bench_synthetic import Synthetic, start_synthetic
from support.gateway import UPSTREAM_KEY, GatewayProcess, add_key, usage_rows
from support.wait import apoll, poll

from roost.gateway.config import GatewayConfig
from roost.gateway.db import SQLITE_PRAGMAS

BUSY_S = int(next(p for p in SQLITE_PRAGMAS if p.startswith("busy_timeout=")).split("=")[1]) / 1000
COMMIT_S = GatewayConfig().commit_timeout_s
HOLD_S = BUSY_S + 3  # longer than the busy timeout of every connection of the gateway


@pytest.fixture(scope="module")
def gwdb_backend() -> Iterator[Synthetic]:
    server = start_synthetic(api_key=UPSTREAM_KEY)
    try:
        yield server
    finally:
        server.stop()


async def gwdb_requests(jobs: list[tuple[GatewayProcess, str, bool]]) -> list[tuple[int, float, str]]:
    """Send each (gateway, key, stream) request at once; (status, seconds, request id) of each."""
    async with httpx.AsyncClient(timeout=COMMIT_S + 30) as http:
        async def one(gw: GatewayProcess, key: str, stream: bool) -> tuple[int, float, str]:
            started = time.monotonic()
            body = {"model": "synthetic", "messages": [{"role": "user", "content": "locked?"}], "max_tokens": 4,
                    "stream": stream}
            async with http.stream("POST", f"{gw.url}/v1/chat/completions", json=body,
                                   headers={"Authorization": f"Bearer {key}"}) as resp:
                text = (await resp.aread()).decode()
            whole = resp.status_code == 200 and (not stream or text.rstrip().endswith("data: [DONE]"))
            return (resp.status_code if whole else -1), time.monotonic() - started, resp.headers.get("x-request-id", "")

        return await asyncio.gather(*(one(*job) for job in jobs))


def gwdb_metric(gw: GatewayProcess, name: str) -> float:
    found = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", gw.metrics(), re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def gwdb_pair(gwdb_backend: Synthetic, tmp_path: Path) -> Iterator[tuple[GatewayProcess, GatewayProcess, str]]:
    """Two gateways on one SQLite database (``tmp_path/usage.db``) with a key ``team`` made before they start (it
    is cached), started at once (each takes seconds), and stopped after the test whatever it left them in."""
    db = f"sqlite:///{tmp_path / 'usage.db'}"
    key = add_key(db, "team", "user")
    pair = (GatewayProcess(db, [gwdb_backend.base_url], log_path=tmp_path / "a.log"),
            GatewayProcess(db, [gwdb_backend.base_url], log_path=tmp_path / "b.log"))
    starting = [threading.Thread(target=gw.start) for gw in pair]
    try:
        for t in starting:
            t.start()
        for t in starting:
            t.join(timeout=90)
        assert all(gw.proc is not None and gw.proc.poll() is None for gw in pair), pair[0].log() + pair[1].log()
        yield (*pair, key)
    finally:
        for gw in pair:
            gw.stop()


def test_a_locked_database_delays_answers_within_a_bound_and_loses_no_usage_row(
        gwdb_pair: tuple[GatewayProcess, GatewayProcess, str], tmp_path: Path) -> None:
    a, b, key = gwdb_pair
    path = tmp_path / "usage.db"
    db = a.db_url
    late_key = add_key(db, "late", "app")  # made after both started: not cached, looked up under the lock
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        locked_at = time.monotonic()
        jobs = [(gw, k, stream) for gw in (a, b) for k in (key, late_key) for stream in (False, True)]
        answers = asyncio.run(gwdb_requests(jobs))
        assert [status for status, _, _ in answers] == [200] * len(jobs), answers  # answered, not refused
        assert max(seconds for _, seconds, _ in answers) < COMMIT_S + 5  # bounded: the commit wait, no more
        ids = {gw: {rid for (g, _, _), (_, _, rid) in zip(jobs, answers, strict=True) if g is gw} for gw in (a, b)}
        health = httpx.get(f"{a.url}/health", timeout=5).json()
        assert health["status"] == "ok" and health["usage_pending"] == 4, health
        assert gwdb_metric(a, "roost_gateway_usage_write_errors_total") >= 1, a.log()

        b.stop()  # stopped while the lock is still held: its four rows go to a file beside the database
        stopped = b.log()
        assert "row(s) not written to" in stopped and "kept in" in stopped and "LOST" not in stopped, stopped
        kept = list(path.with_name(f"{path.name}.unwritten-usage").glob("*.jsonl"))
        assert len(kept) == 1 and len(kept[0].read_text().splitlines()) == 4, kept

        time.sleep(max(0.0, HOLD_S - (time.monotonic() - locked_at)))
        assert holder.execute("SELECT count(*) FROM gateway_usage").fetchone() == (0,)  # nothing got through
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # the running gateway commits its rows late; the restarted one commits what the stopped one kept
    poll(lambda: {r["request_id"] for r in usage_rows(db)}, lambda seen: not seen < ids[a], timeout_s=15, every_s=0.2)
    assert {r["request_id"] for r in usage_rows(db)} == ids[a], a.log()
    assert httpx.get(f"{a.url}/health", timeout=5).json()["usage_pending"] == 0
    b.start()
    deadline = time.monotonic() + 15
    while len(usage_rows(db)) < len(jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
    rows = usage_rows(db)
    assert sorted(r["request_id"] for r in rows) == sorted(ids[a] | ids[b]), b.log()  # every request, each once
    assert {r["key_name"] for r in rows} == {"team", "late"} and all(r["completion_tokens"] > 0 for r in rows)
    kept_dir = path.with_name(f"{path.name}.unwritten-usage")
    while kept_dir.exists() and time.monotonic() < deadline:  # removed right after its rows are committed
        time.sleep(0.05)
    assert not kept_dir.exists(), b.log()  # so a later start adds nothing again


def gwdb_row(n: int) -> dict[str, object]:
    now = time.time()
    return {"request_id": f"pg-{n:04d}-{os.urandom(4).hex()}", "ts": now, "day": time.strftime("%Y-%m-%d", time.gmtime(now)),
            "key_name": "team", "kind": "user", "user": None, "model": "synthetic", "backend": "http://b", "endpoint": "chat",
            "stream": False, "status": "ok", "http_status": 200, "prompt_tokens": 6, "completion_tokens": 4,
            "prompt_source": "usage", "completion_source": "usage", "ttft_s": 0.1, "duration_s": 0.2, "added_s": 0.001,
            "gateway": "test:1"}


def test_rows_a_gateway_stopping_while_postgresql_is_away_could_not_write_are_written_by_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on PostgreSQL, with the gateway's usage writer in this process: the server is not there while
    rows wait (nothing listens on its port), the writer stops within its bound and keeps them under roost's
    home; the server comes up on that port and the next writer commits them, a row already stored once."""
    if os.environ.get("ROOST_TESTS_NO_POSTGRES") == "1":
        pytest.skip("ROOST_TESTS_NO_POSTGRES=1: the PostgreSQL tests are off")
    from support.postgres import PostgresServer

    from roost.gateway.db import GatewayDB, UsageWriter
    from roost.net import free_port

    monkeypatch.setenv("ROOST_HOME", str(tmp_path / "home"))
    port = free_port()
    url = f"postgresql://roost@127.0.0.1:{port}/roost"
    rows = [gwdb_row(n) for n in range(3)]

    async def while_away() -> tuple[Path, float]:
        db = GatewayDB(url)
        writer = UsageWriter(db)
        writer.start()
        for row in rows:
            writer.submit(dict(row))
        await apoll(lambda: writer.failing, timeout_s=10, every_s=0.05)
        assert writer.failing and writer.pending == 3
        started = time.monotonic()
        await writer.close()
        await db.close()
        return db.unwritten_dir, time.monotonic() - started

    folder, took = asyncio.run(while_away())
    assert took < 5
    assert folder.is_relative_to(tmp_path / "home") and str(port) in folder.name and "roost" in folder.name
    (kept,) = folder.glob("*.jsonl")
    assert len(kept.read_text().splitlines()) == 3

    with PostgresServer(tmp_path / "pg", port=port):
        async def back() -> list[dict[str, object]]:
            db = await GatewayDB(url).connect()
            await db.insert_usage([rows[0]])  # as if the batch in flight had committed on its way out
            writer = UsageWriter(db)
            writer.start()
            await apoll(folder.exists, lambda there: not there, timeout_s=20, every_s=0.05)
            stored = await db.usage_rows()
            await writer.close()
            await db.close()
            return stored

        stored = asyncio.run(back())
    assert not folder.exists()
    assert sorted(str(r["request_id"]) for r in stored) == sorted(str(r["request_id"]) for r in rows)  # each once


def test_a_kept_file_that_does_not_fit_is_set_aside_and_usage_is_still_written(tmp_path: Path) -> None:
    """A kept file edited by hand (a row without its request id) neither stops the writer nor is dropped."""
    from roost.gateway.db import GatewayDB, UsageWriter

    url = f"sqlite:///{tmp_path / 'usage.db'}"
    good, bad = gwdb_row(1), {**gwdb_row(2), "request_id": None}

    async def go() -> list[dict[str, object]]:
        db = await GatewayDB(url).connect()
        db.unwritten_dir.mkdir()
        (db.unwritten_dir / "1-1.jsonl").write_text(json.dumps(bad) + "\n")
        writer = UsageWriter(db)
        writer.start()
        await asyncio.wait_for(writer.submit(dict(good)), 10)  # committed: the writer went on
        stored = await db.usage_rows()
        await writer.close()
        await db.close()
        return stored

    stored = asyncio.run(go())
    assert [r["request_id"] for r in stored] == [good["request_id"]]
    assert [p.name for p in (tmp_path / "usage.db.unwritten-usage").iterdir()] == ["1-1.bad"]
