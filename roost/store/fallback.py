"""Nothing measured is lost when the shared store does not answer: a local copy, pushed later.

A flow writes through :class:`KeepLocalCopy`: every object goes to the shared store, and one the store
does not take because it cannot be reached (``StoreUnreachable``) is written instead, under the same
key, to a directory on the worker (:func:`pending_dir`: ``$ROOST_HOME/pending-results/<store>/``).
The run then fails with ``results_store_unreachable`` at its report stage, saying where the copy is,
and :func:`push_pending` (``roost results push``; the next run on the worker does it first) uploads
the copy: everything but the ``runs`` rows first and those last, so a run becomes visible only once
its record and points are there, each object write-once (one already there is left as it is), and
each local file removed only after the store took it.

Reads go to the shared store; an unreachable store fails them (the report stage logs it and renders
without history), except :meth:`KeepLocalCopy.exists`, which also looks at the local copy so that a run
committed there is not committed twice.
"""

from __future__ import annotations

import logging
from pathlib import Path

from roost.settings import roost_home
from roost.store.atomic import AlreadyStored
from roost.store.layout import slug
from roost.store.objects import LocalStore, ObjectInfo, ObjectStore, StoreUnreachable

log = logging.getLogger("roost.store")


def pending_dir(target: ObjectStore) -> Path:
    """Where objects for ``target`` wait when it cannot be reached."""
    return roost_home() / "pending-results" / slug(target.url)


class KeepLocalCopy(ObjectStore):
    """``target``, with every write it cannot take kept in :func:`pending_dir`."""

    def __init__(self, target: ObjectStore, pending: Path | None = None) -> None:
        self.target = target
        self.pending = LocalStore(pending if pending is not None else pending_dir(target))
        self.url = target.url
        self.deferred: list[str] = []
        self.cause = ""

    def put_new(self, key: str, data: bytes) -> None:
        try:
            self.target.put_new(key, data)
        except StoreUnreachable as exc:
            self.pending.put_new(key, data)
            self.deferred.append(key)
            self.cause = self.cause or str(exc)
            log.warning("results store %s unreachable: kept %s locally in %s", self.url, key, self.pending.url)

    def get(self, key: str) -> bytes:
        return self.target.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.target.get_range(key, start, end)

    def list_objects(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
        return self.target.list_objects(prefix, start_after)

    def list_dirs(self, prefix: str) -> list[str]:
        return self.target.list_dirs(prefix)

    def exists(self, key: str) -> bool:
        if self.pending.exists(key):
            return True
        try:
            return self.target.exists(key)
        except StoreUnreachable:
            return False

    def local_path(self, key: str) -> Path | None:
        return self.target.local_path(key)

    def display(self, key: str) -> str:
        return self.target.display(key)

    @property
    def message(self) -> str:
        """The sentence a failed run carries when something was kept locally ('' when nothing was)."""
        if not self.deferred:
            return ""
        return (f"results store {self.url} unreachable ({self.cause}); the run's results ({len(self.deferred)} "
                f"object(s)) are kept in {self.pending.url}: `roost results push` uploads them")


def push_pending(target: ObjectStore, pending: Path | None = None) -> tuple[int, int]:
    """Upload what waits for ``target``: (objects uploaded, objects already there). Raises
    ``StoreUnreachable`` (having uploaded what it could) when the store still does not answer."""
    local = LocalStore(pending if pending is not None else pending_dir(target))
    objects = local.list_objects("")
    commits = [o for o in objects if o.key.startswith("runs/")]
    uploaded = present = 0
    for o in [*(o for o in objects if not o.key.startswith("runs/")), *commits]:
        try:
            target.put_new(o.key, local.get(o.key))
            uploaded += 1
        except AlreadyStored:
            present += 1
        local.local_path(o.key).unlink(missing_ok=True)
    _prune_empty(local.root)
    if uploaded:
        log.info("results store %s: uploaded %d object(s) kept locally while it was unreachable", target.url, uploaded)
    return uploaded, present


def _prune_empty(root: Path) -> None:
    if not root.is_dir():
        return
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    if not any(root.iterdir()):
        root.rmdir()
