"""Where the audit reads a checkpoint's files from: a local directory, or what a Hub preflight fetched.

The audit (:func:`roost.checkpoint.model.read_checkpoint`) needs four things of a checkpoint: which
``*.safetensors`` files it has, the small metadata files (``config.json``, the index,
``hf_quant_config.json``), and each shard's header. :class:`CheckpointFiles` is that interface;
:class:`LocalFiles` answers it from a directory (one ``pread`` per header), and
:class:`FetchedFiles` from bytes already in memory — what :mod:`roost.hub.preflight` read over HTTP
(the header of each shard and its size, never tensor data). The same reading, checks and plan then
run on both, so a preflight from the Hub and the audit of the downloaded files give the same
findings and figures.

``location`` names the checkpoint in messages: the directory, or ``hf://OWNER/NAME@COMMIT``.

Reading a directory stays inside it: every file read (metadata or shard) is resolved, and one that
leads out of the checkpoint directory (a symlink, or a path through a symlinked subdirectory) is
refused by name. The one layout whose files legitimately point elsewhere is a Hugging Face cache
snapshot (``.../models--ORG--NAME/snapshots/<rev>/``, its files symlinks to ``../../blobs/<hash>``):
there the repository's cache directory (``models--ORG--NAME``) is the boundary. Metadata files are
read as regular files only (a directory or a FIFO in their place is named, never waited on) and
bounded in size (``SMALL_FILE_LIMITS``); the parsers hold bytes fetched from the Hub to the same limits.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from roost.checkpoint.safetensors_header import (
    INDEX_NAME,
    HeaderError,
    ShardHeader,
    parse_header,
    read_header,
)
from roost.errors import UserError
from roost.inputs.files import kind_of, open_error, read_regular
from roost.inputs.text import shown

CONFIG_NAME = "config.json"
QUANT_CONFIG_NAME = "hf_quant_config.json"
METADATA_NAMES = (CONFIG_NAME, INDEX_NAME, QUANT_CONFIG_NAME)
"""The small files the audit reads besides the shard headers."""

MiB = 1 << 20
CONFIG_LIMIT = 16 * MiB
"""Largest ``config.json`` / ``hf_quant_config.json`` read: real ones are a few KB (a vision model's
label map brings one to ~1 MB); 16 MiB is far beyond any, and small enough to parse at once."""
INDEX_LIMIT = 64 * MiB
"""Largest index read: a 31k-tensor index is ~3 MB and DeepSeek-V3's 91k-tensor one ~9 MB."""
SMALL_FILE_LIMITS = {CONFIG_NAME: CONFIG_LIMIT, QUANT_CONFIG_NAME: CONFIG_LIMIT, INDEX_NAME: INDEX_LIMIT}


def too_large(where: str, size: int, limit: int) -> UserError:
    """The UserError for a metadata file larger than roost reads (local or fetched)."""
    return UserError(f"{shown(where)}: {size:,} bytes, more than the {limit:,} a checkpoint's metadata file may "
                     "hold; the file is corrupt or not a checkpoint's — re-download it")


def containment_root(model_dir: Path) -> Path:
    """The directory a checkpoint's files must resolve into: the checkpoint directory itself, or, for a
    Hugging Face cache snapshot (``.../models--ORG--NAME/snapshots/<rev>``), the repository's cache
    directory (``models--ORG--NAME``, whose ``blobs/`` the snapshot's symlinks point into)."""
    real = Path(os.path.realpath(model_dir))
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real.parent.parent
    return real


class CheckpointFiles(Protocol):
    """The files of one checkpoint as the audit reads them (top-level files only)."""

    @property
    def location(self) -> str:
        """The checkpoint in messages: a directory path or ``hf://OWNER/NAME@COMMIT``."""
        ...

    @property
    def name(self) -> str:
        """The default served model name (the directory's or the repository's name)."""
        ...

    def shard_names(self) -> list[str]:
        """The ``*.safetensors`` files present, sorted."""
        ...

    def has(self, name: str) -> bool:
        """Whether the top-level file ``name`` is present."""
        ...

    def read_small(self, name: str) -> bytes | None:
        """The bytes of a small metadata file (``METADATA_NAMES``), None when absent."""
        ...

    def read_headers(self, names: Sequence[str]) -> list[ShardHeader]:
        """The validated header of each shard in ``names`` (present ones), in that order."""
        ...

    def where(self, name: str) -> str:
        """How a message names the file ``name`` of this checkpoint."""
        ...


class LocalFiles:
    """A checkpoint directory on this machine (files read stay inside it: :func:`containment_root`)."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = Path(model_dir)
        self._root: Path | None = None

    @property
    def location(self) -> str:
        return str(self.model_dir)

    @property
    def name(self) -> str:
        """The directory's name; for a Hugging Face cache snapshot the repository's (``org--name``, as a
        preflight and a download name it), not the revision's hash."""
        real = Path(os.path.realpath(self.model_dir))
        root = containment_root(self.model_dir)
        return root.name.removeprefix("models--") if root != real else real.name

    def check(self) -> None:
        """Raise the UserError saying why this is not a checkpoint directory, if it is not one."""
        d = self.model_dir
        if not d.exists():
            raise UserError(f"{d}: no such directory; pass the checkpoint directory (config.json + *.safetensors)")
        if not d.is_dir():
            raise UserError(f"{d}: not a directory; pass the checkpoint directory, not a file")
        if not self.shard_names() and not (d / CONFIG_NAME).exists() and not (d / INDEX_NAME).exists():
            raise UserError(f"{d}: empty checkpoint directory (no config.json, no *.safetensors); download the model first")

    def shard_names(self) -> list[str]:
        """The ``*.safetensors`` files (vLLM loads every one); one that is not a regular file (a directory,
        a FIFO, a dangling symlink) is a UserError naming it."""
        try:
            with os.scandir(self.model_dir) as it:
                names = sorted(e.name for e in it if e.name.endswith(".safetensors"))
        except OSError as exc:
            raise open_error(self.model_dir, exc, "pass a readable checkpoint directory") from None
        remedy = "vLLM would fail to load it — re-download the shard or remove the link"
        for n in names:
            path = self.model_dir / n
            try:
                os.stat(path)
            except FileNotFoundError:  # listed, so a symlink whose target is gone
                raise UserError(f"{shown(str(path))}: a symlink to nothing; {remedy}") from None
            except OSError as exc:
                raise open_error(path, exc, remedy) from None
            self.has(n)  # a directory, a FIFO... in its place: named
        return names

    def has(self, name: str) -> bool:
        """Whether the regular file ``name`` is there (False when absent or a dangling symlink); something
        else in its place (a directory, a FIFO...) is a UserError saying what it is."""
        path = self.model_dir / name
        try:
            st = os.stat(path)
        except (OSError, ValueError):  # absent, a dangling link, a name no file can have...
            return False
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{shown(str(path))} is {kind_of(st.st_mode)}, not a regular file: a shard must be a "
                            "file; re-download it")
        return True

    def read_small(self, name: str) -> bytes | None:
        """The file's bytes (None when there is no such entry); a directory, a FIFO, a file over its
        limit or a symlink leading out of the checkpoint is a UserError naming it."""
        path = self.model_dir / name
        try:
            os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise open_error(path, exc, f"make {name} a readable file or remove it") from None
        self.check_inside(name)
        return read_regular(path, limit=SMALL_FILE_LIMITS.get(name, CONFIG_LIMIT), what=name,
                            remedy=f"replace it with the checkpoint's {name} (re-download it)")

    def read_headers(self, names: Sequence[str]) -> list[ShardHeader]:
        out = []
        for n in names:
            self.check_inside(n)
            out.append(read_header(self.model_dir / n))
        return out

    def check_inside(self, name: str) -> None:
        """Refuse ``name`` when it resolves (through symlinks) outside the checkpoint (:func:`containment_root`)."""
        if self._root is None:
            self._root = containment_root(self.model_dir)
        path = self.model_dir / name
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(self._root):
            raise UserError(
                f"{shown(str(path))}: leads to {shown(str(target))}, outside the checkpoint directory "
                f"{shown(str(self._root))}; refusing to read it — copy the file into the checkpoint or remove the link"
            )

    def where(self, name: str) -> str:
        return str(self.model_dir / name)


@dataclass(frozen=True, slots=True)
class RemoteShard:
    """What a preflight read of one shard: its size and the raw JSON of its header."""

    size: int
    header: bytes


@dataclass(frozen=True)
class FetchedFiles:
    """A checkpoint's files as a Hub preflight read them: small files whole, shards by their headers.

    ``files`` lists every top-level file of the selection (name -> size), ``small`` holds the bytes of
    the metadata files fetched, ``shards`` the header of each ``*.safetensors`` file read.
    """

    location: str
    name: str
    files: Mapping[str, int]
    small: Mapping[str, bytes] = field(default_factory=dict)
    shards: Mapping[str, RemoteShard] = field(default_factory=dict)

    def shard_names(self) -> list[str]:
        return sorted(n for n in self.files if n.endswith(".safetensors"))

    def has(self, name: str) -> bool:
        return name in self.files

    def read_small(self, name: str) -> bytes | None:
        return self.small.get(name)

    def read_headers(self, names: Sequence[str]) -> list[ShardHeader]:
        out = []
        for n in names:
            shard = self.shards.get(n)
            if shard is None:  # pragma: no cover - the preflight reads every shard it lists
                raise HeaderError(f"{self.where(n)}: the preflight did not read this shard's header")
            out.append(parse_header(self.where(n), shard.header, shard.size))
        return out

    def where(self, name: str) -> str:
        return f"{self.location}/{name}"
