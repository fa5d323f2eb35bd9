"""One download at a resolved commit, its files selected: the steps of ``download_and_verify``.

:class:`DownloadRun` holds what the run knows (the plan of ``_local_folder.plan_local_files``, the
records, the corrupt copies set aside, the bytes hashed and fetched); :func:`run_download` takes it
through its steps, in order:

1. files roost verified that have since changed in size are set aside (``_local_folder.set_aside``:
   never deleted) and join the files to fetch;
2. files on disk roost has not verified (or that changed since) are hashed where they lie: a match is
   recorded; a file roost had verified that no longer matches is set aside and fetched again; any
   other file is fetched;
3. the disk must hold what is left to fetch plus a margin (a UserError with both numbers otherwise);
4. the rest is fetched in parallel (resuming partial transfers; a large file in ranged parts over
   several connections, how many measured) and each file verified as its bytes arrive.

A verified file is recorded in the manifest at once, so an interrupted run keeps what it verified.
A corrupt copy set aside is named once the file is fetched again (a warning), in the run's
IntegrityError when the Hub serves other bytes again, or as the run stops before fetching it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from roost.errors import UserError
from roost.hub._http import HubClient
from roost.hub._local_folder import (
    PATH_MAX,
    LocalPlan,
    Manifest,
    ManifestWriter,
    VerifiedEntry,
    changed_after_verified,
    partial_dir,
    partial_size,
    plan_local_files,
    set_aside,
)
from roost.hub._transfer import Fetched, connection_bound, fetch_all, hash_on_disk
from roost.hub.integrity import HubFile, IntegrityError, Mismatch, check_digest
from roost.hub.progress import ProgressCallback
from roost.hub.spec import DownloadResult, DownloadSpec, FileRecord
from roost.inputs.text import shown
from roost.units import MiB, format_bytes

log = logging.getLogger(__name__)


@dataclass
class _Corrupt:
    """A file roost had verified, found changed this run: what was found, where its copy now lies."""

    mismatch: Mismatch
    copy: Path
    settled: bool = False
    """Fetched again and verified, or named in the run's IntegrityError."""


def _fetched_again_wrong(exc: IntegrityError, corrupt: dict[str, _Corrupt]) -> IntegrityError:
    """``exc`` with each file that was fetched again after it was found corrupt saying so, and where the
    corrupt copy is kept."""
    for m in exc.mismatches:
        if (c := corrupt.get(m.path)) is not None:
            c.settled = True
            m.note = (f"as fetched again, after the copy on disk was found changed since roost verified it "
                      f"({c.mismatch.field} {c.mismatch.found}); that copy is kept at {shown(str(c.copy), PATH_MAX)}")
    return IntegrityError(exc.mismatches, exc.remedy)


@dataclass
class DownloadRun:
    """One download at a resolved commit: its plan, and what it has verified, set aside, hashed and fetched."""

    spec: DownloadSpec
    commit: str
    local_dir: Path
    listing: list[HubFile]
    """The selected files, in the result's order."""
    writer: ManifestWriter
    verified: dict[str, VerifiedEntry]
    """What the manifest said was verified when the run started (for this repository)."""
    plan: LocalPlan
    records: dict[str, FileRecord] = field(default_factory=dict)
    corrupt: dict[str, _Corrupt] = field(default_factory=dict)
    hashed_bytes: int = 0
    downloaded: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when the run fails: the other transfers stop (their partial files stay for resume)."""

    @classmethod
    def start(cls, spec: DownloadSpec, commit: str, local_dir: Path, manifest: Manifest | None,
              everything: list[HubFile], listing: list[HubFile]) -> DownloadRun:
        """The run's plan: ``listing`` sorted by what ``local_dir`` holds, keeping what the manifest says
        is verified when it is this repository's (another commit's files may be the same)."""
        verified = dict(manifest.verified) if manifest is not None and manifest.repo_id == spec.repo_id else {}
        writer = ManifestWriter(
            local_dir, Manifest(repo_id=spec.repo_id, commit=commit, listing=everything, verified=verified)
        )
        plan = plan_local_files(local_dir, listing, verified)
        records = {
            f.path: FileRecord.of(f, verified[f.path].sha256, verified[f.path].git_oid, "cache") for f in plan.cached
        }
        return cls(spec, commit, local_dir, list(listing), writer, verified, plan, records)

    def set_aside_corrupt(self, f: HubFile, mismatch: Mismatch) -> None:
        """A file roost verified that no longer matches: moved out of the way, forgotten, fetched again."""
        self.corrupt[f.path] = _Corrupt(mismatch, set_aside(self.local_dir, f.path))
        self.writer.forget(f.path)
        self.plan.to_fetch.append(f)

    def set_aside_changed_sizes(self) -> None:
        """Step 1: files verified once that have since changed in size (no need to hash them)."""
        by_path = {f.path: f for f in self.listing}
        for changed in self.plan.mismatches:
            self.set_aside_corrupt(by_path[changed.path], changed)
        log.info(
            "%s@%s (%s): %d files, %s; %d verified before, %d to hash in place, %d to fetch",
            self.spec.repo_id, self.commit[:12], self.spec.revision, len(self.listing),
            format_bytes(sum(f.size for f in self.listing)),
            len(self.plan.cached), len(self.plan.to_hash), len(self.plan.to_fetch),
        )

    def hash_in_place(self, hashers: ThreadPoolExecutor, progress: ProgressCallback | None, interval: float) -> None:
        """Step 2: files on disk roost has not verified (or that changed since), hashed where they are."""
        for f, digest, fp in hash_on_disk(self.local_dir, self.plan.to_hash, hashers, progress, interval):
            self.hashed_bytes += digest.size
            entry = self.verified.get(f.path)
            mismatch = check_digest(f, digest)
            if mismatch is None:
                self.writer.record(f, digest, fp)
                self.records[f.path] = FileRecord.hashed(f, digest, "disk")
            elif entry is not None and entry.expected == f.expected_digest:
                mismatch.note = changed_after_verified(entry)
                self.set_aside_corrupt(f, mismatch)
            else:
                log.info("%s on disk is not the file at %s (%s); fetching it", f.path, self.commit[:12],
                         mismatch.sentence())
                self.writer.forget(f.path)
                self.plan.to_fetch.append(f)
        self.writer.flush()

    def check_space(self, free_space: Callable[[Path], int], margin_bytes: int | None) -> dict[str, int]:
        """Step 3: the bytes each file to fetch holds already (its partial file), once the disk is known
        to hold the rest plus ``margin_bytes`` (default max(512 MiB, 2% of the rest))."""
        on_disk = {f.path: partial_size(self.local_dir, f) for f in self.plan.to_fetch}
        need = sum(f.size - on_disk[f.path] for f in self.plan.to_fetch)
        if need > 0:
            margin = margin_bytes if margin_bytes is not None else max(512 * MiB, need // 50)
            free = free_space(self.local_dir)
            if free < need + margin:
                raise UserError(
                    f"not enough disk space in {self.local_dir}: {self.spec.repo_id}@{self.commit[:12]} needs "
                    f"{format_bytes(need)} more (+ {format_bytes(margin)} margin) but only {format_bytes(free)} "
                    "is free; free some space or pass --local-dir on a larger disk"
                )
        return on_disk

    def fetch(self, client: HubClient, on_disk: dict[str, int], *, fetchers: ThreadPoolExecutor,
              hashers: ThreadPoolExecutor, connections: int, progress: ProgressCallback | None, interval: float,
              transfer: Literal["auto", "http"]) -> None:
        """Step 4: fetch (resuming partial transfers) over up to ``connections`` connections, each file
        verified as its last byte lands."""
        try:
            fetched, self.downloaded = fetch_all(
                self.spec.repo_id, self.commit, self.local_dir, client, self.plan.to_fetch, on_disk,
                fetchers=fetchers, hashers=hashers, stop=self.stop, writer=self.writer, progress=progress,
                interval=interval,
                transfer=transfer, connections=connections,
            )
        except IntegrityError as exc:
            raise _fetched_again_wrong(exc, self.corrupt) from None
        for got in fetched:
            self._record_fetched(got)

    def _record_fetched(self, got: Fetched) -> None:
        """A file fetched and verified; when it had been found corrupt, a warning says where that copy is."""
        f = got.file
        c = self.corrupt.get(f.path)
        self.records[f.path] = FileRecord.hashed(
            f, got.digest, "download", got.resumed_from,
            None if c is None else c.copy.relative_to(self.local_dir).as_posix(),
        )
        self.hashed_bytes += f.size
        if c is not None:
            c.settled = True
            log.warning(
                "corrupt file fetched again: %s; the corrupt copy is kept at %s; %s bytes fetched "
                "anew from the Hub and verified",
                c.mismatch.sentence(), shown(str(c.copy), PATH_MAX), f"{f.size - got.resumed_from:,}",
            )

    def warn_unsettled(self) -> None:
        """As the run stops: each corrupt copy set aside whose file was not fetched again."""
        for c in self.corrupt.values():
            if not c.settled:
                log.warning(
                    "corrupt file not fetched again (the run stopped first): %s; the corrupt copy is kept at "
                    "%s; the next run fetches the file", c.mismatch.sentence(), shown(str(c.copy), PATH_MAX),
                )

    def result(self, endpoint: str, t0: float) -> DownloadResult:
        seconds = time.monotonic() - t0  # the caller prints DownloadResult.summary(), the one sentence of it
        return DownloadResult(
            repo_id=self.spec.repo_id,
            revision=self.spec.revision,
            commit=self.commit,
            local_dir=str(self.local_dir),
            files=[self.records[f.path] for f in self.listing],
            bytes=sum(f.size for f in self.listing),
            cached=False,
            downloaded_bytes=self.downloaded,
            hashed_bytes=self.hashed_bytes,
            seconds=seconds,
            endpoint=endpoint,
        )


def run_download(
    spec: DownloadSpec,
    commit: str,
    local_dir: Path,
    client: HubClient,
    manifest: Manifest | None,
    everything: list[HubFile],
    listing: list[HubFile],
    *,
    progress: ProgressCallback | None,
    progress_interval: float,
    free_space: Callable[[Path], int],
    margin_bytes: int | None,
    download_workers: int | None,
    hash_workers: int,
    transfer: Literal["auto", "http"],
    t0: float,
) -> DownloadResult:
    """Bring ``listing`` (the selected files of ``everything``, the commit's listing) into ``local_dir``
    verified: the steps of :class:`DownloadRun`, on thread pools that are shut down whatever happens."""
    run = DownloadRun.start(spec, commit, local_dir, manifest, everything, listing)
    hashers = ThreadPoolExecutor(max_workers=hash_workers, thread_name_prefix="roost-verify")
    connections = connection_bound(download_workers)
    fetchers = ThreadPoolExecutor(max_workers=connections, thread_name_prefix="roost-fetch")
    try:
        run.set_aside_changed_sizes()
        if run.plan.to_hash:
            run.hash_in_place(hashers, progress, progress_interval)
        on_disk = run.check_space(free_space, margin_bytes)
        if run.plan.to_fetch:
            run.fetch(client, on_disk, fetchers=fetchers, hashers=hashers, connections=connections, progress=progress,
                      interval=progress_interval, transfer=transfer)
        run.writer.flush()
    except BaseException:
        run.stop.set()
        run.warn_unsettled()
        raise
    finally:
        fetchers.shutdown(wait=True, cancel_futures=True)
        hashers.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(OSError):
            run.writer.flush()

    with contextlib.suppress(OSError):
        partial_dir(local_dir).rmdir()  # only when empty
    return run.result(client.endpoint, t0)
