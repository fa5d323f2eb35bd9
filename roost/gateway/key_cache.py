"""The gateway's cache of active keys: every request's key is checked here, not in the database.

Reloaded every ``refresh_s`` by a background task (a revocation takes effect within it); a key not in
the cache is looked up in the database at once, a bounded number at a time (a flood of wrong keys
cannot flood the database); a database that is away leaves the last good set working.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from roost.gateway.db import GatewayDB
from roost.gateway.keys import Principal, digest, same_digest

log = logging.getLogger("roost.gateway")


class KeyCache:
    """The active keys, reloaded every ``refresh_s`` (a revocation takes effect within it); a key not
    in the cache is looked up in the database at once (a key added a moment ago works), at most
    ``LOOKUPS`` at a time so a flood of wrong keys cannot flood the database. Keys are indexed by the
    first 16 hex digits of their digest and compared in full with :func:`hmac.compare_digest`."""

    LOOKUPS = 4

    def __init__(self, db: GatewayDB, refresh_s: float) -> None:
        self.db, self.refresh_s = db, refresh_s
        self._index: dict[str, list[tuple[str, Principal]]] = {}
        self._seen: dict[str, Principal] = {}  # keys found in the index since it was loaded
        self.loaded_at = 0.0
        self._lookups = asyncio.Semaphore(self.LOOKUPS)
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        active = await self.db.active_keys()
        index: dict[str, list[tuple[str, Principal]]] = {}
        for d, p in active.items():
            index.setdefault(d[:16], []).append((d, p))
        self._index, self._seen, self.loaded_at = index, {}, time.monotonic()

    def _find(self, d: str) -> Principal | None:
        found = None
        for stored, p in self._index.get(d[:16], []):
            if same_digest(stored, d):
                found = p
        return found

    def check_now(self, token: str | None) -> Principal | None:
        """:meth:`check` for a key in the cache (no database lookup: None for any other). A key found is
        remembered until the next reload (a revocation takes effect then, as for :meth:`check`), so
        the next request with it costs a dictionary lookup, not a SHA-256."""
        if not token or len(token) > 512:
            return None
        found = self._seen.get(token)
        if found is None:
            found = self._find(digest(token))
            if found is not None and len(self._seen) < 65536:
                self._seen[token] = found
        return found

    async def check(self, token: str | None) -> Principal | None:
        if not token or len(token) > 512:
            return None
        d = digest(token)
        found = self._find(d)
        if found is None:
            async with self._lookups:
                try:
                    found = await self.db.find_key(d)
                except Exception as exc:  # the database is away: only cached keys work meanwhile
                    log.error("keys: lookup failed (%s)", type(exc).__name__)
                    return None
            if found is not None:
                self._index.setdefault(d[:16], []).append((d, found))
        return found

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except Exception as exc:  # keep the last good set; the database may be back next time
                log.error("keys: could not reload from %s (%s)", self.db.display_url, type(exc).__name__)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="key-cache")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def size(self) -> int:
        return sum(len(v) for v in self._index.values())
