"""A repository in huggingface_hub's cache, fetched through roost's Hub client (the evaluation datasets).

:func:`download_to_cache` lays a snapshot out as ``huggingface_hub.snapshot_download`` does, so a cache
huggingface_hub warmed (or roost, when its datasets went through huggingface_hub) is found as it is, and
one roost warms serves huggingface_hub::

    <cache>/datasets--<org>--<name>/refs/<revision>            the commit a branch or tag named when asked
    <cache>/datasets--<org>--<name>/blobs/<etag>               a file's bytes: named by its sha256 (LFS) or
                                                               its git blob id, as the Hub's ETag names it
    <cache>/datasets--<org>--<name>/snapshots/<commit>/<path>  a relative symlink to the blob (a copy where
                                                               the filesystem has no links)
    <cache>/datasets--<org>--<name>/trees/<commit>.json        the commit's listing (huggingface_hub's tree
                                                               cache, format 1)
    <cache>/.locks/datasets--<org>--<name>/<etag>.lock         held while the blob is written (flock, as
                                                               huggingface_hub's file lock)

(``models--`` and ``spaces--`` for the other repository types.) The cache directory and offline mode
are huggingface_hub's own settings (``HF_HUB_CACHE``, ``HF_HOME``..., ``HF_HUB_OFFLINE``), read from its
``constants`` as its own download reads them.

Online, the revision is resolved and the commit's files listed by :class:`~roost.hub._http.HubClient`,
the checkpoint download's client (answers bounded, validated and timed, transient faults retried with
backoff, the token kept out of every message); a listing the tree cache holds is not asked again. A file
the snapshot holds is taken as it is; a missing one is fetched over HTTP into ``blobs/<etag>.incomplete``
(an interrupted transfer resumed with ``Range``), checked against the listing (size, then sha256 or git
blob id: :class:`~roost.hub.integrity.IntegrityError` otherwise, and the bytes dropped), renamed to its
blob and linked.

Offline, or when the Hub refuses or does not answer while the revision is resolved, the cache answers
alone (as huggingface_hub falls back to it): the snapshot of ``refs/<revision>`` (or of the commit given)
when it holds every selected file of its tree listing. Otherwise :class:`NotInCache` (offline, or the
Hub did not answer) or the Hub's refusal (its ``UserError``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from roost.errors import UserError
from roost.fslock import exclusive
from roost.hub._endpoint import resolve_endpoint, resolve_token
from roost.hub._http import HubClient, is_full_sha
from roost.hub._retries import RetryPolicy
from roost.hub._session import RepoType
from roost.hub.errors import HubUnreachable
from roost.hub.integrity import ByteCounter, HubFile, IntegrityError, check_digest, hash_file
from roost.hub.patterns import select
from roost.hub.spec import is_ref_name
from roost.inputs.text import shown
from roost.settings import HF_HUB_OFFLINE
from roost.units import format_bytes

log = logging.getLogger(__name__)

TREE_FORMAT_VERSION = 1
"""huggingface_hub's tree cache format (``trees/<commit>.json``); another version is not read."""
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by roost (huggingface_hub's cache layout).\n"
    "# For information about cache directory tags, see:\n"
    "#\thttps://bford.info/cachedir/\n"
)
"""The Cache Directory Tagging Standard's tag, written once in the cache directory (backup tools skip it)."""


class CachedSnapshot(BaseModel):
    """A revision of a repository as the cache holds it."""

    repo_id: str
    repo_type: RepoType
    revision: str
    commit: str
    path: Path = Field(description="``snapshots/<commit>``: the selected files, at their paths in the repository.")
    fetched_bytes: int = Field(default=0, description="Bytes this call fetched from the Hub.")
    cache_only: bool = Field(default=False, description="The Hub was not asked (offline) or did not answer.")


class NotInCache(UserError):
    """Offline, or the Hub did not answer, and the cache does not hold the revision's snapshot whole."""


def _hf_constants() -> tuple[Path, bool]:
    """huggingface_hub's cache directory (resolved) and offline mode, as its own download reads them."""
    from huggingface_hub import constants  # here, not at import: importing it parses HF_ENDPOINT

    return Path(constants.HF_HUB_CACHE).expanduser().resolve(), bool(constants.HF_HUB_OFFLINE)


@dataclass(frozen=True)
class RepoCache:
    """One repository's folder in the cache, and where each of its pieces lies."""

    root: Path
    """The cache directory (``HF_HUB_CACHE``)."""
    repo_id: str
    repo_type: RepoType

    @property
    def name(self) -> str:
        """``datasets--<org>--<name>`` (huggingface_hub's ``repo_folder_name``)."""
        return "--".join([f"{self.repo_type}s", *self.repo_id.split("/")])

    @property
    def folder(self) -> Path:
        return self.root / self.name

    def snapshot(self, commit: str) -> Path:
        return self.folder / "snapshots" / commit

    def blob(self, f: HubFile) -> Path:
        """Where ``f``'s bytes lie: named by its sha256 (LFS) or git blob id, the Hub's ETag for it."""
        return self.folder / "blobs" / (f.lfs_sha256 or f.blob_id)

    def lock(self, f: HubFile) -> Path:
        return self.root / ".locks" / self.name / f"{f.lfs_sha256 or f.blob_id}.lock"

    def read_ref(self, revision: str) -> str | None:
        """The commit ``refs/<revision>`` names (a full sha is its own), None when the cache has no such ref."""
        if is_full_sha(revision):
            return revision
        try:
            commit = (self.folder / "refs" / revision).read_text().strip()
        except OSError:
            return None
        return commit if is_full_sha(commit) else None

    def write_ref(self, revision: str, commit: str) -> None:
        """Record what ``revision`` (a branch, a tag) names now, atomically; nothing for a commit itself."""
        if revision == commit:
            return
        ref = self.folder / "refs" / revision
        try:
            if ref.is_file() and ref.read_text() == commit:
                return
            ref.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(ref, commit)
        except OSError as exc:  # a read-only cache still serves what it holds
            log.warning("could not record %s@%s in %s: %s", self.repo_id, revision, ref, exc)

    def read_tree(self, commit: str) -> list[HubFile] | None:
        """The listing the tree cache holds for ``commit``; None when it holds none it can read."""
        path = self.folder / "trees" / f"{commit}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format_version") != TREE_FORMAT_VERSION:
                return None
            return [HubFile(path=name, size=e["size"], blob_id=e["blob_id"], lfs_sha256=e.get("lfs_sha256"),
                            xet_hash=e.get("xet_hash")) for name, e in data["files"].items()]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring the unreadable tree cache %s (%s)", path, shown(str(exc), 120))
            return None

    def write_tree(self, commit: str, listing: Sequence[HubFile]) -> None:
        """Keep ``commit``'s listing (it never changes), in huggingface_hub's format."""
        files: dict[str, dict[str, object]] = {}
        for f in sorted(listing, key=lambda f: f.path):
            entry: dict[str, object] = {"size": f.size, "blob_id": f.blob_id}
            if f.lfs_sha256 is not None:
                entry.update(lfs_sha256=f.lfs_sha256, lfs_size=f.size)
            if f.xet_hash is not None:
                entry["xet_hash"] = f.xet_hash
            files[f.path] = entry
        path = self.folder / "trees" / f"{commit}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, json.dumps({"format_version": TREE_FORMAT_VERSION, "files": files}, indent=1))
        except OSError as exc:
            log.warning("could not keep the listing of %s@%s in %s: %s", self.repo_id, commit[:12], path, exc)

    def holds(self, commit: str, allow: Sequence[str] | None, ignore: Sequence[str] | None) -> bool:
        """The snapshot of ``commit`` is there, with every selected file of its tree listing (when the
        tree cache has none, the snapshot is taken as it is, as huggingface_hub does)."""
        snapshot = self.snapshot(commit)
        if not snapshot.is_dir():
            return False
        listing = self.read_tree(commit)
        if listing is None:
            return True
        return all((snapshot / f.path).is_file() for f in select(listing, self.repo_id, allow, ignore))


def _write_atomically(path: Path, text: str) -> None:
    """``path`` holding ``text``: written beside it (with the umask's permissions, as huggingface_hub
    writes a ref), then renamed, so a reader never sees half of it."""
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


ASK_ONCE = RetryPolicy(attempts=1, unanswered_attempts=1)
"""The revision and the listing are asked once, as huggingface_hub asks them: a Hub that does not answer
leaves the answer to the cache at once (an evaluation whose dataset is cached does not wait out retries,
and says so in one line). The files themselves are fetched with the checkpoints' retries."""


def download_to_cache(
    repo_id: str,
    *,
    repo_type: RepoType = "dataset",
    revision: str = "main",
    allow_patterns: Sequence[str] | None = None,
    ignore_patterns: Sequence[str] | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    stage: str = "download",
    retry: RetryPolicy | None = None,
) -> CachedSnapshot:
    """The files of ``repo_id`` at ``revision`` that the patterns select, in the cache (fetched when
    missing): the snapshot directory and the commit.

    ``endpoint`` and ``token`` as for a checkpoint (``HF_ENDPOINT``, ``HF_TOKEN``... checked first);
    ``stage`` names the stage in a fault that outlasted its retries. Raises UserError (a refusal of the
    Hub, a revision git would not accept), :class:`NotInCache`, IntegrityError (a file as fetched does not
    match the listing), CheckFailed (the server states another size), HubUnreachable (a fetch outlasted its
    retries).
    """
    endpoint = resolve_endpoint(endpoint)
    if not is_ref_name(revision):
        raise UserError(f"revision {shown(revision, 80)!r} of {repo_id} is not a branch, tag or commit git would "
                        "accept (no '..', spaces, control characters or ~^:?*[\\; at most 255 characters)")
    root, offline = _hf_constants()
    cache = RepoCache(root, repo_id, repo_type)
    if offline:
        return _from_cache(cache, revision, allow_patterns, ignore_patterns, cause=None)
    ask = HubClient(endpoint, resolve_token(token), policy=retry or ASK_ONCE, stage=stage, repo_type=repo_type)
    try:
        commit = ask.resolve(repo_id, revision, by_refs=False)  # as huggingface_hub resolves it
        listing = cache.read_tree(commit)
        if listing is None:
            listing = ask.list_files(repo_id, commit)
            cache.write_tree(commit, listing)
    except (HubUnreachable, UserError) as exc:  # as huggingface_hub: the cache may hold it
        return _from_cache(cache, revision, allow_patterns, ignore_patterns, cause=exc)
    finally:
        ask.close()
    selected = select(listing, repo_id, allow_patterns, ignore_patterns)
    client = HubClient(endpoint, resolve_token(token), policy=retry, stage=stage, repo_type=repo_type)
    try:
        cache.write_ref(revision, commit)
        fetched = _fill_snapshot(client, cache, commit, selected)
    finally:
        client.close()
    return CachedSnapshot(repo_id=repo_id, repo_type=repo_type, revision=revision, commit=commit,
                          path=cache.snapshot(commit), fetched_bytes=fetched)


def _from_cache(cache: RepoCache, revision: str, allow: Sequence[str] | None, ignore: Sequence[str] | None, *,
                cause: HubUnreachable | UserError | None) -> CachedSnapshot:
    """The snapshot the cache holds for ``revision``, the Hub not asked (``cause`` None: offline) or having
    failed with ``cause``; that refusal, or :class:`NotInCache`, when the cache does not hold it whole."""
    commit = cache.read_ref(revision)
    if commit is not None and cache.holds(commit, allow, ignore):
        if cause is not None:
            log.warning("%s@%s: using the snapshot the cache holds (%s): %s", cache.repo_id, revision, commit[:12],
                        shown(str(cause), 300))
        return CachedSnapshot(repo_id=cache.repo_id, repo_type=cache.repo_type, revision=revision, commit=commit,
                              path=cache.snapshot(commit), cache_only=True)
    if isinstance(cause, UserError):
        raise cause
    why = f"{HF_HUB_OFFLINE} is set" if cause is None else f"the Hub did not answer ({cause})"
    raise NotInCache(f"{cache.repo_id}@{revision} is not in the Hub cache ({cache.folder}) and {why}") from cause


def _fill_snapshot(client: HubClient, cache: RepoCache, commit: str, selected: Sequence[HubFile]) -> int:
    """Each selected file in the snapshot of ``commit`` (its blob fetched when missing); the bytes fetched."""
    snapshot = cache.snapshot(commit)
    missing = [f for f in selected if not os.path.exists(snapshot / f.path)]
    if not missing:
        return 0
    with contextlib.suppress(OSError):
        if not (cache.root / "CACHEDIR.TAG").exists():
            cache.root.mkdir(parents=True, exist_ok=True)
            (cache.root / "CACHEDIR.TAG").write_text(CACHEDIR_TAG)
    log.info("%s@%s: fetching %d of %d files (%s) into %s", cache.repo_id, commit[:12], len(missing), len(selected),
             format_bytes(sum(f.size for f in missing)), snapshot)
    fetched = 0
    for f in missing:
        pointer = snapshot / f.path
        blob = cache.blob(f)
        with exclusive(cache.lock(f)):  # one writer of a blob at a time, huggingface_hub included
            if not blob.exists():
                fetched += _fetch_blob(client, cache, commit, f, blob)
            if not os.path.exists(pointer):
                _link(blob, pointer)
    return fetched


def _fetch_blob(client: HubClient, cache: RepoCache, commit: str, f: HubFile, blob: Path) -> int:
    """``f`` fetched into ``blob`` (through ``<blob>.incomplete``, resumed), verified first; the bytes fetched."""
    incomplete = blob.with_name(blob.name + ".incomplete")
    incomplete.parent.mkdir(parents=True, exist_ok=True)
    incomplete.touch()  # an empty file needs no request, but a file to rename
    url = client.file_url(cache.repo_id, commit, f.path)
    counted = ByteCounter()
    stop = threading.Event()  # one transfer at a time: nothing else stops it
    client.retry(
        lambda: client.fetch_http(url, incomplete, f.size, counted.add, stop, f.path),
        what=f"fetching {f.path}",
        ctx=client.context(cache.repo_id, commit, f.path),
        progress_marker=lambda: incomplete.stat().st_size if incomplete.exists() else 0,
    )
    mismatch = check_digest(f, hash_file(incomplete, git_blob=not f.lfs), note="as fetched")
    if mismatch is not None:
        incomplete.unlink(missing_ok=True)
        raise IntegrityError([mismatch], "the fetched bytes do not match the Hub's listing; run again to fetch the "
                                         "file anew")
    os.replace(incomplete, blob)
    return counted.value


def _link(blob: Path, pointer: Path) -> None:
    """``pointer`` (in the snapshot) a relative symlink to ``blob``; a copy where links cannot be made."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.unlink(missing_ok=True)  # a link to a blob that is gone
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    except OSError:
        shutil.copyfile(blob, pointer)
