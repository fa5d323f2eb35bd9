"""Reading a file given by a user or found in a checkpoint: regular files only, bounded in size and time.

``open(2)`` on a FIFO blocks until a writer appears and ``/dev/zero`` never ends; both are refused
here before a byte is read. The file is opened with ``O_NONBLOCK`` (a FIFO opens at once instead of
waiting), ``fstat`` on the open descriptor decides (no race between checking and reading), and at
most ``limit`` bytes are read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from roost.errors import UserError
from roost.inputs.text import shown

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words (``a directory``, ``a FIFO (named pipe)``...)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_error(path: Path | str, exc: OSError, remedy: str) -> UserError:
    """The UserError for an ``OSError`` met opening ``path`` (missing, too long, not permitted...)."""
    where = shown(str(path))
    if exc.errno == errno.ENOENT:
        return UserError(f"{where}: not found; {remedy}")
    if exc.errno == errno.ENAMETOOLONG:
        return UserError(f"{shown(str(path), 120)}: path too long for this system; {remedy}")
    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
        return UserError(f"{where}: not reachable ({exc.strerror}); {remedy}")
    return UserError(f"{where}: cannot read ({exc.strerror}); {remedy}")


def _open_regular(path: Path | str, what: str, remedy: str) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` and its ``fstat``, when it is a regular file (closed otherwise).
    ``O_NONBLOCK``: opening a FIFO returns at once instead of waiting for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise open_error(path, exc, remedy) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UserError(f"{shown(str(path))} is {kind_of(st.st_mode)}, not a regular file: {what} must be a file; {remedy}")
    return fd, st


def read_regular(path: Path | str, *, limit: int, what: str, remedy: str = "pass a regular file") -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (a UserError otherwise).

    ``what`` names the file's role in messages (``the server log``, ``config.json``).
    """
    fd, st = _open_regular(path, what, remedy)
    try:
        if st.st_size > limit:
            raise UserError(f"{shown(str(path))}: {st.st_size:,} bytes, more than {limit:,} for {what}; {remedy}")
        chunks, left = [], limit + 1
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 20))
            except OSError as exc:
                raise UserError(f"{shown(str(path))}: cannot read ({exc.strerror}); {remedy}") from None
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # grew while being read
            raise UserError(f"{shown(str(path))}: more than {limit:,} bytes for {what}; {remedy}")
        return data
    finally:
        os.close(fd)


def check_regular(path: Path | str, *, what: str, remedy: str = "pass a regular file") -> os.stat_result:
    """``stat`` of ``path`` when it is a regular file (symlinks followed); a UserError otherwise."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise open_error(path, exc, remedy) from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{shown(str(path))} is {kind_of(st.st_mode)}, not a regular file: {what} must be a file; {remedy}")
    return st


def read_tail(path: Path | str, *, limit: int, what: str, remedy: str = "pass a regular file") -> bytes:
    """The last ``limit`` bytes of the regular file ``path`` (all of it when smaller): for a log,
    whose end says why a process stopped. A FIFO, a device or a directory is a UserError."""
    fd, st = _open_regular(path, what, remedy)
    try:
        start = max(0, st.st_size - limit)
        try:
            data = os.pread(fd, limit, start)
        except OSError as exc:
            raise UserError(f"{shown(str(path))}: cannot read ({exc.strerror}); {remedy}") from None
        if start:  # cut at a line break, not mid-line
            data = data[data.find(b"\n") + 1:] if b"\n" in data[:65536] else data
        return data
    finally:
        os.close(fd)
