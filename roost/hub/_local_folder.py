"""What lives in a download directory besides the repository's files, and what to do with each file.

    <local_dir>/<path in the repo>                     the files, where vLLM reads them
    <local_dir>/.roost/download.json                   the manifest (:class:`Manifest`)
    <local_dir>/.roost/partial/<expected digest>.part  an interrupted transfer, resumed from its end
    <local_dir>/.roost/partial/<...>.part.chunks       its parts done, for a transfer in ranged parts
    <local_dir>/.roost/download.lock                   held by the one process downloading here (``roost.fslock``)
    <local_dir>/.roost/corrupt/<path>.corrupt-<UTC>    a verified file found changed, set aside (:func:`set_aside`)

The manifest names the commit the directory holds, the Hub's listing at that commit, and for each
verified file its expected digest and **fingerprint** ``(size, mtime_ns, inode, ctime_ns)``: a file
whose fingerprint is unchanged since roost verified it is never hashed again. Any write to a file
moves its ctime, which no user-space call can set back (``touch``/``os.utime`` set mtime and atime
only), so a change of the same size with the mtime restored is hashed and caught too; a change below
the filesystem (bit rot, a raw write to the device) is not, short of hashing every file again.
Every path in the directory roost writes or hashes is resolved first (:func:`inside`): a file name, or
a symlink in the directory, that would lead outside it is refused. :func:`plan_local_files`
sorts the selected files into cached (verified, unchanged), to hash in place (on disk, right size,
not known to be verified), to fetch, and mismatches (verified once, since changed in size).
A verified file found changed (in size here, or in content once hashed) is corrupt: it is never
deleted nor overwritten, but moved to ``.roost/corrupt/`` (:func:`set_aside`) and fetched again.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from roost.errors import UserError
from roost.hub._parts import resumable_prefix
from roost.hub.integrity import FileDigest, HubFile, Mismatch, hash_file
from roost.inputs.files import kind_of
from roost.inputs.text import shown

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
PATH_MAX = 4096
"""Longest path the kernel opens, in bytes (with its NUL)."""
STATE_ROOM = 100
"""Bytes roost's own files add to the download directory's path (``.roost/partial/<sha256>.part``)."""


def state_dir(local_dir: Path) -> Path:
    """roost's own bookkeeping inside a download directory (manifest, partial transfers)."""
    return local_dir / ".roost"


def manifest_path(local_dir: Path) -> Path:
    return state_dir(local_dir) / "download.json"


def download_lock_path(local_dir: Path) -> Path:
    """Held by the one process downloading into ``local_dir`` (``roost.fslock``)."""
    return state_dir(local_dir) / "download.lock"


def partial_dir(local_dir: Path) -> Path:
    """Where interrupted transfers wait to be resumed (removed once empty)."""
    return state_dir(local_dir) / "partial"


def partial_path(local_dir: Path, f: HubFile) -> Path:
    """The partial file of ``f``, named by its expected digest (so another commit's file never resumes it)."""
    return partial_dir(local_dir) / (f.expected_digest.replace(":", "-") + ".part")


def partial_size(local_dir: Path, f: HubFile) -> int:
    """Bytes of ``f`` already fetched by an interrupted transfer (at most its size): its partial file's
    length, or for a transfer in ranged parts the contiguous prefix of parts its sidecar records done."""
    return resumable_prefix(partial_path(local_dir, f), f.size)


def corrupt_dir(local_dir: Path) -> Path:
    """Where verified files found changed are set aside (:func:`set_aside`); roost never empties it."""
    return state_dir(local_dir) / "corrupt"


def set_aside(local_dir: Path, rel: str, now: dt.datetime | None = None) -> Path:
    """Move ``local_dir/rel``, a file roost verified that no longer matches, to
    ``.roost/corrupt/<rel>.corrupt-<UTC timestamp>`` (never over another file) and return where it went.

    A rename in the same directory tree: the bytes are kept as they were found, for whoever wants to
    see what changed them; the repository's file can then be fetched anew in its place."""
    src = inside(local_dir, rel)
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    base = f"{rel}.corrupt-{stamp}"
    dest, n = corrupt_dir(local_dir) / base, 1
    while os.path.lexists(dest):
        n += 1
        dest = corrupt_dir(local_dir) / f"{base}-{n}"
    dest = inside(local_dir, dest.relative_to(local_dir).as_posix())  # .roost/ leading outside is refused
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dest)
    return dest


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return shutil.disk_usage("/").free  # pragma: no cover


def inside(local_dir: Path, rel: str) -> Path:
    """``local_dir / rel`` when it resolves (symlinks followed) to a path inside ``local_dir`` (itself
    resolved) and is a regular file or absent; a UserError naming it otherwise."""
    dest = local_dir / rel
    try:
        real = dest.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise UserError(f"{shown(str(dest), 200)} cannot be resolved ({shown(str(exc), 80)}): remove it or choose "
                        "another --local-dir") from None
    if not real.is_relative_to(local_dir):
        raise UserError(
            f"{shown(rel)} would be written or read at {shown(str(real), 160)}, outside {shown(str(local_dir), 160)} "
            "(a symlink in the download directory leads there): remove that symlink or choose another --local-dir"
        )
    try:
        mode = os.stat(dest).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return dest
    if not stat.S_ISREG(mode):
        raise UserError(
            f"{shown(str(dest), 200)} is {kind_of(mode)}, where the repository has a file of that name: "
            "remove it or choose another --local-dir"
        )
    return dest


# ------------------------------------------------------------------------------------ fingerprints


class Fingerprint(BaseModel):
    """What must not change for a verified file to stay verified without hashing it again."""

    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int | None = Field(
        default=None, description="Moved by any write, never set back; None in manifests before it was kept."
    )

    @classmethod
    def of(cls, path: Path) -> Fingerprint:
        st = path.stat()
        return cls(size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino, ctime_ns=st.st_ctime_ns)

    @classmethod
    def maybe(cls, path: Path) -> Fingerprint | None:
        try:
            return cls.of(path)
        except (FileNotFoundError, NotADirectoryError):
            return None


def hash_in_place(
    local_dir: Path, f: HubFile, on_bytes: Callable[[int], None]
) -> tuple[FileDigest, Fingerprint]:
    """Hash ``local_dir/f.path`` as ``f`` must be checked (git blob id unless LFS), with its fingerprint."""
    path = local_dir / f.path
    fp = Fingerprint.of(path)  # before reading: a change while hashing shows up next run
    digest = hash_file(path, git_blob=not f.lfs, on_bytes=on_bytes)
    return digest, fp


# --------------------------------------------------------------------------------------- manifest


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


class ManifestWriter:
    """Keeps the manifest current as files verify; writes it atomically, at most every few seconds."""

    def __init__(self, local_dir: Path, manifest: Manifest, every_s: float = 2.0) -> None:
        self.local_dir = local_dir
        self.manifest = manifest
        self.every_s = every_s
        self._last = 0.0
        self._dirty = False

    def record(self, f: HubFile, digest: FileDigest, fp: Fingerprint) -> None:
        self.manifest.verified[f.path] = VerifiedEntry(
            expected=f.expected_digest,
            sha256=digest.sha256,
            git_oid=digest.git_sha1,
            fingerprint=fp,
            verified_at=dt.datetime.now(dt.UTC),
        )
        self._dirty = True
        if time.monotonic() - self._last >= self.every_s:
            self.flush()

    def forget(self, path: str) -> None:
        if self.manifest.verified.pop(path, None) is not None:
            self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            write_manifest(self.local_dir, self.manifest)
            self._dirty = False
        self._last = time.monotonic()


# ------------------------------------------------------------------------------------------- plan


@dataclass
class LocalPlan:
    """The selected files sorted by what the directory already holds of them."""

    cached: list[HubFile] = field(default_factory=list)
    to_hash: list[HubFile] = field(default_factory=list)
    to_fetch: list[HubFile] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)


def changed_after_verified(entry: VerifiedEntry) -> str:
    """The note a mismatch carries when roost had verified the file before."""
    return f"changed on disk after roost verified it at {entry.verified_at:%Y-%m-%d %H:%M:%S}Z"


def plan_local_files(
    local_dir: Path, listing: Sequence[HubFile], verified: dict[str, VerifiedEntry]
) -> LocalPlan:
    """Sort ``listing`` by what ``local_dir`` holds: cached, to hash in place, to fetch, or changed size.

    Each file's place is resolved first (:func:`inside`): one that leads outside ``local_dir`` or is
    not a regular file is a UserError."""
    plan = LocalPlan()
    for f in listing:
        fp = Fingerprint.maybe(inside(local_dir, f.path))
        entry = verified.get(f.path)
        same_content = entry is not None and entry.expected == f.expected_digest
        if fp is not None and same_content and entry is not None and entry.fingerprint == fp:
            plan.cached.append(f)
        elif fp is not None and fp.size == f.size:
            plan.to_hash.append(f)
        elif fp is not None and same_content and entry is not None:
            plan.mismatches.append(
                Mismatch(
                    path=f.path,
                    field="size",
                    expected=f"{f.size} bytes",
                    found=f"{fp.size} bytes",
                    note=changed_after_verified(entry),
                )
            )
        else:
            plan.to_fetch.append(f)
    return plan
