"""What a Hub answered, checked at one place: the "servers answered" boundary of the Hub.

Every JSON answer roost reads from a Hub (the refs of a repository, a revision's info, a tree listing)
is read here: bounded in size (:data:`MAX_ANSWER_BYTES`) and depth (``roost.inputs.jsondoc``), then
validated into typed models. A value that does not fit is refused with one :class:`BadAnswer`
naming the field (``[3].size``, ``branches[0].targetCommit``), the value (as
``roost.inputs.text.shown`` echoes it) and why; ``roost.hub._http.HubClient`` turns it into the
``UserError`` (exit 2) naming the endpoint and the call: a server that answers so is not a usable Hub,
or the repository is not one roost can download safely.

What is refused:

- anything that is not JSON, or JSON of the wrong shape (``null``, a list for an object, ...);
- a commit sha that is not 40 hex digits, a git blob id that is not 40 hex, an LFS sha256 that is not 64;
- a size that is not a whole number (``"12"``, ``1.5``, ``true``), negative, or beyond
  :data:`MAX_FILE_BYTES`, or an LFS size that disagrees with the file's;
- a file name that is empty, absolute, has an empty, ``.`` or ``..`` component, a control character
  (NUL, newline, escape...), a component longer than the filesystem allows (255 bytes) or is not
  valid UTF-8 (:func:`repo_path_fault`; the same check guards names read back from the manifest);
- a listing naming one path twice, or a path both as a file and as a directory of another file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from roost.inputs.jsondoc import parse_json

MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""Largest API answer read (a tree page of 1,000 entries is ~300 kB; refs are a few kB)."""
MAX_FILE_BYTES = 1 << 40
"""Largest file size believed (1 TiB; the Hub stores files of at most a few hundred GB)."""
MAX_NAME_BYTES = 255
"""Longest path component a Linux filesystem takes (NAME_MAX)."""
MAX_PATH_BYTES = 1024
"""Longest repository path taken (the Hub's own paths are far shorter)."""

_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadAnswer(Exception):
    """A Hub answer that does not fit: ``field`` (a JSON path), what was found and why it is refused."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


def repo_path_fault(path: str) -> str | None:
    """Why ``path`` cannot be a file of a download directory, or None when it can."""
    if not path:
        return "is empty"
    if _CONTROL.search(path):
        return "holds a control character (NUL, newline, escape...)"
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if len(raw) > MAX_PATH_BYTES:
        return f"is {len(raw):,} bytes long, more than {MAX_PATH_BYTES:,}"
    if path.startswith("/"):
        return "is absolute"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component (it would land outside the download directory)"
    if any(len(p.encode("utf-8")) > MAX_NAME_BYTES for p in parts):
        return f"has a component longer than {MAX_NAME_BYTES} bytes"
    return None


def _repo_path(value: str) -> str:
    fault = repo_path_fault(value)
    if fault is not None:
        raise ValueError(f"a file name that {fault}")
    return value


def _hex(pattern: re.Pattern[str], what: str) -> Any:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"not {what}")
        return value.lower()

    return check


def _size(value: int) -> int:
    if not 0 <= value <= MAX_FILE_BYTES:
        raise ValueError(f"a size outside 0..{MAX_FILE_BYTES:,} bytes")
    return value


CommitSha = Annotated[StrictStr, AfterValidator(_hex(_HEX40, "a 40-hex commit sha"))]
BlobId = Annotated[StrictStr, AfterValidator(_hex(_HEX40, "a 40-hex git blob id"))]
Sha256 = Annotated[StrictStr, AfterValidator(_hex(_HEX64, "a 64-hex sha256"))]
FileSize = Annotated[StrictInt, AfterValidator(_size)]
RepoPath = Annotated[StrictStr, AfterValidator(_repo_path)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class GitRef(_Answer):
    """A branch or tag of ``/api/models/<repo>/refs``."""

    name: StrictStr
    targetCommit: CommitSha  # the Hub's field name


class Refs(_Answer):
    """``/api/models/<repo>/refs``: branches and tags, each pointing at a commit."""

    branches: list[GitRef] = Field(default_factory=list)
    tags: list[GitRef] = Field(default_factory=list)


class RevisionInfo(_Answer):
    """``/api/models/<repo>/revision/<rev>``: the commit the revision is (the rest is not read)."""

    sha: CommitSha


class LfsInfo(_Answer):
    oid: Sha256
    size: FileSize | None = None


class TreeFile(_Answer):
    """A ``"type": "file"`` entry of ``/api/models/<repo>/tree/<commit>``."""

    path: RepoPath
    size: FileSize
    oid: BlobId
    lfs: LfsInfo | None = None
    xetHash: StrictStr | None = None  # the Hub's field name


class _TreeEntry(_Answer):
    type: StrictStr
    path: StrictStr


def _json_type(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else type(value).__name__


def _where(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _reason(exc: ValidationError) -> BadAnswer:
    """The first problem pydantic found, as a field and a reason (the value echoed, shortened)."""
    from roost.inputs.text import shown

    err = exc.errors(include_url=False)[0]
    if err["type"] == "missing":
        return BadAnswer(_where(err["loc"]), "missing")
    msg = str(err["msg"]).removeprefix("Value error, ")
    value = shown(repr(err.get("input")), 80)
    if msg.startswith(("a ", "not ")):  # this module's own sentences
        return BadAnswer(_where(err["loc"]), f"{value} is {msg}")
    return BadAnswer(_where(err["loc"]), f"{value}: {msg[0].lower()}{msg[1:]}")


def _model(model: type[BaseModel], value: Any, prefix: str = "") -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        bad = _reason(exc)
        raise BadAnswer(prefix + (("." if prefix and not bad.field.startswith("[") else "") + bad.field),
                        bad.reason) from None


def decode(raw: bytes) -> Any:
    """The JSON value of an answer's body (a BadAnswer when it is not JSON)."""
    from roost.errors import UserError

    try:
        return parse_json(raw, "answer", "")
    except UserError as exc:
        raise BadAnswer("", str(exc).removeprefix("answer: ").removesuffix("; ")) from None


def refs(value: Any) -> Refs:
    if not isinstance(value, dict):
        raise BadAnswer("", f"{_json_type(value)}, not an object with branches and tags")
    return _model(Refs, value)  # type: ignore[no-any-return]


def revision_info(value: Any) -> RevisionInfo:
    if not isinstance(value, dict):
        raise BadAnswer("", f"{_json_type(value)}, not an object with the commit sha")
    return _model(RevisionInfo, value)  # type: ignore[no-any-return]


def tree_page(value: Any, offset: int = 0) -> list[TreeFile]:
    """The files of one page of a tree listing (directories are left out); ``offset`` numbers the
    entries of later pages on from the earlier ones."""
    if not isinstance(value, list):
        raise BadAnswer("", f"{_json_type(value)}, not a list of files")
    files: list[TreeFile] = []
    for i, item in enumerate(value, start=offset):
        if not isinstance(item, dict):
            raise BadAnswer(f"[{i}]", f"{_json_type(item)}, not an object")
        entry = _model(_TreeEntry, item, f"[{i}]")
        if entry.type == "file":
            f = _model(TreeFile, item, f"[{i}]")
            if f.lfs is not None and f.lfs.size is not None and f.lfs.size != f.size:
                raise BadAnswer(f"[{i}].lfs.size", f"{f.lfs.size} disagrees with the file's size {f.size}")
            files.append(f)
    return files


def check_listing(files: Sequence[TreeFile]) -> None:
    """A whole listing: no path twice, no path that is a file and a directory of another file."""
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise BadAnswer("", f"the listing names {f.path!r} twice")
        seen.add(f.path)
    for f in files:
        parts = f.path.split("/")
        for k in range(1, len(parts)):
            parent = "/".join(parts[:k])
            if parent in seen:
                raise BadAnswer("", f"the listing has {parent!r} both as a file and as the directory of {f.path!r}")
