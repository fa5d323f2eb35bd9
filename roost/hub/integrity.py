"""Integrity of a downloaded checkpoint: sizes and digests against the Hub's listing, hashed in parallel.

One definition each:

- **expected digest** of a file: the ``lfs.sha256`` the Hub lists for an LFS file, else its git blob id
  (``sha1(b"blob <size>\\0" + content)``, the ``oid`` the Hub lists for a regular file);
- **verified**: the file on disk has the listed size and the expected digest (:func:`check_digest`;
  a file that is not is a :class:`Mismatch`). A file roost had verified that no longer is (corrupt in
  the cache) is set aside and fetched again (``roost.hub.snapshot``); a file as fetched that is not
  fails the run with :class:`IntegrityError`.

What a verified file's fingerprint is, and the manifest that keeps it, are in
``roost.hub._local_folder``.

Hashing streams each file through ``hashlib`` in large reads (``hashlib`` releases the GIL for buffers
over 2 KiB), one file per thread, biggest first, so several shards hash on several cores at once.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from roost.errors import CheckFailed

READ_CHUNK = 4 * 1024 * 1024
"""Bytes per read while hashing (4 MiB: large enough to amortise syscalls, small enough for the cache)."""

ByteSink = Callable[[int], None]


def default_hash_workers() -> int:
    """Threads that hash at once: one per core, at most 8 (past that the disk is the limit)."""
    return max(1, min(8, os.cpu_count() or 1))


# --------------------------------------------------------------------------------------------- hashing


@dataclass(frozen=True)
class FileDigest:
    """What hashing one file found: its size, sha256 and (when asked) its git blob id."""

    size: int
    sha256: str
    git_sha1: str | None = None


def git_blob_header(size: int) -> bytes:
    return b"blob %d\x00" % size


def hash_file(
    path: Path,
    *,
    git_blob: bool = False,
    chunk_size: int = READ_CHUNK,
    on_bytes: ByteSink | None = None,
) -> FileDigest:
    """Stream ``path`` once through sha256 (and the git blob sha1 when ``git_blob``)."""
    sha256 = hashlib.sha256()
    sha1 = None
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as f:
        if git_blob:
            sha1 = hashlib.sha1()
            sha1.update(git_blob_header(os.fstat(f.fileno()).st_size))
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            chunk = view[:n]
            sha256.update(chunk)
            if sha1 is not None:
                sha1.update(chunk)
            size += n
            if on_bytes is not None:
                on_bytes(n)
    return FileDigest(size=size, sha256=sha256.hexdigest(), git_sha1=sha1.hexdigest() if sha1 else None)


def hash_files(
    paths: Sequence[Path],
    *,
    git_blob: Callable[[Path], bool] = lambda _p: False,
    workers: int | None = None,
    chunk_size: int = READ_CHUNK,
    on_bytes: ByteSink | None = None,
) -> dict[Path, FileDigest]:
    """Hash many files in parallel, biggest first; ``on_bytes`` is called from the worker threads."""
    order = sorted(paths, key=lambda p: p.stat().st_size, reverse=True)
    workers = workers or default_hash_workers()
    if workers == 1 or len(order) <= 1:
        return {
            p: hash_file(p, git_blob=git_blob(p), chunk_size=chunk_size, on_bytes=on_bytes) for p in order
        }
    with ThreadPoolExecutor(max_workers=min(workers, len(order)), thread_name_prefix="roost-hash") as pool:
        futures = {
            p: pool.submit(hash_file, p, git_blob=git_blob(p), chunk_size=chunk_size, on_bytes=on_bytes)
            for p in order
        }
        return {p: fut.result() for p, fut in futures.items()}


class ByteCounter:
    """A thread-safe running total (bytes hashed or downloaded) that many workers add to."""

    def __init__(self, start: int = 0) -> None:
        self._lock = threading.Lock()
        self._value = start

    def add(self, n: int) -> None:
        with self._lock:
            self._value += n

    @property
    def value(self) -> int:
        with self._lock:
            return self._value


# ------------------------------------------------------------------------------------ expectations


class HubFile(BaseModel):
    """One file the Hub lists at a commit, with what it must hash to."""

    path: str
    size: int
    blob_id: str = Field(description="Git object id of the blob (of the pointer file, for an LFS file).")
    lfs_sha256: str | None = Field(default=None, description="sha256 of the content, for an LFS file.")
    xet_hash: str | None = None

    @property
    def lfs(self) -> bool:
        return self.lfs_sha256 is not None

    @property
    def expected_digest(self) -> str:
        """``sha256:<hex>`` for an LFS file, ``git-sha1:<hex>`` (the git blob id) otherwise."""
        return f"sha256:{self.lfs_sha256}" if self.lfs_sha256 else f"git-sha1:{self.blob_id}"


class Mismatch(BaseModel):
    """A file whose bytes on disk are not the bytes the Hub lists."""

    path: str
    field: Literal["size", "sha256", "git blob id", "missing"]
    expected: str
    found: str
    note: str = ""

    def sentence(self) -> str:
        what = {"size": "size", "sha256": "sha256", "git blob id": "git blob id", "missing": "file"}[
            self.field
        ]
        text = f"{self.path}: {what} expected {self.expected}, found {self.found}"
        return f"{text} ({self.note})" if self.note else text


class IntegrityError(CheckFailed):
    """One or more files failed verification; the message names each file, expected and found digest."""

    def __init__(self, mismatches: Sequence[Mismatch], remedy: str) -> None:
        self.mismatches = list(mismatches)
        self.remedy = remedy
        head = "integrity check failed for " + (
            "1 file" if len(self.mismatches) == 1 else f"{len(self.mismatches)} files"
        )
        super().__init__(f"{head}: " + "; ".join(m.sentence() for m in self.mismatches) + f"; {remedy}")


def check_digest(hub: HubFile, digest: FileDigest, note: str = "") -> Mismatch | None:
    """The mismatch between what the Hub lists and what hashing found, or None when they agree."""
    if digest.size != hub.size:
        return Mismatch(
            path=hub.path, field="size", expected=f"{hub.size} bytes", found=f"{digest.size} bytes", note=note
        )
    if hub.lfs_sha256 is not None:
        if digest.sha256 != hub.lfs_sha256:
            return Mismatch(
                path=hub.path, field="sha256", expected=hub.lfs_sha256, found=digest.sha256, note=note
            )
        return None
    if digest.git_sha1 != hub.blob_id:
        return Mismatch(
            path=hub.path, field="git blob id", expected=hub.blob_id, found=str(digest.git_sha1), note=note
        )
    return None
