"""Integrity of a downloaded checkpoint: sizes and digests against the Hub's listing, hashed in parallel.

One definition each:

- **expected digest** of a file: the ``lfs.sha256`` the Hub lists for an LFS file, else its git blob id
  (``sha1(b"blob <size>\\0" + content)``, the ``oid`` the Hub lists for a regular file);
- **verified**: the file on disk has the listed size and the expected digest;
- **fingerprint**: ``(size, mtime_ns, inode)`` of a verified file, kept in the manifest
  (``<local_dir>/.roost/download.json``) so an unchanged file is never hashed twice.

Hashing streams each file through ``hashlib`` in large reads (``hashlib`` releases the GIL for buffers
over 2 KiB), one file per thread, biggest first, so several shards hash on several cores at once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from roost.errors import CheckFailed

log = logging.getLogger(__name__)

READ_CHUNK = 4 * 1024 * 1024
"""Bytes per read while hashing (4 MiB: large enough to amortise syscalls, small enough for the cache)."""

MANIFEST_VERSION = 1

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


# ------------------------------------------------------------------------------------ fingerprints


class Fingerprint(BaseModel):
    """What must not change for a verified file to stay verified without hashing it again."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> Fingerprint:
        st = path.stat()
        return cls(size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino)

    @classmethod
    def maybe(cls, path: Path) -> Fingerprint | None:
        try:
            return cls.of(path)
        except FileNotFoundError:
            return None


class VerifiedEntry(BaseModel):
    """One file as roost last verified it."""

    expected: str = Field(description="HubFile.expected_digest at verification time.")
    sha256: str
    git_oid: str | None = None
    fingerprint: Fingerprint
    verified_at: dt.datetime


class Manifest(BaseModel):
    """``<local_dir>/.roost/download.json``: which commit the directory holds and what was verified."""

    version: int = MANIFEST_VERSION
    repo_id: str
    commit: str
    listing: list[HubFile] = Field(default_factory=list, description="Every file the Hub lists at `commit`.")
    verified: dict[str, VerifiedEntry] = Field(default_factory=dict)

    def unchanged(self, local_dir: Path, files: Iterable[HubFile]) -> bool:
        """Each of ``files`` is verified for its expected digest and its fingerprint is unchanged."""
        for f in files:
            entry = self.verified.get(f.path)
            if entry is None or entry.expected != f.expected_digest:
                return False
            if Fingerprint.maybe(local_dir / f.path) != entry.fingerprint:
                return False
        return True


def selection_key(allow_patterns: Iterable[str] | None, ignore_patterns: Iterable[str] | None) -> str:
    """A short stable digest of the pattern selection (order-insensitive)."""
    payload = json.dumps([sorted(allow_patterns or []), sorted(ignore_patterns or [])])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def state_dir(local_dir: Path) -> Path:
    """roost's own bookkeeping inside a download directory (manifest, partial transfers)."""
    return local_dir / ".roost"


def manifest_path(local_dir: Path) -> Path:
    return state_dir(local_dir) / "download.json"


def load_manifest(local_dir: Path) -> Manifest | None:
    """The manifest, or None when absent or unreadable (an unreadable one only costs a re-hash)."""
    path = manifest_path(local_dir)
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (ValidationError, ValueError, OSError) as exc:
        log.warning(
            "ignoring unreadable download manifest %s (%s); files will be re-hashed", path, type(exc).__name__
        )
        return None


def write_manifest(local_dir: Path, manifest: Manifest) -> None:
    """Write the manifest atomically (temp file in the same directory, fsync, rename)."""
    path = manifest_path(local_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".download.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(manifest.model_dump_json(indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
