"""roost.progress: mode choice, plain lines through a pipe, rich bars on a forced terminal, throttling,
unknown totals, secrets masked, a broken stream never raising."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from roost.progress import (
    PlainSink,
    ProgressSink,
    RichSink,
    choose_mode,
    detail,
    scrub,
    terminal_progress,
)

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_mode_rich_on_a_terminal_plain_when_piped_or_in_ci_and_env_override() -> None:
    assert choose_mode(Tty(), env={}) == "rich"
    assert choose_mode(io.StringIO(), env={}) == "plain"
    assert choose_mode(Tty(), env={"CI": "true"}) == "plain"
    assert choose_mode(Tty(), env={"CI": "false"}) == "rich"
    assert choose_mode(io.StringIO(), env={"ROOST_PROGRESS": "rich"}) == "rich"
    assert choose_mode(Tty(), env={"ROOST_PROGRESS": "OFF"}) == "off"


def test_factory_picks_the_sink_and_plain_false_means_silent_off_a_terminal() -> None:
    assert isinstance(terminal_progress("x", mode="plain", stream=io.StringIO()), PlainSink)
    assert isinstance(terminal_progress("x", mode="rich", console=Console(file=io.StringIO())), RichSink)
    assert type(terminal_progress("x", mode="plain", plain=False)) is ProgressSink
    assert type(terminal_progress("x", mode="off")) is ProgressSink


def test_plain_lines_are_throttled_by_time_and_by_ten_percent_steps() -> None:
    out, clock = io.StringIO(), Clock()
    sink = PlainSink("health", stream=out, clock=clock)
    sink.update(0.0, 1.0, status="importing")          # first report: printed
    clock.t = 1.0
    sink.update(0.05, 1.0, status="importing")         # same 10 % step, 1 s later: not printed
    clock.t = 2.0
    sink.update(0.15, 1.0, status="loading weights")   # crossed 10 %: printed
    clock.t = 3.0
    sink.update(0.18, 1.0)                             # same step: not printed
    clock.t = 13.5
    sink.update(0.19, 1.0)                             # 10 s since the last line: printed
    clock.t = 14.0
    sink.update(1.0, 1.0, status="ready")              # final: printed once
    sink.update(1.0, 1.0, status="ready")
    sink.close()
    assert out.getvalue().splitlines() == [
        "roost: health: 0%: importing",
        "roost: health: 15%: loading weights",
        "roost: health: 19%: loading weights",
        "roost: health: 100%: ready",
    ]


def test_plain_bytes_with_phases_rate_eta_and_an_unknown_total() -> None:
    out, clock = io.StringIO(), Clock()
    sink = PlainSink("org/m@main", unit="bytes", stream=out, clock=clock)
    sink.update(0, None, phase="download")
    clock.t = 10.0
    sink.update(5_000_000, None, phase="download")     # no total: bytes and a rate, no percent, no ETA
    sink.update(1_000_000, 4_000_000, phase="verify", rate=2_000_000, eta_s=1.5, status="files 1/2")
    sink.close("verified")
    lines = out.getvalue().splitlines()
    assert lines == [
        "roost: org/m@main download: 0 B",
        "roost: org/m@main download: 5.00 MB at 500.00 kB/s",
        "roost: org/m@main verify: 1.00 MB / 4.00 MB (25%) at 2.00 MB/s, ETA 2 s: files 1/2",
        "roost: org/m@main: verified",
    ]


def test_detail_steps_and_percent_without_a_total() -> None:
    assert detail("steps", 3, 7, None, None) == "3/7 (43%)"
    assert detail("steps", 3, None, None, None) == "3 done"
    assert detail("percent", 0.4, 1.0, None, None) == "40%"
    assert detail("bytes", 10, 0, None, None) == "10 B"


def test_plain_through_a_pipe_in_a_subprocess() -> None:
    code = textwrap.dedent("""
        from roost.progress import terminal_progress
        with terminal_progress("bench") as sink:
            for i in range(5):
                sink.update(i, 4, status=f"step {i}")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [f"roost: bench: {p}%: step {i}" for i, p in enumerate((0, 25, 50, 75, 100))]
    assert "\x1b[" not in r.stderr and r.stdout == ""


def test_rich_renders_bars_into_a_forced_terminal() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=140)
    sink = terminal_progress("download org/m", unit="bytes", mode="rich", console=console)
    sink.update(1_000_000, 4_000_000, phase="download", rate=1_000_000, eta_s=3)
    sink.update(4_000_000, 4_000_000, phase="download", rate=1_000_000, eta_s=0)
    sink.update(2_000_000, None, phase="verify")     # unknown total: a pulsing bar, no percentage
    sink.close("4.00 MB verified")
    text = ANSI.sub("", console.file.getvalue())  # type: ignore[attr-defined]
    assert "download org/m download" in text and "4.00 MB / 4.00 MB (100%) at 1.00 MB/s" in text
    assert "download org/m verify" in text and "2.00 MB" in text
    assert text.rstrip().endswith("roost: download org/m: 4.00 MB verified")
    sink.update(5, 10)  # after close: ignored, no error


def test_secrets_never_printed_in_either_mode() -> None:
    key = "s3cret-key-123"
    out = io.StringIO()
    sink = PlainSink("bench", stream=out, secrets=[key])
    sink.update(0.5, 1.0, status=f"step with {key} and hf_abcdefghijklmnop and Bearer xyz.abc")
    sink.close()
    console = Console(file=io.StringIO(), force_terminal=True, width=140)
    rich = terminal_progress(f"bench {key}", mode="rich", console=console, secrets=[key])
    rich.update(0.5, 1.0, status=f"token {key}")
    rich.close(f"done {key}")
    printed = out.getvalue() + console.file.getvalue()  # type: ignore[attr-defined]
    assert key not in printed and "hf_abcdefghijklmnop" not in printed and "xyz.abc" not in printed
    assert "***" in printed
    assert scrub("plain text, sk-short") == "plain text, sk-short"


def test_a_broken_stream_or_bad_numbers_never_raise() -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("EPIPE")

    sink = PlainSink("x", stream=Broken())
    sink.update(1, 2)
    sink.update("nan?", 2)  # type: ignore[arg-type]
    sink.close("done")
    with terminal_progress("x", mode="rich", console=Console(file=Broken(), force_terminal=True)) as rich:
        rich.update(1, 2)


@pytest.mark.parametrize("total", [None, 0, -1])
def test_unknown_total_in_plain_mode_prints_on_time_only(total: float | None) -> None:
    out, clock = io.StringIO(), Clock()
    sink = PlainSink("x", unit="steps", stream=out, clock=clock)
    for i in range(5):
        clock.t = 3.0 * i
        sink.update(i, total)
    assert out.getvalue().splitlines() == ["roost: x: 0 done", "roost: x: 4 done"]
