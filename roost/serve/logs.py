"""What a server logged, kept as it arrives: complete lines, each with the time it was written.

Both backends read their server's log incrementally into a :class:`LogBuffer` (the process backend
from its log file, from the last offset; the docker backend from one followed ``docker logs``
stream) and hand out only what is new (``Server.new_log_text``). The times are what phase timing
(``roost.serve.phases.startup_phases``) works on: Docker's own timestamps for a container, the
moment roost read the line for a process (it reads at least every 0.2 s while the server runs).

A backend's ``log`` callback gets each line as a :class:`ServerLine`.

Lines end at ``\\n``, ``\\r\\n`` or a bare ``\\r`` (a progress bar redraws its line with ``\\r``: each
redraw is a line here, so progress shows while it moves); blank lines are dropped.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable

_BREAK = re.compile(r"\r\n|\r|\n")
MAX_PARTIAL_CHARS = 1 << 20
"""A line longer than this without an end is cut there (a runaway progress bar must not grow forever)."""

Stamped = tuple[dt.datetime, str]


def split_lines(carry: str, chunk: str) -> tuple[list[str], str]:
    """The complete lines in ``carry + chunk`` and what is left after the last line end."""
    parts = _BREAK.split(carry + chunk)
    rest = parts.pop()
    if len(rest) > MAX_PARTIAL_CHARS:
        parts.append(rest)
        rest = ""
    return [p for p in parts if p.strip()], rest


class ServerLine(str):
    """A line the server itself wrote, as a backend hands it to its ``log`` callback: the text
    ``[<source>] <line>`` (``[vllm 1234] ...``, ``[roost-cpu-tiny] ...``), with ``source`` and the bare
    ``text`` kept apart, so the callback tells it from the backend's own messages (``warning: ...``)."""

    source: str
    text: str

    def __new__(cls, source: str, text: str) -> ServerLine:
        line = super().__new__(cls, f"[{source}] {text}")
        line.source, line.text = source, text
        return line

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]  # a copy or pickle is whole
        return self.source, self.text


class LogBuffer:
    """Thread-safe store of a server's log lines with a read cursor for ``new_text()``.

    ``sink`` gets every line once, as it is added (e.g. the Prefect logger), outside the lock.
    """

    def __init__(self, sink: Callable[[str], None] | None = None) -> None:
        self._lines: list[Stamped] = []
        self._read = 0
        self._lock = threading.Lock()
        self._sink = sink

    def add(self, lines: list[Stamped]) -> None:
        if not lines:
            return
        with self._lock:
            self._lines.extend(lines)
        if self._sink is not None:
            for _, line in lines:
                self._sink(line)

    def new_text(self) -> str:
        """The lines added since the previous call (each ending in a newline); "" when none."""
        with self._lock:
            fresh = self._lines[self._read :]
            self._read = len(self._lines)
        return "".join(f"{line}\n" for _, line in fresh)

    def text(self) -> str:
        """Every line so far."""
        with self._lock:
            lines = list(self._lines)
        return "".join(f"{line}\n" for _, line in lines)

    def lines(self) -> list[Stamped]:
        """Every line so far with its time."""
        with self._lock:
            return list(self._lines)

    def __len__(self) -> int:
        with self._lock:
            return len(self._lines)
