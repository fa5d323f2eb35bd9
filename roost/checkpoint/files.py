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
"""

from __future__ import annotations

import os
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

CONFIG_NAME = "config.json"
QUANT_CONFIG_NAME = "hf_quant_config.json"
METADATA_NAMES = (CONFIG_NAME, INDEX_NAME, QUANT_CONFIG_NAME)
"""The small files the audit reads besides the shard headers."""


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
    """A checkpoint directory on this machine."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = Path(model_dir)

    @property
    def location(self) -> str:
        return str(self.model_dir)

    @property
    def name(self) -> str:
        return self.model_dir.resolve().name

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
        with os.scandir(self.model_dir) as it:
            return sorted(e.name for e in it if e.name.endswith(".safetensors") and e.is_file())

    def has(self, name: str) -> bool:
        return (self.model_dir / name).is_file()

    def read_small(self, name: str) -> bytes | None:
        path = self.model_dir / name
        if not path.is_file():
            return None
        return path.read_bytes()

    def read_headers(self, names: Sequence[str]) -> list[ShardHeader]:
        return [read_header(self.model_dir / n) for n in names]

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
