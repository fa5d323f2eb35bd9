"""Where the results store's objects live: a directory (local, or a filesystem a team shares) or an
S3-compatible object store (``roost.store.s3``). Both keep the same promise:

- **write once**: :meth:`ObjectStore.put_new` creates an object under a key nobody used before, whole
  or not at all, and raises ``AlreadyStored`` when the key exists (a directory links a complete,
  fsynced temporary file to the name, which fails rather than overwrite; S3 sends the PUT with
  ``If-None-Match: *``). Nothing is ever renamed over, rewritten or read-modified-written;
- **readers never see a partial object**: a directory's temporaries are hidden (``.<name>...tmp``)
  and skipped by :meth:`list`; an S3 object exists only once its PUT completed;
- **listing in key order** from a point (``start_after``), so a reader asks only for the keys that
  came after what it already has (``roost.store.catalog``).

Keys are POSIX-style relative paths (``runs/model=x/host=y/<run_id>.parquet``). Failures are typed:
``MissingObject`` (no such key), ``StoreUnreachable`` (the store did not answer: the run keeps a local
copy, ``roost.store.fallback``), ``StoreFull`` (a directory store's filesystem has no space left: the
same), ``StoreError`` (answered with a refusal: credentials, permissions).
Messages name the store by its URL, never by credentials.
"""

from __future__ import annotations

import abc
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from roost.errors import RoostError
from roost.failures import FailureClass
from roost.store.atomic import AlreadyStored, atomic_write_bytes

__all__ = ["AlreadyStored", "LocalStore", "MissingObject", "ObjectInfo", "ObjectStore", "StoreError",
           "StoreFull", "StoreUnreachable"]


class StoreError(RoostError):
    """The results store refused or failed an operation (credentials, permissions, a bad answer). For a
    command, a store it cannot use as given: exit 2."""

    exit_code = 2
    failure_class = FailureClass.RESULTS_STORE_ERROR


class StoreUnreachable(StoreError):
    """The results store did not answer (network, DNS, a timeout, a server down)."""

    exit_code = 1
    failure_class = FailureClass.RESULTS_STORE_UNREACHABLE
    remediation = ("the results are kept in a local copy; once the store answers, `roost results push` "
                   "uploads them (the next run on this worker does it too)")


class StoreFull(StoreError):
    """The filesystem holding a directory store has no space (or quota) left for a write."""

    exit_code = 1
    failure_class = FailureClass.RESULTS_STORE_FULL
    remediation = ("free space on the filesystem holding the results store; then `roost results push` uploads "
                   "what was kept on the worker (the next run on this worker does it too)")


class MissingObject(StoreError, FileNotFoundError):
    """No object under that key."""

    exit_code = 1


_UNREACHABLE_ERRNOS = {errno.ESTALE, errno.EIO, errno.ENOTCONN, errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ETIMEDOUT}
"""What a shared directory (NFS and the like) answers when its server is away."""

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
"""A full filesystem, or the user's quota on it used up."""


class ObjectInfo(NamedTuple):
    key: str
    size: int


class ObjectStore(abc.ABC):
    """The operations the results store needs, nothing more (see the module docstring)."""

    url: str
    """Where the store is, for messages and records: a path or ``s3://bucket/prefix`` (never credentials)."""

    @abc.abstractmethod
    def put_new(self, key: str, data: bytes) -> None:
        """Create ``key`` holding ``data``; ``AlreadyStored`` when the key exists (an object store may count one
        holding exactly ``data`` as this write: its own retry of a PUT whose first attempt landed)."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; ``MissingObject`` when there is none."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object."""

    @abc.abstractmethod
    def list_objects(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (recursively), in key order, after ``start_after``."""

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> list[str]:
        """The names of the "directories" right below ``prefix`` (which ends with ``/``), sorted."""

    def exists(self, key: str) -> bool:
        try:
            self.get_range(key, 0, 1)
        except MissingObject:
            return False
        return True

    def local_path(self, key: str) -> Path | None:
        """The file holding ``key`` when the store is a directory (pandas, reports); else None."""
        return None

    def display(self, key: str) -> str:
        """Where ``key`` is, as a person would write it (a path, or ``s3://bucket/prefix/key``)."""
        return f"{self.url.rstrip('/')}/{key}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class LocalStore(ObjectStore):
    """A directory: on this machine, or a filesystem several workers mount (NFS and the like)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser()
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"results store key {key!r} leaves the store")
        return self.root / key

    def put_new(self, key: str, data: bytes) -> None:
        try:
            atomic_write_bytes(self._path(key), data)
        except AlreadyStored:
            raise
        except OSError as exc:  # a full disk, a read-only or unmounted share: one sentence, the class of it
            # nothing of it is visible: the temporary is removed (atomic_write_bytes), the name never made
            if exc.errno in _FULL_ERRNOS:
                raise StoreFull(f"results store {self.url}: could not write {key}: no space left on the "
                                f"filesystem holding it ({exc.strerror})") from None
            cls = StoreUnreachable if exc.errno in _UNREACHABLE_ERRNOS else StoreError
            raise cls(f"results store {self.url}: could not write {key}: {exc.strerror or exc}") from None

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise MissingObject(f"{self._path(key)}: no such file in the results store") from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with self._path(key).open("rb") as f:
                f.seek(start)
                return f.read(max(0, end - start))
        except (FileNotFoundError, NotADirectoryError):
            raise MissingObject(f"{self._path(key)}: no such file in the results store") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def local_path(self, key: str) -> Path:
        return self._path(key)

    def display(self, key: str) -> str:
        return str(self._path(key))

    def list_objects(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
        folder, _, name_prefix = prefix.rpartition("/")
        base = self._path(folder) if folder else self.root

        def walk(directory: Path, rel: str, top: bool) -> Iterator[ObjectInfo]:
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                return
            for entry in entries:
                if entry.name.startswith("."):  # a temporary being written, or hidden
                    continue
                if top and not entry.name.startswith(name_prefix):
                    continue
                key = f"{rel}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    yield from walk(Path(entry.path), key + "/", False)
                elif entry.is_file(follow_symlinks=False):
                    yield ObjectInfo(key, entry.stat().st_size)

        out = [o for o in walk(base, f"{folder}/" if folder else "", True)
               if start_after is None or o.key > start_after]
        out.sort(key=lambda o: o.key)
        return out

    def list_dirs(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        try:
            return sorted(e.name for e in os.scandir(base)
                          if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []
