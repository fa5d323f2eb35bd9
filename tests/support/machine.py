"""The machine the pytest-xdist workers of one run share (``tests/conftest.py``): a test marked ``quiet``
runs while no other worker's test does."""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def machine(alone: bool, run_id: str, where: Path | None = None) -> Iterator[None]:
    """The machine shared with the other workers of the run ``run_id``, or this worker's alone.

    Two flocks in ``where`` (the temporary directory): every test holds ``busy`` shared while it runs, and
    a test that must run alone holds it exclusive, so it waits for the test running elsewhere to end.
    ``turn`` bounds that wait: taken exclusive first, it stops the other workers from starting another test
    (each takes it shared, briefly, before ``busy``), which flock alone would let them do ahead of a waiting
    exclusive lock."""
    base = Path(where or tempfile.gettempdir()) / f"roost-tests-{run_id}"
    with open(f"{base}.turn", "a") as turn, open(f"{base}.busy", "a") as busy:
        fcntl.flock(turn, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(busy, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turn, fcntl.LOCK_UN)
        yield  # closing the files releases the locks
