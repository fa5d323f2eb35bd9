"""How many connections a download uses, and which work each takes next.

- :class:`Ramp`: connections from measured throughput. It starts with a few; after each window of
  :attr:`Ramp.window_s` seconds it compares the aggregate rate of that window with the best before:
  while adding connections raised it (by :attr:`Ramp.gain` at least) it doubles them, up to the bound;
  the first window that did not, it goes back to the number that reached the best rate and holds there
  (a connection past the target finishes its request, then waits). Fed ``(time, bytes)`` samples, it
  is deterministic (tests give it made-up ones).
- :class:`Lanes`: ``bound`` worker slots share the files to fetch; slot ``i`` takes work only while
  ``i`` is below the ramp's target. Work is handed out in order (biggest file first, a file's parts
  in order), so the parts held in memory until hashed stay near each file's hashed prefix; a part is
  handed out only while the parts in memory fit :attr:`Lanes.budget` bytes (or none is in memory).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from roost.units import MiB

START_CONNECTIONS = 4
"""Connections at first, as many as roost fetched with before the ramp: where a CDN caps each connection
they reach four times its rate from the first second; where the link is fast and the CPU the limit, the
first doubling does not pay and the ramp comes back to four."""
MAX_CONNECTIONS = 16
"""Connections at most unless ``download_workers`` says otherwise (httpx's pool holds 32)."""
BUFFER_BYTES = 256 * MiB
"""Bytes of parts held in memory until hashed, at most (more only when a single part is larger). It
bounds memory, and what is left to hash when the last byte lands: where the CPU is the limit, hashing
falls behind the network by up to this much (0.15 s of sha256 on one core)."""

Work = Callable[[], None]


class Ramp:
    """The number of connections to use, from the throughput they reach (see the module's docstring)."""

    def __init__(self, start: int, bound: int, *, window_s: float = 0.5, gain: float = 1.1) -> None:
        self.bound = max(1, bound)
        self.target = max(1, min(start, self.bound))
        self.window_s = window_s
        self.gain = gain
        self.holding = False
        self.history: list[tuple[int, float]] = []
        """(connections, bytes/s) for each window measured."""
        self._t: float | None = None
        self._bytes = 0
        self._best = 0.0
        self._best_target = self.target

    def observe(self, now: float, total: int) -> int:
        """The target after ``total`` bytes have arrived by time ``now`` (monotonic seconds)."""
        if self._t is None:
            self._t, self._bytes = now, total
            return self.target
        if now - self._t < self.window_s:
            return self.target
        rate = (total - self._bytes) / (now - self._t)
        self._t, self._bytes = now, total
        self.history.append((self.target, rate))
        if self.holding:
            return self.target
        if rate >= self._best * self.gain:
            self._best, self._best_target = rate, self.target
            self.target = min(self.bound, self.target * 2)
        else:  # the last step did not pay: back to the connections that reached the best rate, and hold
            self.holding = True
            self.target = self._best_target
        return self.target


class Job(Protocol):
    """One file to fetch, as the lanes see it."""

    def next_work(self, reserve: Callable[[int], bool]) -> Work | None:
        """Work to do now (``reserve(n)`` before handing out a part of ``n`` bytes), or None."""

    def may_have_more(self) -> bool:
        """Whether the file may still hand out work (a probe under way may open its parts); once False,
        False for good."""


class Lanes:
    """Hands the files' work to worker slots (see the module's docstring)."""

    def __init__(self, jobs: Sequence[Job], *, target: int, budget: int, stop: threading.Event) -> None:
        self.jobs = list(jobs)
        self.target = target
        self.budget = budget
        self.buffered = 0
        self.stop = stop
        self._cond = threading.Condition()
        self._first = 0  # the jobs before it can hand out nothing more (that never changes back)

    def take(self, slot: int) -> Work | None:
        """The next work for worker ``slot``, waiting while there is none yet; None once there is none left
        (or the run stops)."""
        with self._cond:
            while not self.stop.is_set():
                jobs = self.jobs
                while self._first < len(jobs) and not jobs[self._first].may_have_more():
                    self._first += 1  # each finished job is stepped over once, not at every take
                if self._first == len(jobs):
                    return None
                if slot < self.target:
                    for job in itertools.islice(jobs, self._first, None):
                        work = job.next_work(self._reserve)
                        if work is not None:
                            return work
                self._cond.wait(0.05)
            return None

    def _reserve(self, n: int) -> bool:
        if self.buffered and self.buffered + n > self.budget:
            return False
        self.buffered += n
        return True

    def release(self, n: int) -> None:
        """``n`` bytes of parts left memory."""
        with self._cond:
            self.buffered -= n
            self._cond.notify_all()

    def poke(self) -> None:
        """Something changed (a file's parts opened): look again."""
        with self._cond:
            self._cond.notify_all()

    def set_target(self, n: int) -> None:
        with self._cond:
            if n != self.target:
                self.target = n
                self._cond.notify_all()
