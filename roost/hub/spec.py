"""What a download asks for and what it established: the download stage's input and output.

- :class:`DownloadSpec`: a repo, a revision (checked as git checks a ref name: :func:`is_ref_name`) and
  the allow/ignore patterns of the model profile (``roost.hub.patterns`` by default);
- :class:`FileRecord`: one verified file, where it is, what it hashes to and how this run got it
  (``cache``, ``disk`` or ``download``);
- :class:`DownloadResult`: what ``roost download --json`` prints and the download task returns.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from roost.hub.integrity import FileDigest, HubFile
from roost.hub.patterns import DEFAULT_ALLOW_PATTERNS, DEFAULT_IGNORE_PATTERNS
from roost.inputs.text import shown
from roost.units import format_bytes, format_seconds

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

    @classmethod
    def of(
        cls, f: HubFile, sha256: str, git_oid: str | None, source: Source, resumed: int = 0,
        corrupt_copy: str | None = None,
    ) -> FileRecord:
        """The record of ``f``, verified with these digests."""
        return cls(
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

    @classmethod
    def hashed(
        cls, f: HubFile, digest: FileDigest, source: Source, resumed: int = 0, corrupt_copy: str | None = None
    ) -> FileRecord:
        """The record of ``f`` as hashing found it (the git blob id kept for a non-LFS file only)."""
        return cls.of(f, digest.sha256, None if f.lfs else digest.git_sha1, source, resumed, corrupt_copy)


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
