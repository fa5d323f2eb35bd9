"""Nothing measured is lost when the shared store does not take a write: a local copy, pushed later.

A flow writes through :class:`KeepLocalCopy`: every object goes to the shared store, and from the first
one the store does not take (unreachable, credentials refused, a bucket gone, a shared directory
unmounted or full: anything but "already stored"), that object and every later one of the run are
written instead, under the same keys, to a directory on the worker (:func:`pending_dir`:
``$ROOST_HOME/pending-results/<store>/``), so a run is never half in the store with its record
elsewhere. The run then fails at its report stage with the failure's class
(``results_store_unreachable``, ``results_store_full``, ``results_store_error``), saying where the copy is, and
:func:`push_pending` (``roost results push``; the next run on the worker does it first) uploads the
copy: everything but the ``runs`` rows first and those last, so a run becomes visible only once its
record and points are there, each object write-once (one already there is left as it is), each local
file removed only after the store took it. A pushed run that started long ago is also written under
``runs/_late/`` (``roost.store.catalog.commit_late``), where every reader looks.

A runs catalog (``runs/_catalog/``) is only an index: it goes to the store directly, never to the copy.

When the local copy does not take an object either (one disk holds both, and it is full), the run is
not stored: that object and every later one are refused (a commit never lands without its record), and
the run fails saying so (:attr:`KeepLocalCopy.failed`, :attr:`KeepLocalCopy.message`).

Reads go to the shared store; an unreachable store fails them (the report stage logs it and renders
without history), except :meth:`KeepLocalCopy.exists`, which also looks at the local copy so that a run
committed there is not committed twice. Writers of the copy and a push hold one lock per store
(``roost.fslock``): two workers of one machine never push one object twice or prune a directory being
written.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from roost.fslock import exclusive
from roost.settings import roost_home
from roost.store.atomic import AlreadyStored
from roost.store.layout import CATALOG_PREFIX, slug
from roost.store.objects import (
    LocalStore,
    MissingObject,
    ObjectInfo,
    ObjectStore,
    StoreError,
    StoreFull,
    StoreUnreachable,
)

log = logging.getLogger("roost.store")


def pending_dir(target: ObjectStore) -> Path:
    """Where objects for ``target`` wait when it cannot be reached."""
    return roost_home() / "pending-results" / slug(target.url)


def _lock_path(pending: Path) -> Path:
    """Held while the copy in ``pending`` is written or pushed (beside it: a push prunes ``pending``)."""
    return pending.with_name(f".{pending.name}.lock")


def pending_objects(target: ObjectStore, pending: Path | None = None) -> list[ObjectInfo]:
    """What waits on this worker for ``target``."""
    return LocalStore(pending if pending is not None else pending_dir(target)).list_objects("")


class KeepLocalCopy(ObjectStore):
    """``target``, with every write it cannot take kept in :func:`pending_dir`."""

    def __init__(self, target: ObjectStore, pending: Path | None = None) -> None:
        self.target = target
        self.pending = LocalStore(pending if pending is not None else pending_dir(target))
        self.url = target.url
        self.deferred: list[str] = []
        self.cause = ""
        self.failure: StoreError | None = None
        self.lost: list[str] = []
        """Keys neither the store nor the local copy took (a full disk holding both): the run is not stored."""
        self.lost_cause = ""

    def put_new(self, key: str, data: bytes) -> None:
        if key.startswith(CATALOG_PREFIX):  # an index readers can do without: never kept, never pushed
            self.target.put_new(key, data)
            return
        if self.lost:  # an object of the run is nowhere: nothing after it (its commit) may land anywhere
            self.lost.append(key)
            raise self.kept_failure()
        if not self.deferred:
            try:
                self.target.put_new(key, data)
                return
            except AlreadyStored:
                raise
            except (StoreError, OSError) as exc:
                self.failure = exc if isinstance(exc, StoreError) else StoreError(f"{type(exc).__name__}: {exc}")
                self.cause = " ".join(str(self.failure).split())[:300]
        try:
            with exclusive(_lock_path(self.pending.root)):
                self.pending.put_new(key, data)
        except AlreadyStored:
            raise
        except (StoreError, OSError) as exc:
            self.lost.append(key)
            self.lost_cause = " ".join(str(exc).split())[:300]
            log.error("%s", self.message)
            raise self.kept_failure() from None
        self.deferred.append(key)
        log.warning("results store %s did not take %s (%s): kept locally in %s", self.url, key, self.cause,
                    self.pending.url)

    @property
    def failed(self) -> bool:
        """Whether a write of the run did not reach the store (kept locally, or lost): the run fails."""
        return bool(self.deferred or self.lost)

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
        """The sentence a failed run carries when something was kept locally or lost ('' when neither)."""
        if not self.failed:
            return ""
        what = ("unreachable" if isinstance(self.failure, StoreUnreachable)
                else "is full" if isinstance(self.failure, StoreFull) else "refused a write")
        if self.lost:
            kept = f"{len(self.deferred)} object(s) kept in {self.pending.url}, " if self.deferred else ""
            return (f"results store {self.url} {what} ({self.cause}) and the local copy in {self.pending.url} "
                    f"did not take {self.lost[0]} either ({self.lost_cause}): the run is NOT stored ({kept}"
                    f"{len(self.lost)} object(s) written nowhere); free space and run it again")
        return (f"results store {self.url} {what} ({self.cause}); the run's results ({len(self.deferred)} "
                f"object(s)) are kept in {self.pending.url}: `roost results push` uploads them")

    def kept_failure(self) -> StoreError:
        """What the run fails with when something was kept locally or lost: the first failure's class (a
        store unreachable or full; else a refusal), this message."""
        cls = type(self.failure) if isinstance(self.failure, (StoreUnreachable, StoreFull)) else StoreError
        return cls(self.message)


def push_pending(target: ObjectStore, pending: Path | None = None) -> tuple[int, int]:
    """Upload what waits for ``target``: (objects uploaded, objects already there). Raises the store's
    error (``StoreUnreachable``, ``StoreError``; having uploaded what it could) when it still does not take
    them."""
    from roost.store.catalog import commit_late

    root = pending if pending is not None else pending_dir(target)
    with exclusive(_lock_path(root)):
        local = LocalStore(root)
        objects = local.list_objects("")
        commits = [o for o in objects if o.key.startswith("runs/")]
        uploaded = present = 0
        try:
            for o in [*(o for o in objects if not o.key.startswith("runs/")), *commits]:
                try:
                    data = local.get(o.key)
                except MissingObject:  # removed by hand meanwhile
                    continue
                try:
                    target.put_new(o.key, data)
                    uploaded += 1
                except AlreadyStored:
                    present += 1
                if o.key.startswith("runs/"):
                    commit_late(target, o.key, data)
                local.local_path(o.key).unlink(missing_ok=True)
        finally:
            _prune_empty(local.root)
    if uploaded:
        log.info("results store %s: uploaded %d object(s) kept locally while it did not take them", target.url,
                 uploaded)
    return uploaded, present


def _prune_empty(root: Path) -> None:
    """Remove the empty directories under ``root`` (and ``root`` when empty); a directory written meanwhile stays."""
    if not root.is_dir():
        return
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()  # fails, harmlessly, unless empty
    with contextlib.suppress(OSError):
        root.rmdir()
