"""The level each line of a vLLM server's output was written at, and whether it is noise.

roost reads a server's output as text (``roost.serve.logs``) and passes it on to the run's log; this
says at which level. A server writes:

- vLLM's own records, ``[(EngineCore pid=25) ]INFO 11-30 08:08:04 [file.py:123] msg``
  (``roost.vllm.wordings.LINE_PREFIX``; each line of a multi-line record has the prefix): its level;
- uvicorn's, ``INFO:     msg`` (``SHORT_LINE_PREFIX``): its level;
- Python warnings, ``path.py:24: DeprecationWarning: msg``: WARNING; PyTorch's C++ ones,
  ``[W1130 08:08:03.42 utils.cpp:41] Warning: ...``: the level of their letter;
- tracebacks (and ``Process EngineCore:`` before one): the level of the record they follow when that is
  a warning or an error, ERROR otherwise (Python printed it for a dying process); indented lines: the
  level of the line they continue;
- anything else (a library's bare line, a progress bar): INFO.

Noise is what every start or stop prints and that tells nothing about this run: vLLM's banner and
route listing (records below WARNING), the shutdown chatter (vLLM's ``[shutdown]`` steps, uvicorn's,
nanobind's leak report, ``resource_tracker``'s warning at exit), and, once vLLM says it was signalled
to stop, all it logs while stopping (:class:`LevelReader`). The run's log has noise at DEBUG; the
server's own log keeps every line. A Docker timestamp in front of a line is allowed.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from roost.vllm import wordings as W

_DOCKER_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\S+Z\s")
_LEVEL_WORD = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")
_PY_WARNING = re.compile(r"^\S.*?:\d+: [A-Z]\w*Warning: ")
_CPP_LOG = re.compile(r"^\[?([IWEF])\d{4} \d\d:\d\d:\d\d")
_CPP_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
_TRACEBACK = re.compile(r"^(?:Traceback \(most recent call last\):|Process [\w-]+:$"  # multiprocessing's header
                        r"|During handling of the above exception|The above exception was the direct cause"
                        r"|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::|$))")

_BANNER = re.compile(r"^\s*$|[█▀▄]|^vLLM (?:API )?server version \S+")
"""vLLM's banner (``entrypoints/serve/utils/api_utils.py``): the logo's lines (blank ones included)
with the version and model; or its one line when the logo is off (``VLLM_DISABLE_LOG_LOGO``)."""
_ROUTES = re.compile(r"^(?:Available routes are:|Route: /)")
"""``entrypoints/launcher.py`` (0.24) and ``entrypoints/launchers/launcher.py`` (0.32): one line per route."""
_STOPPING = re.compile(r"\[shutdown\] (?:EngineCore: trigger received signal=|API server: shutdown triggered)")
"""vLLM 0.24+ on SIGTERM or SIGINT (what ``Server.stop()`` sends): what it logs from then on is its stopping,
down to the engine client's ``EngineDeadError`` and the ``force killing`` warnings."""
_STARTING = re.compile(r"[█▀▄] +version \S+\s*$|\bvLLM (?:API )?server version \S+")
"""A server starting: the banner's version line (``▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0``) or, with
the logo off, its one line. A container restarted under its restart policy goes on in the same stream."""
_SHUTDOWN = re.compile(
    r"^\[shutdown\] "  # vLLM 0.24+: each step of its shutdown
    r"|^Shutting down\b|^Waiting for (?:application shutdown|connections to close|background tasks)"  # uvicorn
    r"|^Application shutdown complete|^Finished server process"
    r"|^nanobind: |^ - leaked (?:instance|type|function)|^See https://nanobind"  # nanobind's leak report
    r"|resource_tracker: There appear to be \d+ leaked")  # multiprocessing, at exit


@dataclass(frozen=True)
class LineLevel:
    """A line's level as the server wrote it, and whether it is noise (then logged at DEBUG)."""

    level: int
    noise: bool = False

    @property
    def log_level(self) -> int:
        """The level the line is logged at: DEBUG for noise, its own otherwise."""
        return logging.DEBUG if self.noise else self.level


def _worded(line: str) -> LineLevel | None:
    """A vLLM or uvicorn record: its level word, and noise when it is below WARNING and its message
    (what follows the prefix) is the banner, a route or a shutdown step."""
    m = W.LINE_PREFIX.pattern.match(line) or W.SHORT_LINE_PREFIX.pattern.match(line)
    if m is None:
        return None
    level = logging.getLevelName(_LEVEL_WORD.findall(m.group(0))[-1])
    message = line[m.end():]
    noise = level < logging.WARNING and any(p.search(message) for p in (_BANNER, _ROUTES, _SHUTDOWN))
    return LineLevel(level, noise)


def classify(line: str, previous: LineLevel | None = None) -> LineLevel:
    """The level of ``line``; ``previous`` is what the line before it got (a continuation takes its level)."""
    line = _DOCKER_STAMP.sub("", line, count=1)
    worded = _worded(line)
    if worded is not None:
        return worded
    if line[:1].isspace():  # a traceback's frame, a warning's source line, a leak report's entry
        return previous or LineLevel(logging.INFO, _SHUTDOWN.search(line) is not None)
    if _TRACEBACK.match(line):
        if previous is not None and previous.level >= logging.WARNING:
            return previous
        return LineLevel(logging.ERROR)
    if _PY_WARNING.match(line):
        return LineLevel(logging.WARNING, _SHUTDOWN.search(line) is not None)
    if m := _CPP_LOG.match(line):
        return LineLevel(_CPP_LEVELS[m.group(1)])
    return LineLevel(logging.INFO, _SHUTDOWN.search(line) is not None)


class LevelReader:
    """:func:`classify` over one server's lines in order: it remembers the line before, and whether the
    server was told to stop (:data:`_STOPPING`), after which every line is noise at its own level until
    a server starts again in the same stream (:data:`_STARTING`: a container its restart policy restarted)."""

    def __init__(self) -> None:
        self.previous: LineLevel | None = None
        self.stopping = False

    def read(self, line: str) -> LineLevel:
        if _STARTING.search(line):
            self.stopping = False
        self.stopping = self.stopping or _STOPPING.search(line) is not None
        level = classify(line, self.previous)
        self.previous = LineLevel(level.level, noise=True) if self.stopping else level
        return self.previous
