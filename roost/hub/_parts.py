"""A file's digest computed as its bytes arrive, and a large file fetched in ranged parts.

- :class:`StreamDigest`: the sha256 (and, for a regular file, the git blob sha1) of a file fed in
  order as its bytes arrive, so the file is verified when its last byte lands. Only a resumed
  transfer's prefix, already on disk, is read back (:meth:`StreamDigest.catch_up`).
- :class:`RangedFile`: a large file split into parts (:func:`part_bytes`), fetched over several
  connections with HTTP ``Range`` and written where they belong (``os.pwrite`` into the partial
  file). Each part's bytes stay in memory until the digest has taken them, in order (the caller
  bounds how many parts are out at once); a completed part is recorded in a sidecar next to the
  partial file (``<digest>.part.chunks``, written atomically), so an interrupted run resumes from the
  contiguous prefix of completed parts (:func:`resumable_prefix`) and fetches the rest again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from roost.hub.integrity import READ_CHUNK, FileDigest, git_blob_header
from roost.units import MiB

PART_MIN = 8 * MiB
"""Smallest part of a ranged transfer: large enough that a request's latency is noise."""
PART_MAX = 16 * MiB
"""Largest part: 16 connections each with a part in memory fit ``_lanes.BUFFER_BYTES``."""
RANGED_MIN = 2 * PART_MIN
"""Files smaller than this are fetched with one request each."""


def part_bytes(size: int, connections: int) -> int:
    """The part size for a file of ``size`` bytes: about two parts per connection, rounded up to a MiB,
    within [:data:`PART_MIN`, :data:`PART_MAX`]."""
    want = -(-size // max(1, 2 * connections))
    want = -(-want // MiB) * MiB
    return max(PART_MIN, min(PART_MAX, want))


def sidecar_path(part: Path) -> Path:
    """Where the completed parts of a ranged transfer into ``part`` are recorded."""
    return part.with_name(part.name + ".chunks")


def _covered_prefix(ranges: list[tuple[int, int]]) -> int:
    prefix = 0
    for start, end in sorted(ranges):
        if start > prefix:
            break
        prefix = max(prefix, end)
    return prefix


def resumable_prefix(part: Path, size: int) -> int:
    """Bytes at the head of ``part`` known to be complete: the contiguous prefix of completed parts its
    sidecar records when it has one (an unreadable sidecar trusts nothing), else the file's length."""
    try:
        length = part.stat().st_size
    except FileNotFoundError:
        return 0
    try:
        raw = json.loads(sidecar_path(part).read_bytes())
    except FileNotFoundError:
        return min(length, size)
    except (OSError, ValueError):
        return 0
    try:
        if int(raw["size"]) != size:
            return 0
        ranges = [(int(s), int(e)) for s, e in raw["done"]]
    except (KeyError, TypeError, ValueError):
        return 0
    return min(_covered_prefix(ranges), length, size)


def write_sidecar(part: Path, size: int, done: list[tuple[int, int]]) -> None:
    """Record ``done`` (completed byte ranges, end exclusive) atomically: temp file, then rename."""
    path = sidecar_path(part)
    fd, tmp = tempfile.mkstemp(prefix=".chunks.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"size": size, "done": [list(r) for r in sorted(done)]}, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def drop_sidecar(part: Path) -> None:
    sidecar_path(part).unlink(missing_ok=True)


class StreamDigest:
    """The digests of one file, fed its bytes in order (sha256; the git blob sha1 when ``git_blob``).

    ``on_bytes`` is told of each byte hashed (the verify meter); a reset takes them back."""

    def __init__(self, size: int, git_blob: bool, on_bytes: Callable[[int], None]) -> None:
        self.size = size
        self.git_blob = git_blob
        self.on_bytes = on_bytes
        self.fed = 0
        self.read_back = 0
        """Bytes read from disk to catch up (a resumed transfer's prefix)."""
        self._sha256 = hashlib.sha256()
        self._sha1: hashlib._Hash | None = None
        self.reset()

    def reset(self) -> None:
        if self.fed:
            self.on_bytes(-self.fed)
        self._sha256 = hashlib.sha256()
        self._sha1 = hashlib.sha1(git_blob_header(self.size)) if self.git_blob else None
        self.fed = 0

    def update(self, data: bytes | memoryview) -> None:
        self._sha256.update(data)
        if self._sha1 is not None:
            self._sha1.update(data)
        self.fed += len(data)
        self.on_bytes(len(data))

    def catch_up(self, part: Path, have: int) -> None:
        """Hash bytes ``[fed, have)`` of ``part`` from disk: what a resumed transfer finds there. A digest
        ahead of ``have`` (the partial file was cut back) starts over."""
        if self.fed > have:
            self.reset()
        if self.fed == have:
            return
        buf = bytearray(READ_CHUNK)
        view = memoryview(buf)
        with open(part, "rb", buffering=0) as f:
            f.seek(self.fed)
            while self.fed < have:
                n = f.readinto(view[: min(READ_CHUNK, have - self.fed)])
                if not n:
                    raise OSError(f"{part} holds fewer than {have:,} bytes")
                self.read_back += n
                self.update(view[:n])

    def result(self) -> FileDigest:
        return FileDigest(
            size=self.fed,
            sha256=self._sha256.hexdigest(),
            git_sha1=self._sha1.hexdigest() if self._sha1 is not None else None,
        )


@dataclass(eq=False)
class Part:
    """Bytes ``[start, end)`` of a file: what has arrived of them, kept until hashed."""

    start: int
    end: int
    pieces: list[bytes | None] = field(default_factory=list)
    got: int = 0
    hashed: int = 0
    """Pieces the digest has taken."""
    done: bool = False

    @property
    def length(self) -> int:
        return self.end - self.start


class RangedFile:
    """A file fetched in parts from ``base`` on (bytes before it are on disk and hashed already).

    Workers :meth:`write` what arrives for a part (to the partial file at its offset, and kept in
    memory), then :meth:`complete` it; the digest takes the contiguous prefix as it grows, on a thread
    of ``hash_on`` (a pool: receiving threads never wait on hashing, and a part far ahead of a slow
    one does not hold the hashing back), or on whichever worker gets there first without it. ``release(n)`` is told when a part's ``n`` bytes leave memory;
    ``on_hashed`` once, when the last byte has been hashed."""

    def __init__(self, part_file: Path, fd: int, size: int, base: int, part_len: int, digest: StreamDigest,
                 release: Callable[[int], None], on_hashed: Callable[[], None],
                 hash_on: Callable[[Callable[[], None]], object] | None = None) -> None:
        self.part_file = part_file
        self.fd = fd
        self.size = size
        self.digest = digest
        self.parts = [Part(s, min(s + part_len, size)) for s in range(base, size, part_len)]
        self.handed = 0
        """Parts handed out so far (in order)."""
        self._done: list[tuple[int, int]] = [(0, base)] if base else []
        self._frontier = 0
        self._finished = False
        self._closed = False
        self._lock = threading.Lock()
        self._hash_lock = threading.Lock()
        self._release = release
        self._on_hashed = on_hashed
        self._hash_on = hash_on
        self._pending = False

    def next_part(self) -> Part | None:
        """The next part to fetch, in order (the caller serialises calls)."""
        if self.handed >= len(self.parts):
            return None
        self.handed += 1
        return self.parts[self.handed - 1]

    def write(self, part: Part, pieces: list[bytes]) -> None:
        """``pieces`` arrived for ``part`` at its current end: written there (one ``pwritev``), kept for
        the digest."""
        offset = part.start + part.got
        total = sum(len(p) for p in pieces)
        n = os.pwritev(self.fd, pieces, offset)
        if n < total:  # a short write (rare on a regular file): the rest one buffer at a time
            rest = memoryview(b"".join(pieces))[n:]
            while rest:
                k = os.pwrite(self.fd, rest, offset + n)
                rest, n = rest[k:], n + k
        with self._lock:
            part.pieces.extend(pieces)
            part.got += total
        self.pump()

    def complete(self, part: Part) -> None:
        """Every byte of ``part`` arrived and was written: recorded in the sidecar, and hashed in turn."""
        with self._lock:
            part.done = True
            self._done.append((part.start, part.end))
            write_sidecar(self.part_file, self.size, self._done)
        self.pump()

    def pump(self) -> None:
        """Have what arrived hashed, in order: on ``hash_on``'s thread when given (the receiving threads
        then only receive), else here. One drain at a time is asked for."""
        if self._hash_on is None:
            self.drain()
            return
        with self._lock:
            if self._pending:
                return
            self._pending = True
        self._hash_on(self._drain_pending)

    def _drain_pending(self) -> None:
        with self._lock:
            self._pending = False  # from now on a pump asks again; this drain takes what it finds
        self.drain()

    def drain(self) -> None:
        """Hash whatever has arrived in order, unless another thread is at it (it then takes this too)."""
        while self._hash_lock.acquire(blocking=False):
            try:
                finished = self._hash_ready()
            finally:
                self._hash_lock.release()
            if finished:
                self._on_hashed()
                return
            if not self._ready():
                return

    def _ready(self) -> bool:
        with self._lock:
            if self._frontier >= len(self.parts):
                return not self._finished
            p = self.parts[self._frontier]
            return p.hashed < len(p.pieces) or p.done

    def _hash_ready(self) -> bool:
        """Under the hash lock: hash the arrived prefix; True for the one call that hashes the last byte."""
        while self._frontier < len(self.parts):
            p = self.parts[self._frontier]
            with self._lock:
                todo = p.pieces[p.hashed:]
                for i in range(p.hashed, len(p.pieces)):
                    p.pieces[i] = None
                p.hashed = len(p.pieces)
                whole = p.done
            for piece in todo:
                assert piece is not None
                self.digest.update(piece)
            if not whole:
                return False
            self._release(p.length)
            self._frontier += 1
        if self._finished:
            return False
        self._finished = True
        return True

    def close(self) -> None:
        """Close the partial file (once); only when no worker writes to it any more."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            os.close(self.fd)
