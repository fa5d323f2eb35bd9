"""Moving and checking bytes: hash files where they lie, fetch files in parallel and verify each as it lands.

Both run on thread pools the caller owns (``hashers``, ``fetchers``) and report progress through a
:class:`~roost.hub.progress.ProgressMeter` on the caller's thread. A fetched file goes to its partial
file first (``.roost/partial/``), hashed as its bytes arrive (``roost.hub._fetch``: one stream, or
ranged parts over several connections), and is renamed into place once its digest matches the
listing: no second read of it. How many connections run is measured (``roost.hub._lanes.Ramp``).
A verified file is recorded in the manifest at once, so an interrupted run keeps what it verified.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from roost.hub._fetch import Bad, Done, FileJob, Outcome, Shared
from roost.hub._files import xet_available
from roost.hub._http import HubClient
from roost.hub._lanes import BUFFER_BYTES, MAX_CONNECTIONS, START_CONNECTIONS, Lanes, Ramp
from roost.hub._local_folder import Fingerprint, ManifestWriter, hash_in_place
from roost.hub.errors import Stopped
from roost.hub.integrity import FileDigest, HubFile, IntegrityError, Mismatch
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


def connection_bound(download_workers: int | None) -> int:
    """Connections at most: ``download_workers`` when given (at least 1), else :data:`MAX_CONNECTIONS`."""
    return max(1, download_workers) if download_workers is not None else MAX_CONNECTIONS


def fetch_all(
    repo_id: str,
    commit: str,
    local_dir: Path,
    client: HubClient,
    files: Sequence[HubFile],
    on_disk: dict[str, int],
    *,
    fetchers: ThreadPoolExecutor,
    hashers: ThreadPoolExecutor | None = None,
    stop: threading.Event,
    writer: ManifestWriter,
    progress: ProgressCallback | None,
    interval: float,
    transfer: Literal["auto", "http"],
    connections: int = MAX_CONNECTIONS,
    ramp: Ramp | None = None,
) -> tuple[list[Fetched], int]:
    """Fetch ``files`` over up to ``connections`` connections (``fetchers`` has as many threads), each
    verified as its last byte lands (a ranged file's parts hashed in order on ``hashers``); return them
    and the bytes written.

    ``on_disk`` maps each path to the bytes its partial file already holds. A file that does not
    match the listing stops the other transfers and fails the run with :class:`IntegrityError`.
    ``ramp`` (default: from :data:`START_CONNECTIONS` up to ``connections``) sets how many run.
    """
    total = sum(f.size - on_disk[f.path] for f in files)
    meter = ProgressMeter(progress, "download", total, len(files), interval)
    hash_meter = ProgressMeter(progress, "verify", sum(f.size for f in files), len(files), interval)
    ramp = ramp or Ramp(START_CONNECTIONS, connections)
    outcomes: queue.Queue[Outcome] = queue.Queue()
    lanes: Lanes | None = None

    def release(n: int) -> None:
        assert lanes is not None
        lanes.release(n)

    def poke() -> None:
        assert lanes is not None
        lanes.poke()

    shared = Shared(client, repo_id, commit, local_dir, stop, meter.counter.add, hash_meter.counter.add, outcomes,
                    connections, release, poke, use_xet=transfer == "auto" and xet_available(),
                    hash_on=None if hashers is None else hashers.submit)
    # biggest first: the long transfers start at once, the small ones fill the gaps
    jobs = [FileJob(f, shared) for f in sorted(files, key=lambda f: f.size, reverse=True)]
    lanes = Lanes(jobs, target=ramp.target, budget=BUFFER_BYTES, stop=stop)
    workers = [fetchers.submit(_work, lanes, slot) for slot in range(connections)]
    try:
        out, bad = _collect(outcomes, workers, len(files), writer, stop, lanes, ramp, meter, hash_meter)
    except BaseException:
        stop.set()  # the other transfers end; their partial files stay
        raise
    finally:
        wait(workers)
        for job in jobs:
            job.close()
    if bad:
        raise IntegrityError(
            bad, "the fetched bytes do not match the Hub's listing; run again to fetch the named files anew"
        )
    hash_meter.tick(force=True)
    return out, meter.counter.value


def _work(lanes: Lanes, slot: int) -> None:
    while (work := lanes.take(slot)) is not None:
        work()


def _collect(
    outcomes: queue.Queue[Outcome],
    workers: list[Future[None]],
    count: int,
    writer: ManifestWriter,
    stop: threading.Event,
    lanes: Lanes,
    ramp: Ramp,
    meter: ProgressMeter,
    hash_meter: ProgressMeter,
) -> tuple[list[Fetched], list[Mismatch]]:
    """Wait on the files' outcomes (ticking the meters, setting the lanes' target from the ramp); record
    each verified file in the manifest at once. A mismatch has stopped the run; an error is raised."""
    out: list[Fetched] = []
    bad: list[Mismatch] = []
    settled: set[str] = set()  # a file in parts may fail on several workers: it counts once
    meter.tick(force=True)
    while len(settled) < count:
        try:
            o = outcomes.get(timeout=min(meter.interval, ramp.window_s / 2))
        except queue.Empty:
            if stop.is_set() and all(w.done() for w in workers) and outcomes.empty():
                break  # stopped: the workers ended without an outcome for some files (a file's last parts
                # may still be hashing on the hashers when the fetch workers are done: no break then)
            lanes.set_target(ramp.observe(time.monotonic(), meter.counter.value))
            meter.tick()
            continue
        if isinstance(o, Done):
            settled.add(o.file.path)
            meter.files_done += 1
            hash_meter.files_done += 1
            writer.record(o.file, o.digest, o.fingerprint)
            out.append(Fetched(o.file, o.digest, o.resumed_from))
        elif isinstance(o, Bad):
            settled.add(o.file.path)
            writer.forget(o.file.path)
            bad.append(o.mismatch)
            stop.set()
        elif not isinstance(o.error, Stopped):
            raise o.error
        lanes.set_target(ramp.observe(time.monotonic(), meter.counter.value))
        meter.tick()
    if len(settled) < count and not bad:
        raise Stopped()  # the run was stopped from outside this fetch (nothing here failed)
    meter.tick(force=True)  # the download phase ends with its last file
    hash_meter.restart_clock()
    return out, bad
