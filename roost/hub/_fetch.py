"""One file to fetch over HTTP, verified as its bytes arrive: in one stream, or in ranged parts.

A :class:`FileJob` hands its work to the lanes (``roost.hub._lanes``):

- a small file (under ``_parts.RANGED_MIN``) is one request, appended to its partial file
  (``FileTransfers.fetch_http``: resumed with ``Range``, or by skipping what is on disk when the server
  ignores it), its digest fed each run of bytes as it is written;
- a large file is first *probed*: its first part asked with ``Range``. A 206 with the right
  ``Content-Range`` opens its other parts to every connection (``_parts.RangedFile``); a 200 (the
  server ignores Range) is taken as the one stream the file then arrives in;
- an Xet-stored file (``transfer="auto"`` with hf_xet installed) goes through hf_xet as before and is
  hashed where it lands.

A resumed transfer first hashes the prefix its partial file holds (the only bytes read back). When
the last byte has been hashed the digest is checked against the listing: a match is renamed into
place (``Done``), a mismatch is deleted with its partial file (``Bad``: the bytes never reach the
file's place) and stops the run.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from roost.hub._http import HubClient
from roost.hub._local_folder import Fingerprint, hash_in_place, inside, partial_path
from roost.hub._parts import (
    RANGED_MIN,
    Part,
    RangedFile,
    StreamDigest,
    drop_sidecar,
    part_bytes,
    resumable_prefix,
)
from roost.hub.errors import TransferIncomplete
from roost.hub.integrity import FileDigest, HubFile, Mismatch, check_digest

Mode = Literal["new", "probe", "ranged", "stream", "xet", "over"]


@dataclass(frozen=True)
class Done:
    file: HubFile
    digest: FileDigest
    fingerprint: Fingerprint
    resumed_from: int


@dataclass(frozen=True)
class Bad:
    file: HubFile
    mismatch: Mismatch


@dataclass(frozen=True)
class Failed:
    file: HubFile
    error: BaseException


Outcome = Done | Bad | Failed


@dataclass
class Shared:
    """What every job of one run shares."""

    client: HubClient
    repo_id: str
    commit: str
    local_dir: Path
    stop: threading.Event
    on_bytes: Callable[[int], None]
    """The download meter: bytes arrived."""
    on_hashed: Callable[[int], None]
    """The verify meter: bytes hashed."""
    outcomes: queue.Queue[Outcome]
    connections: int
    release: Callable[[int], None]
    """Bytes of parts that left memory (the lanes' budget)."""
    poke: Callable[[], None]
    """A file's parts opened (the lanes look again)."""
    use_xet: bool = False
    hash_on: Callable[[Callable[[], None]], object] | None = None
    """Where a ranged file's arrived parts are hashed (a thread pool's submit); None: on the receiving thread."""


class FileJob:
    """One file to fetch: its mode, its digest, its parts (see the module's docstring)."""

    def __init__(self, f: HubFile, run: Shared) -> None:
        self.f = f
        self.run = run
        self.mode: Mode = "new"
        self.part = inside(run.local_dir, partial_path(run.local_dir, f).relative_to(run.local_dir).as_posix())
        self.url = run.client.file_url(run.repo_id, run.commit, f.path)
        self.ctx = run.client.context(run.repo_id, run.commit, f.path)
        self.digest = StreamDigest(f.size, not f.lfs, run.on_hashed)
        self.ranged: RangedFile | None = None
        self.resumed_from = 0

    # ------------------------------------------------------------------------------- the lanes' view

    def next_work(self, reserve: Callable[[int], bool]) -> Callable[[], None] | None:
        if self.mode == "new":
            if self.run.use_xet and self.f.xet_hash:
                self.mode = "xet"
                return self._guarded(self._fetch_xet)
            self.mode = "probe" if self.f.size >= RANGED_MIN else "stream"
            return self._guarded(self._probe if self.mode == "probe" else self._stream)
        if self.mode == "ranged" and self.ranged is not None and self.ranged.handed < len(self.ranged.parts):
            nxt = self.ranged.parts[self.ranged.handed]
            if reserve(nxt.length):
                part = self.ranged.next_part()
                assert part is not None
                return self._guarded(lambda: self._fetch_part(part))
        return None

    def may_have_more(self) -> bool:
        if self.mode in ("new", "probe"):
            return True
        return self.mode == "ranged" and self.ranged is not None and self.ranged.handed < len(self.ranged.parts)

    def _hash_on(self, work: Callable[[], None]) -> None:
        """Run ``work`` (hashing the arrived parts) on the run's hashing pool, its failure this file's."""
        assert self.run.hash_on is not None
        self.run.hash_on(self._guarded(work))

    def _guarded(self, work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # the main thread raises it (Stopped included: it knows)
                self.mode = "over"  # the partial file is closed once every worker has ended (close())
                self.run.outcomes.put(Failed(self.f, exc))

        return run

    # ---------------------------------------------------------------------------------- one stream

    def _retry(self, fn: Callable[[], int], marker: Callable[[], int]) -> int:
        return self.run.client.retry(fn, what=f"fetching {self.f.path}", ctx=self.ctx, progress_marker=marker,
                                     stop=self.run.stop)

    def _on_disk(self) -> int:
        return self.part.stat().st_size if self.part.exists() else 0

    def _stream_attempt(self) -> int:
        """One attempt of the stream: the digest caught up with the partial file, then the rest appended."""
        self.part.parent.mkdir(parents=True, exist_ok=True)
        have = self._on_disk()
        if have > self.f.size:
            self.part.unlink()
            have = 0
        if not self.part.exists():
            self.part.touch()  # an empty file too has its partial file to rename
        self.digest.catch_up(self.part, have)
        return self.run.client.fetch_http(self.url, self.part, self.f.size, self.run.on_bytes, self.run.stop,
                                          self.f.path, on_chunk=self.digest.update)

    def _stream(self) -> None:
        self._start_from_prefix()
        self.resumed_from = self._retry(self._stream_attempt, self._on_disk)
        self._finish()

    # ------------------------------------------------------------------------------ ranged parts

    def _start_from_prefix(self) -> int:
        """The partial file cut back to its resumable prefix (parts past it are fetched again), its
        sidecar dropped when it has no parts; returns the prefix."""
        self.part.parent.mkdir(parents=True, exist_ok=True)
        prefix = resumable_prefix(self.part, self.f.size)
        if self.part.exists():
            os.truncate(self.part, prefix)
        drop_sidecar(self.part)
        return prefix

    def _probe(self) -> None:
        """The first part asked with Range: a 206 opens the parts, a 200 is the file's one stream."""
        prefix = self._start_from_prefix()
        self.resumed_from = prefix
        if prefix:
            self.digest.catch_up(self.part, prefix)
        fd = os.open(self.part, os.O_WRONLY | os.O_CREAT, 0o644)
        ranged = RangedFile(self.part, fd, self.f.size, prefix, part_bytes(self.f.size, self.run.connections),
                            self.digest, self.run.release, self._finish,
                            None if self.run.hash_on is None else self._hash_on)
        self.ranged = ranged
        if not ranged.parts:
            ranged.close()
            self._finish()
            return
        first = ranged.next_part()
        assert first is not None
        self.run.release(-first.length)  # held in memory like any part (the lanes' budget)

        def whole(r: httpx.Response) -> None:
            ranged.close()
            self.ranged = None
            self.mode = "stream"
            self.run.client.take_answer(r, self.part, self.f.size, prefix, self.run.on_bytes, self.run.stop,
                                        self.f.path, on_chunk=self.digest.update)

        def opened() -> None:
            self.mode = "ranged"
            self.run.poke()

        def attempt() -> int:
            if self.mode == "stream":
                self.resumed_from = self._stream_attempt()
                return self.resumed_from
            if self.mode == "ranged":  # a 206 opened the parts: a 200 now is refused (whole() would close
                return self._part_attempt(first)  # the partial file under the other parts' writes)
            return self._part_attempt(first, on_ranged=opened, whole=whole)

        self._retry(attempt, lambda: first.got if self.mode != "stream" else self._on_disk())
        if self.mode == "stream":
            self.run.release(first.length)
            self._finish()
        else:
            ranged.complete(first)

    def _part_attempt(self, part: Part, *, on_ranged: Callable[[], None] | None = None,
                      whole: Callable[[httpx.Response], None] | None = None) -> int:
        """Ask for what is missing of ``part`` until it has all arrived (shorter slices asked again)."""
        ranged = self.ranged
        assert ranged is not None

        def sink(pieces: list[bytes]) -> None:
            ranged.write(part, pieces)
            self.run.on_bytes(sum(len(p) for p in pieces))

        while part.got < part.length:
            n = self.run.client.fetch_range(self.url, part.start + part.got, part.end, self.f.size, sink,
                                            self.run.stop, self.f.path, on_ranged=on_ranged, whole=whole)
            if n < 0:
                return self._stream_attempt()  # the server ignores Range: the rest of the stream, if cut
            if n == 0:
                raise TransferIncomplete(f"server answered a range of {self.f.path} with no bytes")
            on_ranged, whole = None, None
        return part.got

    def _fetch_part(self, part: Part) -> None:
        ranged = self.ranged
        assert ranged is not None
        self._retry(lambda: self._part_attempt(part), lambda: part.got)
        ranged.complete(part)

    # ------------------------------------------------------------------------------------- landing

    def _finish(self) -> None:
        """The last byte is hashed: check the digest; rename the file into place, or delete it."""
        if self.ranged is not None:
            self.ranged.close()
        self.mode = "over"
        digest = self.digest.result()
        mismatch = check_digest(self.f, digest, note="as fetched")
        if mismatch is not None:
            self.part.unlink(missing_ok=True)
            drop_sidecar(self.part)
            self.run.outcomes.put(Bad(self.f, mismatch))
            self.run.stop.set()  # the other transfers end; their partial files stay
            return
        dest = inside(self.run.local_dir, self.f.path)  # just before the rename: a symlink made meanwhile is refused
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.part, dest)
        drop_sidecar(self.part)
        self.run.outcomes.put(Done(self.f, digest, Fingerprint.of(dest), self.resumed_from))

    def _fetch_xet(self) -> None:
        """Through hf_xet to its place, then hashed there (hf_xet writes the file itself)."""
        client, run = self.run.client, self.run
        client.retry(lambda: client.fetch_xet(run.repo_id, run.commit, self.f.path, run.local_dir, run.on_bytes),
                     what=f"fetching {self.f.path} (xet)", ctx=self.ctx, stop=run.stop)
        self.mode = "over"
        digest, fp = hash_in_place(run.local_dir, self.f, run.on_hashed)
        mismatch = check_digest(self.f, digest, note="as fetched")
        if mismatch is not None:
            run.outcomes.put(Bad(self.f, mismatch))
            run.stop.set()
            return
        run.outcomes.put(Done(self.f, digest, fp, 0))

    def close(self) -> None:
        """Once no worker runs: the partial file of a ranged transfer closed (its parts stay on disk)."""
        if self.ranged is not None:
            self.ranged.close()
