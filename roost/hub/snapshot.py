"""Download a checkpoint from the Hub once, verify every byte, and never fetch or hash it twice.

``download_and_verify(spec, local_dir)``:

1. resolves ``spec.revision`` (branch, tag or commit) to a commit sha; everything after names the commit;
2. skips, with one log line, when the manifest says this commit was verified here and every selected
   file's fingerprint (size, mtime_ns, inode) is unchanged; a pinned commit needs no network for that;
3. lists the files at that commit, keeps those the allow/ignore patterns select
   (``roost.hub.patterns`` by default);
4. hashes files already on disk that roost has not verified (or that changed since): a file that
   changed after roost verified it fails the run (it is reported, never replaced silently);
5. checks free space against the bytes still to fetch plus a margin, refusing early with both numbers;
6. fetches the rest in parallel over HTTP, resuming each interrupted transfer from its partial file
   (``.roost/partial/``) with an HTTP ``Range`` request; with ``transfer="auto"``, files the Hub serves
   from Xet storage go through ``hf_xet`` when it is installed (resume then happens per file);
7. verifies each fetched file as soon as it lands (size, and sha256 or git blob id against the listing),
   in a thread pool, and records it in the manifest.

Faults: 401/403/404 fail at once with a sentence saying which and what to do (``UserError``); 5xx, 408,
429, resets and timeouts are retried with exponential backoff and jitter, and a transfer that made
progress starts its retry budget afresh; what outlasts the retries is ``HubUnreachable``. A mismatch is
``IntegrityError`` (a ``CheckFailed``) naming the file, the expected and the found digest.

The pieces: ``errors`` (faults and their sentences), ``_http`` (endpoint, token, Hub calls, retries),
``_local_folder`` (manifest, fingerprints, partial files, the plan), ``_transfer`` (hashing in place,
parallel fetch), ``progress`` (the progress reports), ``integrity`` (digests).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # public: in its lazy __all__
from pydantic import BaseModel, Field, field_validator

from roost.errors import UserError
from roost.fslock import exclusive
from roost.hub._http import HubClient, RetryPolicy, is_full_sha, resolve_endpoint, resolve_token
from roost.hub._local_folder import (
    Manifest,
    ManifestWriter,
    changed_after_verified,
    download_lock_path,
    free_bytes,
    load_manifest,
    partial_dir,
    partial_size,
    plan_local_files,
)
from roost.hub._transfer import fetch_all, hash_on_disk
from roost.hub.errors import local_disk_errors
from roost.hub.integrity import (
    FileDigest,
    HubFile,
    IntegrityError,
    Mismatch,
    check_digest,
    default_hash_workers,
)
from roost.hub.patterns import DEFAULT_ALLOW_PATTERNS, DEFAULT_IGNORE_PATTERNS
from roost.hub.progress import ProgressCallback
from roost.units import MiB, format_bytes, format_seconds

__all__ = [
    "DownloadResult",
    "DownloadSpec",
    "FileRecord",
    "RetryPolicy",
    "download_and_verify",
    "select_files",
    "selection_key",
    "warm_selection",
    "warm_state_key",
]

log = logging.getLogger(__name__)

_OWN_DIRS = (".roost/", ".cache/")  # roost's and huggingface_hub's bookkeeping: never taken from a repo
Source = Literal["cache", "disk", "download"]


def selection_key(allow_patterns: Iterable[str] | None, ignore_patterns: Iterable[str] | None) -> str:
    """A short stable digest of the pattern selection (order-insensitive)."""
    payload = json.dumps([sorted(allow_patterns or []), sorted(ignore_patterns or [])])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class DownloadSpec(BaseModel):
    """What to fetch: a repo, a revision, and the file patterns of the model profile."""

    repo_id: str
    revision: str = "main"
    allow_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOW_PATTERNS))
    ignore_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE_PATTERNS))

    @field_validator("repo_id")
    @classmethod
    def _repo_id_form(cls, v: str) -> str:
        parts = v.split("/")
        if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts):
            raise ValueError(f"repo id {v!r} is not of the form ORG/NAME (e.g. 'Qwen/Qwen3-0.6B')")
        return v

    @field_validator("revision")
    @classmethod
    def _revision_nonempty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("revision is empty; pass a branch, tag or commit sha (default 'main')")
        return v.lower() if re.fullmatch(r"[0-9a-fA-F]{40}", v) else v

    def pinned(self, commit: str) -> DownloadSpec:
        """The same spec with the revision replaced by a resolved commit sha."""
        return self.model_copy(update={"revision": commit})

    @property
    def selection(self) -> str:
        """A short digest of the allow/ignore patterns (part of the Prefect cache key)."""
        return selection_key(self.allow_patterns, self.ignore_patterns)


class FileRecord(BaseModel):
    """One file of the result: where it is, what it hashes to, and how this run got it."""

    path: str
    size: int
    sha256: str
    verified: bool
    lfs: bool = False
    git_oid: str | None = Field(default=None, description="The git blob id checked, for a non-LFS file.")
    source: Source = Field(
        description="cache: fingerprint unchanged since verified; disk: hashed in place; download: fetched now."
    )
    resumed_from: int = Field(
        default=0,
        description="Bytes already on disk (kept, not fetched again) when the transfer's final attempt started.",
    )


class DownloadResult(BaseModel):
    """What the download stage established (``roost download --json``, the download task's result)."""

    repo_id: str
    revision: str = Field(description="What was asked for: a branch, tag or commit.")
    commit: str
    local_dir: str
    files: list[FileRecord]
    bytes: int = Field(description="Total size of the selected files.")
    cached: bool = Field(
        description="Nothing was fetched or hashed: every file was verified before and unchanged."
    )
    downloaded_bytes: int = 0
    hashed_bytes: int = 0
    seconds: float = 0.0
    endpoint: str = ""

    def summary(self) -> str:
        """One sentence: what was verified where, and what this run fetched and hashed."""
        how = (
            "cached, nothing fetched or hashed"
            if self.cached
            else f"fetched {format_bytes(self.downloaded_bytes)}, hashed {format_bytes(self.hashed_bytes)}"
        )
        return (
            f"{self.repo_id}@{self.commit} verified in {self.local_dir}: {len(self.files)} files, "
            f"{format_bytes(self.bytes)} ({how}, {format_seconds(self.seconds)})"
        )


# ------------------------------------------------------------------------------------------ selection


def select_files(listing: Sequence[HubFile], spec: DownloadSpec) -> list[HubFile]:
    """The files of ``listing`` that the spec's allow/ignore patterns select (huggingface_hub's rules)."""
    for f in listing:
        parts = f.path.split("/")
        if f.path.startswith("/") or ".." in parts or "" in parts:
            raise UserError(
                f"{spec.repo_id} lists a file at {f.path!r}, which would land outside the download directory; "
                "refusing to download this repository"
            )
    listing = [f for f in listing if not f.path.startswith(_OWN_DIRS)]
    return sorted(
        filter_repo_objects(
            listing,
            allow_patterns=spec.allow_patterns or None,
            ignore_patterns=spec.ignore_patterns or None,
            key=lambda f: f.path,
        ),
        key=lambda f: f.path,
    )


def warm_selection(
    manifest: Manifest | None, spec: DownloadSpec, commit: str, local_dir: Path
) -> list[HubFile] | None:
    """The selected files when ``local_dir`` holds them verified at ``commit`` and unchanged; else None."""
    if (
        manifest is None
        or manifest.repo_id != spec.repo_id
        or manifest.commit != commit
        or not manifest.listing
    ):
        return None
    selected = select_files(manifest.listing, spec)
    if selected and manifest.unchanged(local_dir, selected):
        return selected
    return None


def warm_state_key(
    spec: DownloadSpec, local_dir: Path, *, endpoint: str | None = None, token: str | None = None
) -> str | None:
    """A digest of what ``local_dir`` holds verified for ``spec``, or None unless all of it is there.

    The digest covers the repo, the resolved commit, the pattern selection, the directory and each
    selected file's sha256 and fingerprint, so it changes when any file is touched. A branch or tag
    costs one Hub call (no retries); a full commit sha none.
    """
    local_dir = Path(local_dir).expanduser().resolve()
    manifest = load_manifest(local_dir)
    if manifest is None or manifest.repo_id != spec.repo_id:
        return None
    client = HubClient(resolve_endpoint(endpoint), resolve_token(token), policy=RetryPolicy(attempts=1))
    try:
        commit = client.resolve(spec.repo_id, spec.revision)
    finally:
        client.close()
    selected = warm_selection(manifest, spec, commit, local_dir)
    if not selected:
        return None
    state = "|".join(
        f"{f.path}:{e.sha256}:{e.fingerprint.size}:{e.fingerprint.mtime_ns}:{e.fingerprint.inode}"
        for f in selected
        if (e := manifest.verified.get(f.path)) is not None
    )
    key = f"{spec.repo_id}|{commit}|{spec.selection}|{local_dir}|{state}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


# ------------------------------------------------------------------------------------------- the stage


def download_and_verify(
    spec: DownloadSpec,
    local_dir: Path,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    progress: ProgressCallback | None = None,
    progress_interval: float = 0.5,
    free_space: Callable[[Path], int] = free_bytes,
    margin_bytes: int | None = None,
    download_workers: int = 4,
    hash_workers: int | None = None,
    retry: RetryPolicy | None = None,
    transfer: Literal["auto", "http"] = "http",
) -> DownloadResult:
    """Fetch ``spec`` into ``local_dir``, verify every file against the Hub's listing, and record it.

    ``endpoint`` defaults to ``HF_ENDPOINT`` (read at call time) else huggingface.co; ``token`` to
    ``HF_TOKEN``. ``progress`` is called on this thread at most every ``progress_interval`` seconds.
    ``free_space(path)`` returns free bytes (inject it to test the preflight); ``margin_bytes`` defaults
    to max(512 MiB, 2% of what is left to fetch). ``transfer="http"`` (the default) fetches every
    file over HTTP; ``"auto"`` uses hf_xet for Xet-stored files when it is installed.
    Raises UserError (exit 2: unknown repo/revision, access, no space), IntegrityError (exit 1: a file
    does not match; named with expected and found digests), HubUnreachable (transient faults outlasted
    the retries).
    """
    t0 = time.monotonic()
    local_dir = Path(local_dir).expanduser().resolve()
    endpoint = resolve_endpoint(endpoint)
    held = contextlib.ExitStack()
    with local_disk_errors(local_dir):  # one download into a directory at a time (two landings on one machine)
        held.enter_context(exclusive(download_lock_path(local_dir), on_wait=lambda: log.info(
            "waiting for another download into %s to finish", local_dir)))
    with held:
        return _download_held(spec, local_dir, endpoint, token, t0, progress=progress,
                              progress_interval=progress_interval, free_space=free_space, margin_bytes=margin_bytes,
                              download_workers=download_workers, hash_workers=hash_workers, retry=retry,
                              transfer=transfer)


def _download_held(
    spec: DownloadSpec,
    local_dir: Path,
    endpoint: str,
    token: str | None,
    t0: float,
    *,
    progress: ProgressCallback | None,
    progress_interval: float,
    free_space: Callable[[Path], int],
    margin_bytes: int | None,
    download_workers: int,
    hash_workers: int | None,
    retry: RetryPolicy | None,
    transfer: Literal["auto", "http"],
) -> DownloadResult:
    """:func:`download_and_verify` with ``local_dir``'s lock held: a second download waits, then finds the
    commit verified by the first."""
    with local_disk_errors(local_dir):
        manifest = load_manifest(local_dir)

    if is_full_sha(spec.revision) and (warm := warm_selection(manifest, spec, spec.revision, local_dir)):
        assert manifest is not None
        return _cached_result(spec, manifest, warm, local_dir, endpoint, t0)

    client = HubClient(endpoint, resolve_token(token), policy=retry)
    try:
        commit = client.resolve(spec.repo_id, spec.revision)
        if warm := warm_selection(manifest, spec, commit, local_dir):
            assert manifest is not None
            return _cached_result(spec, manifest, warm, local_dir, endpoint, t0)
        with local_disk_errors(local_dir):
            return _run(
                spec,
                commit,
                local_dir,
                client,
                manifest,
                progress=progress,
                progress_interval=progress_interval,
                free_space=free_space,
                margin_bytes=margin_bytes,
                download_workers=download_workers,
                hash_workers=hash_workers or default_hash_workers(),
                transfer=transfer,
                t0=t0,
            )
    finally:
        client.close()


def _run(
    spec: DownloadSpec,
    commit: str,
    local_dir: Path,
    client: HubClient,
    manifest: Manifest | None,
    *,
    progress: ProgressCallback | None,
    progress_interval: float,
    free_space: Callable[[Path], int],
    margin_bytes: int | None,
    download_workers: int,
    hash_workers: int,
    transfer: Literal["auto", "http"],
    t0: float,
) -> DownloadResult:
    same_commit = manifest is not None and manifest.repo_id == spec.repo_id and manifest.commit == commit
    if same_commit and manifest is not None and manifest.listing:
        everything = list(manifest.listing)  # a commit's listing never changes
    else:
        everything = client.list_files(spec.repo_id, commit)
    listing = select_files(everything, spec)
    if not listing:
        raise UserError(
            f"no file of {spec.repo_id}@{commit[:12]} matches the allow patterns {spec.allow_patterns} "
            f"(ignoring {spec.ignore_patterns}); it has {len(everything)} files: widen the model profile's patterns"
        )
    verified = dict(manifest.verified) if manifest is not None and manifest.repo_id == spec.repo_id else {}
    writer = ManifestWriter(
        local_dir, Manifest(repo_id=spec.repo_id, commit=commit, listing=everything, verified=verified)
    )
    plan = plan_local_files(local_dir, listing, verified)
    if plan.mismatches:
        raise IntegrityError(plan.mismatches, "delete the named files and run again to fetch them anew")
    total = sum(f.size for f in listing)
    log.info(
        "%s@%s (%s): %d files, %s; %d verified before, %d to hash in place, %d to fetch",
        spec.repo_id, commit[:12], spec.revision, len(listing), format_bytes(total),
        len(plan.cached), len(plan.to_hash), len(plan.to_fetch),
    )
    records: dict[str, FileRecord] = {
        f.path: _record(f, verified[f.path].sha256, verified[f.path].git_oid, "cache") for f in plan.cached
    }
    hashed_bytes = 0
    downloaded = 0
    stop = threading.Event()
    hashers = ThreadPoolExecutor(max_workers=hash_workers, thread_name_prefix="roost-verify")
    fetchers = ThreadPoolExecutor(max_workers=max(1, download_workers), thread_name_prefix="roost-fetch")
    try:
        # 1. files on disk roost has not verified (or that changed since): hash them where they are.
        if plan.to_hash:
            bad: list[Mismatch] = []
            hashed = hash_on_disk(local_dir, plan.to_hash, hashers, progress, progress_interval)
            for f, digest, fp in hashed:
                hashed_bytes += digest.size
                entry = verified.get(f.path)
                mismatch = check_digest(f, digest)
                if mismatch is None:
                    writer.record(f, digest, fp)
                    records[f.path] = _verified_record(f, digest, "disk")
                elif entry is not None and entry.expected == f.expected_digest:
                    mismatch.note = changed_after_verified(entry)
                    bad.append(mismatch)
                else:
                    log.info(
                        "%s on disk is not the file at %s (%s); fetching it",
                        f.path,
                        commit[:12],
                        mismatch.sentence(),
                    )
                    writer.forget(f.path)
                    plan.to_fetch.append(f)
            writer.flush()
            if bad:
                raise IntegrityError(bad, "delete the named files and run again to fetch them anew")

        # 2. disk preflight for what is left to fetch.
        on_disk = {f.path: partial_size(local_dir, f) for f in plan.to_fetch}
        need = sum(f.size - on_disk[f.path] for f in plan.to_fetch)
        if need > 0:
            margin = margin_bytes if margin_bytes is not None else max(512 * MiB, need // 50)
            free = free_space(local_dir)
            if free < need + margin:
                raise UserError(
                    f"not enough disk space in {local_dir}: {spec.repo_id}@{commit[:12]} needs {format_bytes(need)} "
                    f"more (+ {format_bytes(margin)} margin) but only {format_bytes(free)} is free; free some space "
                    "or pass --local-dir on a larger disk"
                )

        # 3. fetch (resuming partial transfers) and verify each file as soon as it lands.
        if plan.to_fetch:
            fetched, downloaded = fetch_all(
                spec.repo_id, commit, local_dir, client, plan.to_fetch, on_disk,
                fetchers=fetchers, hashers=hashers, stop=stop, writer=writer,
                progress=progress, interval=progress_interval, transfer=transfer,
            )
            for got in fetched:
                f = got.file
                records[f.path] = _verified_record(f, got.digest, "download", got.resumed_from)
                hashed_bytes += got.file.size
        writer.flush()
    except BaseException:
        stop.set()
        raise
    finally:
        fetchers.shutdown(wait=True, cancel_futures=True)
        hashers.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(OSError):
            writer.flush()

    with contextlib.suppress(OSError):
        partial_dir(local_dir).rmdir()  # only when empty
    seconds = time.monotonic() - t0  # the caller prints DownloadResult.summary(), the one sentence of it
    return DownloadResult(
        repo_id=spec.repo_id,
        revision=spec.revision,
        commit=commit,
        local_dir=str(local_dir),
        files=[records[f.path] for f in listing],
        bytes=total,
        cached=False,
        downloaded_bytes=downloaded,
        hashed_bytes=hashed_bytes,
        seconds=seconds,
        endpoint=client.endpoint,
    )


def _record(f: HubFile, sha256: str, git_oid: str | None, source: Source, resumed: int = 0) -> FileRecord:
    return FileRecord(
        path=f.path,
        size=f.size,
        sha256=sha256,
        verified=True,
        lfs=f.lfs,
        git_oid=git_oid,
        source=source,
        resumed_from=resumed,
    )


def _verified_record(f: HubFile, digest: FileDigest, source: Source, resumed: int = 0) -> FileRecord:
    return _record(f, digest.sha256, None if f.lfs else digest.git_sha1, source, resumed)


def _cached_result(
    spec: DownloadSpec,
    manifest: Manifest,
    selected: Sequence[HubFile],
    local_dir: Path,
    endpoint: str,
    t0: float,
) -> DownloadResult:
    files = [
        _record(f, manifest.verified[f.path].sha256, manifest.verified[f.path].git_oid, "cache")
        for f in selected
    ]
    total = sum(f.size for f in selected)
    log.info(
        "%s@%s already verified in %s (%d files, %s unchanged since); skipping download and hashing",
        spec.repo_id,
        manifest.commit[:12],
        local_dir,
        len(files),
        format_bytes(total),
    )
    return DownloadResult(
        repo_id=spec.repo_id,
        revision=spec.revision,
        commit=manifest.commit,
        local_dir=str(local_dir),
        files=files,
        bytes=total,
        cached=True,
        seconds=time.monotonic() - t0,
        endpoint=endpoint,
    )
