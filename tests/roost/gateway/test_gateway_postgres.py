"""The metering gateway on a real PostgreSQL server (``support.postgres``: initdb + postgres on a free
loopback port, no mock): the database layer (keys, usage grouping, several gateways creating the
tables at once), and two ``roost gateway serve`` processes sharing ONE database in front of the
synthetic server (a FAKE OpenAI-compatible server, ``tests/roost/bench/synthetic_server.py``): every
request they served is in ``roost gateway usage`` with the tokens the server reported, and a key
added or revoked in the database reaches both gateways without a restart.

PostgreSQL must be installed (``apt-get install postgresql``); these tests fail without it unless
``ROOST_TESTS_NO_POSTGRES=1`` is set, which skips them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from roost.errors import UserError
from roost.gateway.db import USAGE_COLUMNS, GatewayDB, GroupBy
from roost.gateway.keys import digest
from roost.net import free_port

if os.environ.get("ROOST_TESTS_NO_POSTGRES") == "1":
    pytest.skip("ROOST_TESTS_NO_POSTGRES=1: the PostgreSQL tests are off", allow_module_level=True)

from support.cli import ROOST
from support.postgres import PostgresServer  # after the opt-out: it finds the binaries
from support.wait import poll

REPO = Path(__file__).resolve().parents[3]
SYNTHETIC = REPO / "tests" / "roost" / "bench" / "synthetic_server.py"
BACKEND_KEY = "synthetic-backend-key"
MODEL = "synthetic"
START_TIMEOUT_S = 60.0
T = TypeVar("T")
REVOCATION_DEADLINE_S = 60.0
"""Only bounds a failure: a revoked key is refused by every gateway at its next key reload (every second);
how soon is a benchmark figure, not a bound of this test."""


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as server:
        yield server


def _wait_for_line(log: Path, proc: subprocess.Popen[bytes], marker: str, timeout_s: float = START_TIMEOUT_S) -> str:
    """The first line of ``log`` holding ``marker``, once ``proc`` has written it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text.splitlines():
            if marker in line:
                return line
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited ({proc.returncode}) before {marker!r}:\n{text[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"{proc.args!r}: no {marker!r} within {timeout_s:g} s:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Synthetic:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"

    def stats(self) -> dict[str, dict[str, Any]]:
        requests: dict[str, dict[str, Any]] = httpx.get(f"{self.url}/_stats", timeout=10).json()["requests"]
        return requests


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthetic]:
    log = tmp_path_factory.mktemp("synthetic") / "synthetic.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(SYNTHETIC), "--port", "0", "--api-key", BACKEND_KEY,
                                 "--tokens-per-s", "400", "--ttft-s", "0.01"], stdout=out, stderr=subprocess.STDOUT)
    try:
        line = _wait_for_line(log, proc, "READY ")
        yield Synthetic(proc, int(line.split()[1]))
    finally:
        _stop(proc)


class Gateway:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"


def _launch_gateway(backend: str, db_url: str, log: Path) -> Gateway:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([ROOST, "gateway", "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--backend", backend, "--db", db_url, "--no-registry", "--quiet"],
                                env=dict(os.environ, VLLM_API_KEY=BACKEND_KEY), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return Gateway(proc, port, log)


def _await_gateway(gw: Gateway) -> bool:
    """True once ``gw`` is up and healthy; False when its port was taken before it bound it."""
    try:
        _wait_for_line(gw.log, gw.proc, "roost gateway: listening on")
    except AssertionError:
        _stop(gw.proc)
        if "already in use" in gw.log.read_text(errors="replace"):
            return False
        raise
    assert httpx.get(f"{gw.url}/health", timeout=10).status_code == 200
    return True


def _db_call(url: str, call: Callable[[GatewayDB], Awaitable[T]]) -> T:
    """``call(db)`` on the database at ``url`` (in this process: the CLI costs ~2 s a call here)."""

    async def go() -> T:
        db = await GatewayDB(url).connect()
        try:
            return await call(db)
        finally:
            await db.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def shared_db(pg: PostgresServer) -> str:
    """The gateways' database, its tables made (as ``roost gateway key add`` makes them before a first
    start: gateways starting together on an empty database race: test_gateways_create_the_tables_at_once)."""
    url = pg.create_database("gateways")
    _db_call(url, lambda db: db.key_names())
    return url


@pytest.fixture(scope="module")
def gateways(synthetic: Synthetic, shared_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Gateway]]:
    """Two gateway processes on one PostgreSQL database, both in front of the synthetic server."""
    logs = tmp_path_factory.mktemp("gateways")
    started: list[Gateway] = []
    try:
        for name in ("a", "b"):  # both start at once (each takes ~3 s to import here)
            started.append(_launch_gateway(synthetic.url, shared_db, logs / f"gateway-{name}.log"))
        for i, gw in enumerate(started):
            for _ in range(3):  # another process may take the free port before the gateway binds it
                if _await_gateway(gw):
                    break
                gw = started[i] = _launch_gateway(synthetic.url, shared_db, gw.log)
            else:
                raise AssertionError(f"no free port for the gateway after 3 tries:\n{gw.log.read_text()[-3000:]}")
        yield started
    finally:
        for gw in started:
            _stop(gw.proc)
        for gw in started:  # uvicorn re-raises the SIGTERM it shut down on: -15 is a clean stop
            assert gw.proc.returncode in (0, -signal.SIGTERM), (
                f"gateway exited {gw.proc.returncode}:\n{gw.log.read_text()[-3000:]}")


def roost(*args: str) -> Any:
    """``roost ARGS --json``'s parsed output (a failure shows its stderr)."""
    done = subprocess.run([ROOST, *args, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"roost {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


# --- the database layer ------------------------------------------------------------------------


def _row(i: int, *, ts: float, key: str, kind: str, model: str, user: str | None, prompt: int, completion: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "request_id": f"req-{i}", "ts": ts, "day": time.strftime("%Y-%m-%d", time.gmtime(ts)), "key_name": key,
        "kind": kind, "user": user, "model": model, "backend": "http://127.0.0.1:1/v1", "endpoint": "chat",
        "stream": i % 2 == 0, "status": "ok", "http_status": 200, "prompt_tokens": prompt,
        "completion_tokens": completion, "prompt_source": "usage", "completion_source": "usage", "ttft_s": 0.01 * i,
        "duration_s": 0.1 * i, "added_s": 0.001, "gateway": "test:1",
    }
    assert set(row) == set(USAGE_COLUMNS)
    return row


def _expected(rows: list[dict[str, Any]], cols: list[str]) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    acc: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        a = acc[tuple(r[c] for c in cols)]
        a[0] += 1
        a[1] += r["prompt_tokens"]
        a[2] += r["completion_tokens"]
    return {k: (v[0], v[1], v[2]) for k, v in acc.items()}


def _got(out: list[dict[str, Any]], cols: list[str]) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    got = {tuple(r[c] for c in cols): (r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in out}
    assert len(got) == len(out), f"a group appears twice: {out}"
    return got


def test_db_layer_on_postgres(pg: PostgresServer) -> None:
    url = pg.create_database("dblayer")
    assert url.startswith("postgresql://") and "@127.0.0.1:" in url

    async def go() -> None:
        db = await GatewayDB(url).connect()
        try:
            assert await db.list_keys() == [] and await db.usage() == []
            keys = {"alice": await db.add_key("alice", "user", note="first"),
                    "laptop": await db.add_key("laptop", "device"),
                    "webui": await db.add_key("webui", "app", trusted=True)}
            listed = await db.list_keys()
            assert [(k["name"], k["kind"], k["trusted"], k["revoked"], k["note"]) for k in listed] == [
                ("alice", "user", False, False, "first"), ("laptop", "device", False, False, ""),
                ("webui", "app", True, False, "")]
            text = json.dumps(listed)
            for key in keys.values():  # never the key nor its digest
                assert key not in text and digest(key) not in text
            assert all(set(k) == {"name", "kind", "trusted", "created_at", "revoked", "revoked_at", "note"} for k in listed)
            active = await db.active_keys()
            assert {d: p.name for d, p in active.items()} == {digest(k): n for n, k in keys.items()}
            assert active[digest(keys["webui"])].trusted and active[digest(keys["laptop"])].kind == "device"
            with pytest.raises(UserError, match="exists"):
                await db.add_key("alice", "user")

            assert await db.revoke_key("laptop") is True
            assert await db.revoke_key("laptop") is False
            with pytest.raises(UserError, match="no such key"):
                await db.revoke_key("nobody")
            by_name = {k["name"]: k for k in await db.list_keys()}
            assert by_name["laptop"]["revoked"] and by_name["laptop"]["revoked_at"] is not None
            assert not by_name["alice"]["revoked"]
            assert digest(keys["laptop"]) not in await db.active_keys()
            again = await db.add_key("laptop", "device")  # a revoked name given a new key
            active = await db.active_keys()
            assert digest(again) in active and digest(keys["laptop"]) not in active
            assert await db.key_names() == {"alice", "laptop", "webui"}

            day0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
            specs = [  # key, kind, model, user, day offset
                ("alice", "user", "qwen", None, 0), ("alice", "user", "llama", None, 0), ("alice", "user", "qwen", None, 1),
                ("laptop", "device", "qwen", None, 1), ("laptop", "device", "qwen", None, 2),
                ("webui", "app", "llama", "ann@example.com", 0), ("webui", "app", "llama", "bob@example.com", 2),
                ("webui", "app", "qwen", "ann@example.com", 2), ("webui", "app", "llama", None, 1),
            ]
            rows = [_row(i, ts=day0 + off * 86400 + 3600 + i, key=k, kind=kind, model=m, user=u,
                         prompt=10 * (i + 1) + 3, completion=7 * (i + 2))
                    for i, (k, kind, m, u, off) in enumerate(specs * 3)]
            await db.insert_usage(rows[:5])
            await db.insert_usage(rows[5:])

            stored = await db.usage_rows()
            assert [{c: r[c] for c in USAGE_COLUMNS} for r in stored] == rows
            groupings: list[tuple[GroupBy, list[str]]] = [
                ("key", ["key", "kind", "model"]), ("kind", ["kind"]), ("model", ["model"]), ("day", ["day"]),
                ("user", ["user", "model"])]
            for by, cols in groupings:
                out = await db.usage(by=by)
                source = [{**r, "key": r["key_name"]} for r in rows]
                assert _got(out, cols) == _expected(source, cols), by
                assert all(set(r) == {*cols, "requests", "prompt_tokens", "completion_tokens"} for r in out), by
                if by == "day":
                    assert [r["day"] for r in out] == ["2026-01-01", "2026-01-02", "2026-01-03"]
                else:  # largest token count first
                    totals = [r["prompt_tokens"] + r["completion_tokens"] for r in out]
                    assert totals == sorted(totals, reverse=True), by
            since = day0 + 86400
            later = [{**r, "key": r["key_name"]} for r in rows if r["ts"] >= since]
            assert _got(await db.usage(since=since, by="key"), ["key", "kind", "model"]) == _expected(
                later, ["key", "kind", "model"])
            assert [r["request_id"] for r in await db.usage_rows(since=since)] == [r["request_id"] for r in later]
        finally:
            await db.close()

    asyncio.run(go())


def test_gateways_create_the_tables_at_once(pg: PostgresServer) -> None:
    """Several gateways starting together on an empty database: each one opens it (they take turns
    creating the tables under an advisory lock). Without the lock six at once lost the race in about
    half of the tries on this machine; ten tries make a regression all but certain to show."""

    async def go(url: str) -> None:
        dbs = [GatewayDB(url) for _ in range(6)]
        try:
            await asyncio.gather(*(db.connect() for db in dbs))
            await dbs[0].add_key("k", "user")
            assert [k["name"] for k in await dbs[-1].list_keys()] == ["k"]
        finally:
            await asyncio.gather(*(db.close() for db in dbs))

    for i in range(10):
        asyncio.run(go(pg.create_database(f"race{i}")))


# --- two gateway processes on one database -----------------------------------------------------


def _prompt(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": " ".join(["word"] * (3 + 5 * i))}]


async def _chat(client: httpx.AsyncClient, url: str, key: str, i: int, stream: bool) -> tuple[int, int]:
    """One chat completion; the ``(prompt_tokens, completion_tokens)`` the answer reported."""
    body: dict[str, Any] = {"model": MODEL, "messages": _prompt(i), "max_tokens": 2 + i % 9}
    headers = {"Authorization": f"Bearer {key}"}
    if not stream:
        resp = await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)
        assert resp.status_code == 200, resp.text
        usage = resp.json()["usage"]
        assert resp.json()["choices"][0]["message"]["content"] == " tok" * body["max_tokens"]
        return usage["prompt_tokens"], usage["completion_tokens"]
    body.update(stream=True, stream_options={"include_usage": True})
    usages: list[dict[str, int]] = []
    text = ""
    done = False
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
                continue
            chunk = json.loads(payload)
            if chunk.get("usage"):
                assert chunk["choices"] == [], "usage on a content chunk the client did not ask it for"
                usages.append(chunk["usage"])
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
    assert done and len(usages) == 1, usages
    assert text == " tok" * body["max_tokens"]
    return usages[0]["prompt_tokens"], usages[0]["completion_tokens"]


def test_two_gateways_meter_every_request_into_one_database(
        gateways: list[Gateway], synthetic: Synthetic, shared_db: str) -> None:
    def add(name: str) -> str:
        return _db_call(shared_db, lambda db: db.add_key(name, "user"))

    keys = {name: add(name) for name in ("alice", "bob")}
    per_gateway = 24  # half streamed; each key through both gateways

    async def go() -> list[tuple[str, int, int]]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            jobs = []
            for g, gw in enumerate(gateways):
                for i in range(per_gateway):
                    name = ("alice", "bob")[(i + g) % 2]
                    jobs.append((name, _chat(client, gw.url, keys[name], i, stream=i % 4 < 2)))
            got = await asyncio.gather(*(job for _, job in jobs))
            return [(name, p, c) for (name, _), (p, c) in zip(jobs, got, strict=True)]

    t0 = time.monotonic()
    answers = asyncio.run(go())
    elapsed = time.monotonic() - t0
    assert len(answers) == 2 * per_gateway

    expected = {name: (sum(1 for n, _, _ in answers if n == name), sum(p for n, p, _ in answers if n == name),
                       sum(c for n, _, c in answers if n == name)) for name in keys}
    usage = {r["key"]: r for r in roost("gateway", "usage", "--db", shared_db) if r["key"] in keys}
    assert {name: (r["requests"], r["prompt_tokens"], r["completion_tokens"]) for name, r in usage.items()} == expected, (
        f"{elapsed:.1f} s of requests")
    assert all(r["kind"] == "user" and r["model"] == MODEL for r in usage.values())
    assert sum(r["requests"] for r in usage.values()) == 2 * per_gateway

    # Row by row against the server's own record (the gateway forwards its request id as X-Request-Id).
    stored = [r for r in _db_call(shared_db, lambda db: db.usage_rows()) if r["key_name"] in keys]
    truth = synthetic.stats()
    assert len(stored) == 2 * per_gateway
    assert len({r["gateway"] for r in stored}) == 2, "both gateways wrote rows"
    assert sum(r["stream"] for r in stored) == per_gateway
    for r in stored:
        assert r["status"] == "ok" and r["http_status"] == 200, r
        t = truth[r["request_id"]]
        assert r["prompt_tokens"] == t["prompt_tokens"], (r, t)
        if r["stream"]:  # the server records the tokens it wrote as stream chunks only
            assert r["completion_tokens"] == t["tokens"] == len(t["sent"]), (r, t)
        assert (r["prompt_source"], r["completion_source"]) == ("usage", "usage"), r


def _models_status(gw: Gateway, key: str) -> int:
    """What ``GET /v1/models`` with ``key`` answers on ``gw`` (it forwards nothing)."""
    return httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code


def _wait_status(gw: Gateway, key: str, status: int, timeout_s: float) -> None:
    """Poll ``GET /v1/models`` with ``key`` on ``gw`` until it answers ``status`` (fails after ``timeout_s``)."""
    last = poll(lambda: _models_status(gw, key), lambda got: got == status, timeout_s=timeout_s, every_s=0.05)
    assert last == status, f"{gw.url}: still {last} after {timeout_s:g} s (wanted {status})"


def test_a_key_reaches_every_gateway_without_restart(gateways: list[Gateway], shared_db: str) -> None:
    a, b = gateways
    for gw in gateways:  # the key does not exist yet: both refuse it (and have just looked it up)
        assert httpx.get(f"{gw.url}/v1/models", headers={"Authorization": "Bearer rk-nope"}, timeout=10).status_code == 401
    added = roost("gateway", "key", "add", "carol", "--kind", "device", "--db", shared_db)
    key = added["key"]
    assert added["name"] == "carol" and key.startswith("rk-")
    # a key not in a gateway's cache is looked up in the database at once: the first request works on both
    assert [_models_status(gw, key) for gw in (b, a)] == [200, 200]
    models = httpx.get(f"{b.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]

    async def one() -> tuple[int, int]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await _chat(client, a.url, key, 3, stream=True)

    p, c = asyncio.run(one())
    usage = {r["key"]: r for r in _db_call(shared_db, lambda db: db.usage(by="key"))}
    assert (usage["carol"]["requests"], usage["carol"]["prompt_tokens"], usage["carol"]["completion_tokens"]) == (1, p, c)
    assert usage["carol"]["kind"] == "device"

    assert _db_call(shared_db, lambda db: db.revoke_key("carol")) is True
    for gw in (a, b):  # at each gateway's next key reload, without a restart
        _wait_status(gw, key, 401, REVOCATION_DEADLINE_S)


def test_the_helper_gives_each_database_its_own_url(pg: PostgresServer) -> None:
    urls: list[str] = [pg.create_database(name) for name in ("one", "two")]
    assert urls == [pg.url("one"), pg.url("two")] and urls[0] != urls[1]
    assert pg.psql("SELECT 1", "two").strip() == "1"
    with pytest.raises(ValueError):
        pg.create_database("bad name; drop")

    def listed() -> set[str]:
        return set(pg.psql("SELECT datname FROM pg_database").split())

    assert {"one", "two", "roost"} <= listed()
    pg.drop_database("two")
    assert "two" not in listed()
