"""Run ``roost`` the way a user does (a process of its own) and measure what it cost: its exit code,
its output, its wall time and its peak memory (``ru_maxrss`` of that one child, from ``wait4``).

A case that runs past its time bound is killed (with its process group) and reported as hung; the
address space is capped so an input that makes roost allocate without bound fails fast instead of
swapping the machine.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from support.cli import ROOST

REPO = Path(__file__).resolve().parents[2]
ADDRESS_SPACE_CAP = 6 * 1024**3
"""RLIMIT_AS of every case: far above what roost needs (its imports reserve ~1.5 GiB of address space)."""


@dataclass(frozen=True)
class Outcome:
    code: int | None  # None: killed at the time bound
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float

    @property
    def hung(self) -> bool:
        return self.code is None

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _limits() -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def run_roost(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout_s: float,
              stdin: bytes | None = None) -> Outcome:
    """``roost *argv`` in ``cwd`` with exactly ``env``; killed after ``timeout_s``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([ROOST, *argv], stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=out, stderr=err, env=dict(env), cwd=cwd, preexec_fn=_limits)
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        if not killed.is_set():  # what the case left running in its group (a server it started) goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return Outcome(
            code=None if killed.is_set() else proc.returncode,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
            seconds=seconds,
            max_rss_mb=usage.ru_maxrss / 1024,
        )
