"""Files that readers see whole or not at all, and never overwritten unless asked.

Each file is written to a hidden temporary file in the same directory (``.<name>.<random>.tmp``),
fsynced, then hard-linked to its final name (which fails rather than overwrite) and the temporary
removed, so a crash leaves either the complete file or an invisible temporary, never a torn file.
Parquet readers (pyarrow, pandas) skip names starting with ``.``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO

from roost.errors import RoostError


class AlreadyStored(RoostError):
    """The run (or file) is already in the store; the store never overwrites."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()
"""mkstemp makes 0600 files; stored results get the mode a plain open() would give them."""


def _write_fully(f: IO[bytes], data: bytes) -> None:
    f.write(data)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened/fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` so that readers see the whole file or nothing.

    Without ``overwrite`` an existing ``path`` is left untouched and ``AlreadyStored`` is raised.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            _write_fully(f, data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # atomic and never clobbers
            except FileExistsError:
                raise AlreadyStored(f"{path} already exists; the results store never overwrites a file") from None
            except OSError:  # a filesystem without hard links: still atomic, checked just before
                if path.exists():
                    raise AlreadyStored(f"{path} already exists; the results store never overwrites a file") from None
                os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: Path, text: str, *, overwrite: bool = False) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


