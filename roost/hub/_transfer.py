"""Moving and checking bytes: hash files where they lie, fetch files in parallel and verify each as it lands.

Both run on thread pools the caller owns (``hashers``, ``fetchers``) and report progress through a
:class:`~roost.hub.progress.ProgressMeter` on the caller's thread. A fetched file goes to its partial
file first (``.roost/partial/``), is renamed into place when complete, then hashed; a verified file
is recorded in the manifest at once, so an interrupted run keeps what it verified.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from roost.hub._files import xet_available
from roost.hub._http import HubClient
from roost.hub._local_folder import Fingerprint, ManifestWriter, hash_in_place, inside, partial_path
from roost.hub.errors import Stopped
from roost.hub.integrity import FileDigest, HubFile, IntegrityError, Mismatch, check_digest
from roost.hub.progress import ProgressCallback, ProgressMeter

T = TypeVar("T")


@dataclass(frozen=True)
class Fetched:
    """A file fetched and verified by this run."""

    file: HubFile
    digest: FileDigest
    resumed_from: int = 0


def as_they_finish(
    futures: dict[Future[T], HubFile], meter: ProgressMeter
) -> Iterator[tuple[Future[T], HubFile]]:
    """Yield each future with its file as it completes, ticking ``meter`` while waiting."""
    pending = set(futures)
    meter.tick(force=True)
    while pending:
        done, pending = wait(pending, timeout=meter.interval, return_when=FIRST_COMPLETED)
        for fut in done:
            meter.files_done += 1
            yield fut, futures[fut]
        meter.tick()
    meter.tick(force=True)


def hash_on_disk(
    local_dir: Path,
    files: Sequence[HubFile],
    hashers: ThreadPoolExecutor,
    progress: ProgressCallback | None,
    interval: float,
) -> Iterator[tuple[HubFile, FileDigest, Fingerprint]]:
    """Hash ``files`` where they lie, in parallel (the "verify" phase); yield each as it finishes."""
    meter = ProgressMeter(progress, "verify", sum(f.size for f in files), len(files), interval)
    futures = {hashers.submit(hash_in_place, local_dir, f, meter.counter.add): f for f in files}
    for fut, f in as_they_finish(futures, meter):
        digest, fp = fut.result()
        yield f, digest, fp


def fetch_all(
    repo_id: str,
    commit: str,
    local_dir: Path,
    client: HubClient,
    files: Sequence[HubFile],
    on_disk: dict[str, int],
    *,
    fetchers: ThreadPoolExecutor,
    hashers: ThreadPoolExecutor,
    stop: threading.Event,
    writer: ManifestWriter,
    progress: ProgressCallback | None,
    interval: float,
    transfer: Literal["auto", "http"],
) -> tuple[list[Fetched], int]:
    """Fetch ``files`` in parallel, verify each as it lands; return them and the bytes written.

    ``on_disk`` maps each path to the bytes its partial file already holds. A file that does not
    match the listing stops the other transfers and fails the run with :class:`IntegrityError`.
    """
    use_xet = transfer == "auto" and xet_available()
    total = sum(f.size - on_disk[f.path] for f in files)
    meter = ProgressMeter(progress, "download", total, len(files), interval)
    hash_meter = ProgressMeter(progress, "verify", sum(f.size for f in files), len(files), interval)

    def fetch(f: HubFile) -> int:
        return fetch_one(client, repo_id, commit, local_dir, f, meter.counter.add, stop, use_xet=use_xet)

    # biggest first: the long transfers start at once, the small ones fill the gaps
    order = sorted(files, key=lambda f: f.size, reverse=True)
    downloads: dict[Future[int], HubFile] = {fetchers.submit(fetch, f): f for f in order}
    out, bad = _verify_as_they_land(downloads, local_dir, hashers, stop, writer, meter, hash_meter)
    if bad:
        raise IntegrityError(
            bad, "the fetched bytes do not match the Hub's listing; run again to fetch the named files anew"
        )
    hash_meter.tick(force=True)
    return out, meter.counter.value


def fetch_one(
    client: HubClient,
    repo_id: str,
    commit: str,
    local_dir: Path,
    f: HubFile,
    on_bytes: Callable[[int], None],
    stop: threading.Event,
    *,
    use_xet: bool,
) -> int:
    """Fetch one file (with retries) to its place in ``local_dir``: through hf_xet when ``use_xet`` and
    the Hub stores it in Xet, else over HTTP to its partial file, renamed into place once complete.
    Returns the bytes the partial file held when the final attempt started (0 through hf_xet)."""
    dest = inside(local_dir, f.path)  # resolved: never outside local_dir, whatever symlinks it holds
    ctx = client.context(repo_id, commit, f.path)
    if use_xet and f.xet_hash:
        client.retry(
            lambda: client.fetch_xet(repo_id, commit, f.path, local_dir, on_bytes),
            what=f"fetching {f.path} (xet)",
            ctx=ctx,
            stop=stop,
        )
        return 0
    part = inside(local_dir, partial_path(local_dir, f).relative_to(local_dir).as_posix())
    part.parent.mkdir(parents=True, exist_ok=True)
    url = client.file_url(repo_id, commit, f.path)
    resumed = client.retry(
        lambda: client.fetch_http(url, part, f.size, on_bytes, stop, f.path),
        what=f"fetching {f.path}",
        ctx=ctx,
        progress_marker=lambda: part.stat().st_size if part.exists() else 0,
        stop=stop,
    )
    dest = inside(local_dir, f.path)  # again, just before the rename: a symlink made meanwhile is refused too
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(part, dest)
    return resumed


def _verify_as_they_land(
    downloads: dict[Future[int], HubFile],
    local_dir: Path,
    hashers: ThreadPoolExecutor,
    stop: threading.Event,
    writer: ManifestWriter,
    meter: ProgressMeter,
    hash_meter: ProgressMeter,
) -> tuple[list[Fetched], list[Mismatch]]:
    """Wait on the fetches; hash each file as it lands and record it in the manifest when it matches.
    A mismatch sets ``stop`` (the other transfers end; their partial files stay). Returns the files
    verified and the mismatches found."""
    verifies: dict[Future[tuple[FileDigest, Fingerprint]], HubFile] = {}
    resumed_from: dict[str, int] = {}
    out: list[Fetched] = []
    bad: list[Mismatch] = []
    pending: set[Future[Any]] = set(downloads)
    fetching = len(downloads)
    meter.tick(force=True)
    while pending:
        done, pending = wait(pending, timeout=meter.interval, return_when=FIRST_COMPLETED)
        for fut in done:
            if fut in downloads:
                f = downloads[fut]
                fetching -= 1
                try:
                    resumed_from[f.path] = fut.result()
                except Stopped:
                    continue
                meter.files_done += 1
                vf = hashers.submit(hash_in_place, local_dir, f, hash_meter.counter.add)
                verifies[vf] = f
                pending.add(vf)
                if fetching == 0:
                    meter.tick(force=True)  # the download phase ends here; verification may go on
                    hash_meter.restart_clock()
            else:
                f = verifies[fut]
                digest, fp = fut.result()
                hash_meter.files_done += 1
                mismatch = check_digest(f, digest, note="as fetched")
                if mismatch is not None:
                    writer.forget(f.path)
                    bad.append(mismatch)
                    stop.set()
                    continue
                writer.record(f, digest, fp)
                out.append(Fetched(f, digest, resumed_from.get(f.path, 0)))
        if fetching:
            meter.tick()
        else:
            hash_meter.tick()
    return out, bad
