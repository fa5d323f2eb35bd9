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
   (``.roost/partial/``) with an HTTP ``Range`` request; a large file comes in ranged parts over several
   connections when the server honours ``Range`` (one stream when it does not), and the number of
   connections grows while the aggregate throughput does (``_lanes``); with ``transfer="auto"``, files
   the Hub serves from Xet storage go through ``hf_xet`` when it is installed (resume then happens per file);
7. verifies each fetched file as its bytes arrive (size, and sha256 or git blob id against the listing,
   hashed in order as the file's prefix grows: no second read), renames it into place when it matches,
   and records it in the manifest.

Before anything: ``local_dir`` must be usable (:func:`usable_local_dir`: a directory or absent, under a
writable directory, with a path short enough), and the endpoint and token well formed
(``roost.hub._http``); each is a ``UserError`` naming it.

Faults: 401/403/404 fail at once with a sentence saying which and what to do (``UserError``); 5xx, 408,
429, resets and timeouts are retried with exponential backoff and jitter, and a transfer that made
progress starts its retry budget afresh; what outlasts the retries is ``HubUnreachable``. A file as
fetched that does not match the listing (a re-fetched corrupt file included: the Hub itself serves
other bytes than it lists) is ``IntegrityError`` (a ``CheckFailed``) naming the file, the expected and
the found digest.

The pieces: ``spec`` (the stage's input and output models), ``errors`` (faults and their sentences),
``_endpoint`` (endpoint, token, timeouts), ``_http`` (the Hub calls: ``_session``, ``_files``),
``_retries`` (backoff), ``_local_folder`` (manifest, fingerprints, partial files, the plan), ``_run``
(steps 4 to 7 at a resolved commit), ``_transfer`` (hashing in place, parallel fetch), ``_fetch``,
``_parts`` and ``_lanes`` (one file's transfer, ranged parts, connections), ``progress``
(the progress reports), ``integrity`` (digests).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from roost.errors import UserError
from roost.fslock import exclusive
from roost.hub._endpoint import resolve_endpoint, resolve_token
from roost.hub._http import HubClient, is_full_sha
from roost.hub._local_folder import (
    PATH_MAX,
    STATE_ROOM,
    Manifest,
    download_lock_path,
    free_bytes,
    load_manifest,
)
from roost.hub._retries import RetryPolicy
from roost.hub._run import run_download
from roost.hub.errors import local_disk_errors
from roost.hub.integrity import HubFile, default_hash_workers
from roost.hub.patterns import select
from roost.hub.progress import ProgressCallback
from roost.hub.spec import DownloadResult, DownloadSpec, FileRecord, is_ref_name, selection_key
from roost.inputs.files import kind_of
from roost.inputs.text import redact_url, shown
from roost.units import format_bytes

__all__ = [
    "DownloadResult",
    "DownloadSpec",
    "FileRecord",
    "RetryPolicy",
    "download_and_verify",
    "is_ref_name",
    "select_files",
    "selection_key",
    "usable_local_dir",
    "warm_selection",
    "warm_state_key",
]

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------ selection


def select_files(listing: Sequence[HubFile], spec: DownloadSpec) -> list[HubFile]:
    """The files of ``listing`` that the spec's allow/ignore patterns select (``roost.hub.patterns.select``:
    huggingface_hub's rules; a name no download directory can hold refuses the whole repository)."""
    return select(listing, spec.repo_id, spec.allow_patterns, spec.ignore_patterns)


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
    download_workers: int | None = None,
    hash_workers: int | None = None,
    retry: RetryPolicy | None = None,
    transfer: Literal["auto", "http"] = "http",
) -> DownloadResult:
    """Fetch ``spec`` into ``local_dir``, verify every file against the Hub's listing, and record it.

    ``endpoint`` defaults to ``HF_ENDPOINT`` (read at call time) else huggingface.co; ``token`` to
    ``HF_TOKEN``. ``progress`` is called on this thread at most every ``progress_interval`` seconds.
    ``free_space(path)`` returns free bytes (inject it to test the preflight); ``margin_bytes`` defaults
    to max(512 MiB, 2% of what is left to fetch). ``download_workers`` bounds the connections (default
    16; roost starts with 2 and adds more while the aggregate throughput rises; 1: one connection, one
    request at a time). ``transfer="http"`` (the default) fetches every
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
    download_workers: int | None,
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
            everything, listing = _selected_listing(spec, commit, local_dir, client, manifest)
            return run_download(
                spec,
                commit,
                local_dir,
                client,
                manifest,
                everything,
                listing,
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


def _selected_listing(
    spec: DownloadSpec, commit: str, local_dir: Path, client: HubClient, manifest: Manifest | None
) -> tuple[list[HubFile], list[HubFile]]:
    """The commit's listing (the manifest's when it holds this commit's: a commit's listing never
    changes) and the files of it the spec selects; a UserError when none is, or when a path would not fit
    under ``local_dir``."""
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
    return everything, listing


def _cached_result(
    spec: DownloadSpec,
    manifest: Manifest,
    selected: Sequence[HubFile],
    local_dir: Path,
    endpoint: str,
    t0: float,
) -> DownloadResult:
    files = [
        FileRecord.of(f, manifest.verified[f.path].sha256, manifest.verified[f.path].git_oid, "cache")
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
