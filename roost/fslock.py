"""An exclusive lock on a file of this machine (``fcntl.flock``): one process at a time holds it.

Two landings on one machine share ``ROOST_HOME`` (two hosts' workers, or a sweep planning beside a
landing): the demo checkpoint's publisher and a download directory are held this way while they are
written. The lock goes with the process: a killed holder never leaves it taken.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold ``path`` (created, with its directory, when missing); ``on_wait`` is called once when another
    process holds it and this one waits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
