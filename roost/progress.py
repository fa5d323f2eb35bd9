"""Terminal progress for the long stages (download, health wait, benchmark), free of Prefect.

A :class:`ProgressSink` takes ``update(completed, total, status=..., phase=...)`` calls from a stage's
progress callback (next to the Prefect progress artifact the task keeps updating) and shows them:

- ``rich``: live ``rich.progress`` bars on stderr (one per phase: bytes with rate and ETA, or a
  percentage with the current milestone), when stderr is a terminal and no ``CI`` variable is set;
- ``plain``: one line per report, throttled to every ``interval_s`` seconds or each ``step`` of the
  total (10 % by default), the first and the final report always, when the output is piped or in CI;
- ``off``: nothing (``ROOST_PROGRESS=off``, or a Prefect task whose run logger already writes the
  plain lines).

``ROOST_PROGRESS=rich|plain|off`` overrides the choice. A sink never raises (a broken terminal must
not stop a download or a measurement) and masks the secrets it is given, and token-shaped words, in
everything it prints.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TextIO

from roost.secrets import MASK, redact
from roost.settings import environment
from roost.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

Mode = Literal["rich", "plain", "off"]
Unit = Literal["bytes", "percent", "steps"]
MODES: tuple[Mode, ...] = ("rich", "plain", "off")
PLAIN_INTERVAL_S = 10.0
PLAIN_STEP = 0.1

log = logging.getLogger(__name__)

# Token shapes that must never reach a terminal even if a caller passes them in a status text:
# Hugging Face (hf_...), Slack (xox?-...), OpenAI-style (sk-...), and whatever follows "Bearer".
_TOKEN = re.compile(r"\b(?:hf_[A-Za-z0-9]{8,}|xox[abposr]-[A-Za-z0-9-]{8,}|sk-[A-Za-z0-9_-]{8,})|(?<=Bearer )\S+")


def choose_mode(stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> Mode:
    """``rich`` on a terminal, ``plain`` when ``stream`` (default stderr) is not one or ``CI`` is set;
    ``ROOST_PROGRESS`` (rich, plain or off) wins over both."""
    settings = environment(env)
    forced = (settings.roost_progress or "").strip().lower()
    if forced in MODES:
        return forced  # type: ignore[return-value]
    if (settings.ci or "").strip().lower() not in ("", "0", "false", "no"):
        return "plain"
    try:
        tty = (sys.stderr if stream is None else stream).isatty()
    except (AttributeError, OSError, ValueError):
        tty = False
    return "rich" if tty else "plain"


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret in ``secrets`` and every token-shaped word replaced by ``***``."""
    return _TOKEN.sub(MASK, redact(text, list(secrets)))


def detail(unit: Unit, completed: float, total: float | None, rate: float | None, eta_s: float | None) -> str:
    """The numbers of one report: ``1.20 MB / 4.00 MB (30%) at 2.00 MB/s, ETA 2 s``, ``3/7 (43%)``,
    ``40%``; without a total, what was done (and the rate) only."""
    known = total is not None and total > 0
    pct = f" ({100 * min(1.0, completed / total):.0f}%)" if known and total else ""
    if unit == "bytes":
        text = format_bytes(completed) + (f" / {format_bytes(total)}" if known and total else "") + pct
        if rate is not None and rate > 0:
            text += f" at {format_bytes(rate)}/s"
        if eta_s is not None and known:
            text += f", ETA {format_seconds(eta_s)}"
        return text
    if unit == "steps":
        return f"{completed:.0f}/{total:.0f}{pct}" if known else f"{completed:.0f} done"
    return f"{100 * min(1.0, completed / total):.0f}%" if known and total else f"{completed:.0f}"


class ProgressSink:
    """Where a stage's progress reports go; the base class shows nothing. Every method swallows its
    own errors (logged at debug level): progress is never worth failing the work for."""

    def update(self, completed: float, total: float | None = None, *, status: str = "", phase: str = "",
               rate: float | None = None, eta_s: float | None = None) -> None:
        """``completed`` of ``total`` (None: unknown) in ``phase``; ``status`` names the current step."""
        try:
            self._update(float(completed), None if total is None else float(total), status, phase, rate, eta_s)
        except Exception as exc:
            log.debug("progress display failed: %r", exc)

    def close(self, status: str = "") -> None:
        """Finish the display (a final line in plain mode); further updates are ignored."""
        try:
            self._close(status)
        except Exception as exc:
            log.debug("progress display failed to close: %r", exc)

    def __enter__(self) -> ProgressSink:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _update(self, completed: float, total: float | None, status: str, phase: str, rate: float | None,
                eta_s: float | None) -> None:
        return None

    def _close(self, status: str) -> None:
        return None


class _Bar:
    """What a sink remembers per phase: the last report and when it was printed."""

    def __init__(self) -> None:
        self.completed = 0.0
        self.total: float | None = None
        self.status = ""
        self.rate: float | None = None
        self.eta_s: float | None = None
        self.t0: float | None = None
        self.start_value = 0.0
        self.printed_at: float | None = None
        self.printed_step = -1
        self.final_printed = False


class _Tracking(ProgressSink):
    """Shared by both displays: per-phase state, the label, the rate and ETA when the caller gives none."""

    def __init__(self, label: str, unit: Unit, secrets: Iterable[str], clock: Callable[[], float]) -> None:
        self.secrets = [s for s in secrets if s]
        self.label = scrub(label, self.secrets)
        self.unit: Unit = unit
        self.clock = clock
        self.bars: dict[str, _Bar] = {}
        self.closed = False

    def _track(self, completed: float, total: float | None, status: str, phase: str, rate: float | None,
               eta_s: float | None) -> _Bar:
        bar = self.bars.setdefault(phase, _Bar())
        now = self.clock()
        if bar.t0 is None:
            bar.t0, bar.start_value = now, completed
        bar.completed, bar.total = completed, total if total is not None and total > 0 else None
        bar.status = scrub(status, self.secrets) if status else bar.status
        elapsed = now - bar.t0
        if rate is None and self.unit == "bytes" and elapsed > 0:
            rate = (completed - bar.start_value) / elapsed
        if eta_s is None and rate and bar.total is not None:
            eta_s = max(0.0, bar.total - completed) / rate
        bar.rate, bar.eta_s = rate, eta_s
        return bar

    def name(self, phase: str) -> str:
        return f"{self.label} {scrub(phase, self.secrets)}" if phase else self.label

    def text(self, phase: str, bar: _Bar) -> str:
        numbers = detail(self.unit, bar.completed, bar.total, bar.rate, bar.eta_s)
        return f"{numbers}: {bar.status}" if bar.status else numbers


class PlainSink(_Tracking):
    """``roost: LABEL [PHASE]: NUMBERS[: STATUS]`` lines on ``stream``: the first report, then at most one
    per ``interval_s`` unless a ``step`` of the total was crossed, and the final one (completed = total)."""

    def __init__(self, label: str, *, unit: Unit = "percent", stream: TextIO | None = None,
                 interval_s: float = PLAIN_INTERVAL_S, step: float = PLAIN_STEP, secrets: Iterable[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(label, unit, secrets, clock)
        self.stream = stream
        self.interval_s = interval_s
        self.step = step

    def _update(self, completed: float, total: float | None, status: str, phase: str, rate: float | None,
                eta_s: float | None) -> None:
        if self.closed:
            return
        bar = self._track(completed, total, status, phase, rate, eta_s)
        now = self.clock()
        final = bar.total is not None and completed >= bar.total
        step = int(completed / bar.total / self.step + 1e-9) if bar.total is not None and self.step > 0 else -1
        due = (bar.printed_at is None or now - bar.printed_at >= self.interval_s
               or step > bar.printed_step or (final and not bar.final_printed))
        if not due or (final and bar.final_printed):
            return
        bar.printed_at, bar.printed_step = now, max(step, bar.printed_step)
        bar.final_printed = bar.final_printed or final
        self._write(f"roost: {self.name(phase)}: {self.text(phase, bar)}")

    def _close(self, status: str) -> None:
        if self.closed:
            return
        self.closed = True
        if status:
            self._write(f"roost: {self.label}: {scrub(status, self.secrets)}")

    def _write(self, line: str) -> None:
        stream = sys.stderr if self.stream is None else self.stream
        stream.write(line + "\n")
        stream.flush()


class RichSink(_Tracking):
    """Live ``rich.progress`` bars on ``console`` (default: a stderr console), one per phase."""

    def __init__(self, label: str, *, unit: Unit = "percent", console: Console | None = None,
                 secrets: Iterable[str] = (), clock: Callable[[], float] = time.monotonic,
                 refresh_per_second: float = 4) -> None:
        super().__init__(label, unit, secrets, clock)
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        # On the real stderr, other output (print, typer.echo, log handlers) goes through the live display
        # so it scrolls above the bars instead of tearing them; a caller's own console is left alone.
        self.redirect = console is None
        self.progress: Progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(), console=console if console is not None else Console(stderr=True),
            refresh_per_second=refresh_per_second, redirect_stdout=self.redirect, redirect_stderr=self.redirect)
        self.tasks: dict[str, TaskID] = {}
        self.started = False
        self.moved: list[tuple[logging.StreamHandler[TextIO], TextIO]] = []

    def _update(self, completed: float, total: float | None, status: str, phase: str, rate: float | None,
                eta_s: float | None) -> None:
        if self.closed:
            return
        bar = self._track(completed, total, status, phase, rate, eta_s)
        if not self.started:
            original = sys.stderr
            self.progress.start()
            self.started = True
            if self.redirect and sys.stderr is not original:
                self.moved = _point_handlers(original, sys.stderr)
        text = self.text(phase, bar)
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(self.name(phase), total=bar.total, detail=text)
        self.progress.update(self.tasks[phase], total=bar.total, completed=completed, detail=text)

    def _close(self, status: str) -> None:
        if self.closed:
            return
        self.closed = True
        if self.started:
            for handler, stream in self.moved:
                _set_stream(handler, stream)
            self.moved = []
            self.progress.stop()
        if status:
            self.progress.console.print(f"roost: {self.label}: {scrub(status, self.secrets)}", markup=False,
                                        highlight=False)


def _set_stream(handler: logging.StreamHandler[TextIO], stream: TextIO) -> None:
    handler.setStream(stream)
    console = getattr(handler, "console", None)  # Prefect's console handler prints through a rich Console
    if console is not None and hasattr(console, "file"):
        console.file = stream


def _point_handlers(original: TextIO, proxy: TextIO) -> list[tuple[logging.StreamHandler[TextIO], TextIO]]:
    """Point every logging handler that writes to ``original`` at ``proxy``; the (handler, stream) pairs
    to restore."""
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    moved: list[tuple[logging.StreamHandler[TextIO], TextIO]] = []
    seen: set[int] = set()
    for logger in loggers:
        for handler in logger.handlers:
            if (isinstance(handler, logging.StreamHandler) and id(handler) not in seen
                    and handler.stream in (original, sys.__stderr__)):
                seen.add(id(handler))
                moved.append((handler, handler.stream))
                _set_stream(handler, proxy)
    return moved


def terminal_progress(label: str, *, unit: Unit = "percent", mode: Mode | None = None, plain: bool = True,
                      stream: TextIO | None = None, console: Console | None = None,
                      interval_s: float = PLAIN_INTERVAL_S, step: float = PLAIN_STEP, secrets: Iterable[str] = (),
                      clock: Callable[[], float] = time.monotonic) -> ProgressSink:
    """The sink for ``label``: ``mode`` (default :func:`choose_mode` on ``stream``/stderr); with
    ``plain=False`` a non-terminal gets no display (for tasks whose run logger already prints the lines)."""
    try:
        chosen = mode or choose_mode(stream)
        if chosen == "rich":
            return RichSink(label, unit=unit, console=console, secrets=secrets, clock=clock)
        if chosen == "plain" and plain:
            return PlainSink(label, unit=unit, stream=stream, interval_s=interval_s, step=step, secrets=secrets,
                             clock=clock)
    except Exception as exc:  # no display is better than a failed stage
        log.debug("progress display unavailable: %r", exc)
    return ProgressSink()
