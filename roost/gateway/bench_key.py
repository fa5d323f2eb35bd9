"""The key a landing's benchmark and evaluations use through the gateway: kind ``app``, named for
roost's benchmark on one host (``roost-benchmark-<host>``), metered like any client's.

A fresh key is issued for each run in the gateway's own database (the worker and the gateway share
it: ``ROOST_GATEWAY_DB``, else SQLite under roost's home) and revoked when the run ends, so it is
never stored anywhere, not even in a Secret block; a key left by a crashed run is revoked by the
next run on the host. Its usage rows stay, under the same name, run after run.
"""

from __future__ import annotations

import asyncio
import re
import time

from pydantic import SecretStr

from roost.gateway.config import GatewayConfig
from roost.gateway.db import GatewayDB
from roost.records import Usage
from roost.vllm.client import run_sync

PREFIX = "roost-benchmark"
COMMIT_WAIT_S = GatewayConfig().commit_timeout_s + 2.0
"""How long the metered count may lag the benchmark's last answer: the gateway's commit wait, and a margin."""
NOTE = "roost's benchmark and evaluations through the gateway: issued per landing, revoked at its end"


def key_name(host: str) -> str:
    """``roost-benchmark-<host>``, the host reduced to what a key name may hold."""
    safe = re.sub(r"[^A-Za-z0-9._@+-]", "-", host).strip("-")[:100]
    return f"{PREFIX}-{safe}" if safe else PREFIX


async def _issue(db_url: str, name: str) -> str:
    db = await GatewayDB(db_url).connect()
    try:
        if any(k["name"] == name and not k["revoked"] for k in await db.list_keys()):
            await db.revoke_key(name)  # a run that crashed before revoking its key
        return await db.add_key(name, "app", note=NOTE)
    finally:
        await db.close()


def issue(db_url: str, name: str) -> SecretStr:
    """A fresh key named ``name`` in the gateway's database (any earlier key of that name revoked)."""
    return SecretStr(run_sync(lambda: _issue(db_url, name)))


async def _revoke(db_url: str, name: str) -> bool:
    db = await GatewayDB(db_url).connect()
    try:
        return await db.revoke_key(name)
    finally:
        await db.close()


def revoke(db_url: str, name: str) -> bool:
    """Revoke the run's key (the gateway stops taking it within its key refresh); False if it was revoked."""
    return run_sync(lambda: _revoke(db_url, name))


async def _metered(db_url: str, name: str, since: float, requests: int, wait_s: float) -> Usage:
    db = await GatewayDB(db_url).connect()
    deadline = time.monotonic() + wait_s
    try:
        while True:
            rows = [r for r in await db.usage(since=since, by="key") if r.get("key") == name]
            got = Usage(requests=sum(r["requests"] for r in rows),
                        prompt_tokens=sum(r["prompt_tokens"] for r in rows),
                        completion_tokens=sum(r["completion_tokens"] for r in rows))
            if got.requests >= requests or time.monotonic() >= deadline:
                return got
            await asyncio.sleep(0.2)
    finally:
        await db.close()


def metered(db_url: str, name: str, since: float, requests: int = 0, wait_s: float = COMMIT_WAIT_S) -> Usage:
    """What the gateway's usage database holds for key ``name`` from ``since`` (Unix seconds) on, once it
    holds ``requests`` rows or ``wait_s`` has passed. A stream's row is committed before the gateway ends
    the response, but a client has its answer at ``data: [DONE]``, just before: the last rows may still be
    on their way (the gateway waits at most its ``commit_timeout_s`` for them)."""
    return run_sync(lambda: _metered(db_url, name, since, requests, wait_s))


