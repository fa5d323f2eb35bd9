"""Download a checkpoint from the Hub once, verify every byte, and never fetch or hash it twice.

``download_and_verify(spec, local_dir)``:

1. resolves ``spec.revision`` (branch, tag or commit) to a commit sha; everything after names the commit;
2. skips, with one log line, when the manifest says this commit was verified here and every selected
   file's fingerprint (size, mtime_ns, inode, ctime_ns: ``roost.hub._local_folder``) is unchanged; a
   pinned commit needs no network for that;
3. lists the files at that commit, keeps those the allow/ignore patterns select
   (``roost.hub.patterns`` by default);
4. hashes files already on disk that roost has not verified (or that changed since); a file that
   changed after roost verified it (in size, or in content once hashed) is corrupt: it is set aside,
   never deleted (``.roost/corrupt/<path>.corrupt-<UTC timestamp>``, ``_local_folder.set_aside``),
   and fetched again with the others, and one log line names it, the digests, where its copy is kept
   and the bytes fetched again;
5. checks free space against the bytes still to fetch plus a margin, refusing early with both numbers;
6. fetches the rest in parallel over HTTP, resuming each interrupted transfer from its partial file
   (``.roost/partial/``) with an HTTP ``Range`` request; with ``transfer="auto"``, files the Hub serves
   from Xet storage go through ``hf_xet`` when it is installed (resume then happens per file);
7. verifies each fetched file as soon as it lands (size, and sha256 or git blob id against the listing),
   in a thread pool, and records it in the manifest.

Before anything: ``local_dir`` must be usable (:func:`usable_local_dir`: a directory or absent, under a
writable directory, with a path short enough), and the endpoint and token well formed
(``roost.hub._http``); each is a ``UserError`` naming it.

Faults: 401/403/404 fail at once with a sentence saying which and what to do (``UserError``); 5xx, 408,
429, resets and timeouts are retried with exponential backoff and jitter, and a transfer that made
progress starts its retry budget afresh; what outlasts the retries is ``HubUnreachable``. A file as
fetched that does not match the listing (a re-fetched corrupt file included: the Hub itself serves
other bytes than it lists) is ``IntegrityError`` (a ``CheckFailed``) naming the file, the expected and
the found digest.

The pieces: ``errors`` (faults and their sentences), ``_http`` (endpoint, token, Hub calls, retries),
``_local_folder`` (manifest, fingerprints, partial files, the plan), ``_transfer`` (hashing in place,
parallel fetch), ``progress`` (the progress reports), ``integrity`` (digests).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
    set_aside,
)
from roost.hub._transfer import fetch_all, hash_on_disk
from roost.hub.answers import repo_path_fault
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
from roost.inputs.files import kind_of
from roost.inputs.text import redact_url, shown
from roost.units import MiB, format_bytes, format_seconds

__all__ = [
    "DownloadResult",
    "DownloadSpec",
    "FileRecord",
    "RetryPolicy",
    "download_and_verify",
    "select_files",
    "selection_key",
    "usable_local_dir",
    "warm_selection",
    "warm_state_key",
]

log = logging.getLogger(__name__)

_OWN_DIRS = (".roost", ".cache")  # roost's and huggingface_hub's bookkeeping: never taken from a repo
PATH_MAX = 4096
"""Longest path the kernel opens, in bytes (with its NUL)."""
STATE_ROOM = 100
"""Bytes roost's own files add to the download directory's path (``.roost/partial/<sha256>.part``)."""
Source = Literal["cache", "disk", "download"]


def selection_key(allow_patterns: Iterable[str] | None, ignore_patterns: Iterable[str] | None) -> str:
    """A short stable digest of the pattern selection (order-insensitive)."""
    payload = json.dumps([sorted(allow_patterns or []), sorted(ignore_patterns or [])])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def is_ref_name(revision: str) -> bool:
    """Whether ``revision`` is a name git's ``check-ref-format`` accepts (a branch like ``refs/pr/1``, a
    tag, a sha): what the Hub can resolve; anything else is a typo or an attempt at a path."""
    if len(revision) > 255 or _REF_FORBIDDEN.search(revision) or revision.endswith(("/", ".", ".lock")):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in revision.split("/"))


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
            raise ValueError(f"repo id {shown(v, 80)!r} is not of the form ORG/NAME (e.g. 'Qwen/Qwen3-0.6B')")
        return v

    @field_validator("revision")
    @classmethod
    def _revision_nonempty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("revision is empty; pass a branch, tag or commit sha (default 'main')")
        if not is_ref_name(v):
            raise ValueError(f"revision {shown(v, 80)!r} is not a branch, tag or commit git would accept "
                             "(no '..', spaces, control characters or ~^:?*[\\; at most 255 characters)")
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
    corrupt_copy: str | None = Field(
        default=None,
        description="Where this run set aside the copy it found changed since roost verified it (relative to "
        "local_dir); the file itself was fetched again.",
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
        if corrupt := sum(f.corrupt_copy is not None for f in self.files):
            how += f", {corrupt} corrupt file{'s' if corrupt > 1 else ''} set aside and fetched again"
        return (
            f"{self.repo_id}@{self.commit} verified in {self.local_dir}: {len(self.files)} files, "
            f"{format_bytes(self.bytes)} ({how}, {format_seconds(self.seconds)})"
        )


# ------------------------------------------------------------------------------------------ selection


def select_files(listing: Sequence[HubFile], spec: DownloadSpec) -> list[HubFile]:
    """The files of ``listing`` that the spec's allow/ignore patterns select (huggingface_hub's rules).

    A name no download directory can hold (``roost.hub.answers.repo_path_fault``: ``..``, absolute, a
    control character...) refuses the whole repository; roost's and huggingface_hub's own directories
    are never taken from it."""
    for f in listing:
        fault = repo_path_fault(f.path)
        if fault is not None:
            raise UserError(
                f"{spec.repo_id} lists a file at {shown(repr(f.path))}, which {fault}; "
                "refusing to download this repository"
            )
    listing = [f for f in listing if f.path.split("/", 1)[0] not in _OWN_DIRS]
    # here, not at import: importing huggingface_hub parses HF_ENDPOINT (checked before this runs)
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # public: in its lazy __all__

    return sorted(
        filter_repo_objects(
            listing,
            allow_patterns=spec.allow_patterns or None,
            ignore_patterns=spec.ignore_patterns or None,
            key=lambda f: f.path,
        ),
        key=lambda f: f.path,
    )


def usable_local_dir(local_dir: Path | str) -> Path:
    """``local_dir`` resolved, when a download can live there: a directory or not there yet, whose
    nearest existing ancestor is a writable directory, and whose path leaves room for the files
    (:data:`PATH_MAX`, 255 bytes a component). A UserError naming it and what to do otherwise."""
    text = str(local_dir)
    where = shown(text, 120)
    remedy = "choose another --local-dir"
    if not text.strip() or "\x00" in text:
        raise UserError(f"--local-dir {where!r} is empty or holds a NUL byte: {remedy}")
    try:
        path = Path(local_dir).expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        raise UserError(f"--local-dir {where}: cannot be resolved ({shown(str(exc), 80)}): {remedy}") from None
    raw = os.fsencode(path)
    if len(raw) + STATE_ROOM >= PATH_MAX:
        raise UserError(
            f"--local-dir {where}: path too long ({len(raw):,} bytes; the download needs it under "
            f"{PATH_MAX - STATE_ROOM:,}): choose a shorter --local-dir"
        )
    if any(len(part) > 255 for part in raw.split(b"/")):
        raise UserError(f"--local-dir {where}: a component is longer than 255 bytes: choose a shorter --local-dir")
    for candidate in (path, *path.parents):
        try:
            st = os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise UserError(f"--local-dir {where}: {shown(str(candidate), 120)} cannot be read ({exc.strerror}): "
                            f"{remedy}") from None
        if not stat.S_ISDIR(st.st_mode):
            what = "exists and" if candidate == path else f"is under {shown(str(candidate), 120)}, which"
            kind = "a file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
            raise UserError(f"--local-dir {where} {what} is {kind}, not a directory; pass a directory")
        if not os.access(candidate, os.W_OK | os.X_OK):
            raise UserError(f"--local-dir {where}: {shown(str(candidate), 120)} is not writable for this user: "
                            f"make it writable or {remedy}")
        break
    return path


def _check_path_room(local_dir: Path, listing: Sequence[HubFile]) -> None:
    """Each file's path in ``local_dir`` is short enough to be opened (a UserError naming the first that is not)."""
    base = len(os.fsencode(local_dir)) + 1
    for f in listing:
        if base + len(f.path.encode()) >= PATH_MAX:
            raise UserError(
                f"--local-dir {shown(str(local_dir), 120)} is too long for {shown(f.path, 120)} "
                f"({base + len(f.path.encode()):,} bytes in all, at most {PATH_MAX - 1:,}): choose a shorter --local-dir"
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
    local_dir = usable_local_dir(local_dir)
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
        f"{f.path}:{e.sha256}:{e.fingerprint.size}:{e.fingerprint.mtime_ns}:{e.fingerprint.inode}:{e.fingerprint.ctime_ns}"
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
    A file roost verified before that has changed since is set aside under ``.roost/corrupt/`` and
    fetched again (one warning names it); the run goes on.
    Raises UserError (exit 2: unknown repo/revision, access, no space, an unusable ``local_dir``,
    endpoint or token, a Hub answer that does not fit), IntegrityError (exit 1: a file as fetched does
    not match; named with expected and found digests), CheckFailed (exit 1: the server states or sends
    another size than its listing), HubUnreachable (transient faults outlasted the retries).
    """
    t0 = time.monotonic()
    endpoint = resolve_endpoint(endpoint)
    token = resolve_token(token)
    local_dir = usable_local_dir(local_dir)
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
        return _cached_result(spec, manifest, warm, local_dir, redact_url(endpoint), t0)

    client = HubClient(endpoint, token, policy=retry)
    try:
        commit = client.resolve(spec.repo_id, spec.revision)
        if warm := warm_selection(manifest, spec, commit, local_dir):
            assert manifest is not None
            return _cached_result(spec, manifest, warm, local_dir, client.endpoint, t0)
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
    _check_path_room(local_dir, listing)
    verified = dict(manifest.verified) if manifest is not None and manifest.repo_id == spec.repo_id else {}
    writer = ManifestWriter(
        local_dir, Manifest(repo_id=spec.repo_id, commit=commit, listing=everything, verified=verified)
    )
    plan = plan_local_files(local_dir, listing, verified)
    by_path = {f.path: f for f in listing}
    total = sum(f.size for f in listing)
    records: dict[str, FileRecord] = {
        f.path: _record(f, verified[f.path].sha256, verified[f.path].git_oid, "cache") for f in plan.cached
    }
    corrupt: dict[str, _Corrupt] = {}

    def set_aside_corrupt(f: HubFile, mismatch: Mismatch) -> None:
        """A file roost verified that no longer matches: moved out of the way, forgotten, fetched again."""
        corrupt[f.path] = _Corrupt(mismatch, set_aside(local_dir, f.path))
        writer.forget(f.path)
        plan.to_fetch.append(f)

    hashed_bytes = 0
    downloaded = 0
    stop = threading.Event()
    hashers = ThreadPoolExecutor(max_workers=hash_workers, thread_name_prefix="roost-verify")
    fetchers = ThreadPoolExecutor(max_workers=max(1, download_workers), thread_name_prefix="roost-fetch")
    try:
        for changed in plan.mismatches:  # verified once, since changed in size: no need to hash it
            set_aside_corrupt(by_path[changed.path], changed)
        log.info(
            "%s@%s (%s): %d files, %s; %d verified before, %d to hash in place, %d to fetch",
            spec.repo_id, commit[:12], spec.revision, len(listing), format_bytes(total),
            len(plan.cached), len(plan.to_hash), len(plan.to_fetch),
        )
        # 1. files on disk roost has not verified (or that changed since): hash them where they are.
        if plan.to_hash:
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
                    set_aside_corrupt(f, mismatch)
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
            try:
                fetched, downloaded = fetch_all(
                    spec.repo_id, commit, local_dir, client, plan.to_fetch, on_disk,
                    fetchers=fetchers, hashers=hashers, stop=stop, writer=writer,
                    progress=progress, interval=progress_interval, transfer=transfer,
                )
            except IntegrityError as exc:
                raise _fetched_again_wrong(exc, corrupt) from None
            for got in fetched:
                f = got.file
                c = corrupt.get(f.path)
                records[f.path] = _verified_record(
                    f, got.digest, "download", got.resumed_from,
                    None if c is None else c.copy.relative_to(local_dir).as_posix(),
                )
                hashed_bytes += got.file.size
                if c is not None:
                    c.settled = True
                    log.warning(
                        "corrupt file fetched again: %s; the corrupt copy is kept at %s; %s bytes fetched "
                        "anew from the Hub and verified",
                        c.mismatch.sentence(), shown(str(c.copy), PATH_MAX), f"{f.size - got.resumed_from:,}",
                    )
        writer.flush()
    except BaseException:
        stop.set()
        for c in corrupt.values():
            if not c.settled:
                log.warning(
                    "corrupt file not fetched again (the run stopped first): %s; the corrupt copy is kept at "
                    "%s; the next run fetches the file", c.mismatch.sentence(), shown(str(c.copy), PATH_MAX),
                )
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


def _record(
    f: HubFile, sha256: str, git_oid: str | None, source: Source, resumed: int = 0, corrupt_copy: str | None = None
) -> FileRecord:
    return FileRecord(
        path=f.path,
        size=f.size,
        sha256=sha256,
        verified=True,
        lfs=f.lfs,
        git_oid=git_oid,
        source=source,
        resumed_from=resumed,
        corrupt_copy=corrupt_copy,
    )


def _verified_record(
    f: HubFile, digest: FileDigest, source: Source, resumed: int = 0, corrupt_copy: str | None = None
) -> FileRecord:
    return _record(f, digest.sha256, None if f.lfs else digest.git_sha1, source, resumed, corrupt_copy)


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
