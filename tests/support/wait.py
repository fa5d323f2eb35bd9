"""Polling with a deadline: the one loop behind every "until it shows, or fail" of the suite.

``check`` is asked at once, then every ``every_s`` until it gives what the caller waits for or ``timeout_s``
has passed; it is always asked once more at (or just after) the deadline, so a slow machine that stretched
the last sleep still gets its last look. Nothing here is a timing claim: a deadline only guards a hang.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T], done: Callable[[T], bool] = bool, *, timeout_s: float, every_s: float = 0.5) -> T:
    """``check()`` until ``done`` says so of its value or ``timeout_s`` has passed: the last value either way,
    for the caller to assert on with its own message and figures."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if done(value) or time.monotonic() >= deadline:
            return value
        time.sleep(every_s)


def wait_for(what: str, check: Callable[[], T], *, timeout_s: float, every_s: float = 0.5) -> T:
    """The first truthy value of ``check()``; an ``AssertionError`` naming ``what`` (and the last value) when
    none came within ``timeout_s``."""
    value = poll(check, timeout_s=timeout_s, every_s=every_s)
    if not value:
        raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {value!r})")
    return value


def verdict(check: Callable[[], bool | None], *, timeout_s: float, every_s: float = 0.5) -> bool:
    """``check``'s verdict once it gives one (True or False; None is "not yet"), False after ``timeout_s``:
    the caller asserts it, with its own message."""
    return bool(poll(check, lambda v: v is not None, timeout_s=timeout_s, every_s=every_s))


def wait_started(what: str, proc: subprocess.Popen[Any], up: Callable[[], bool], *, log: Path, timeout_s: float,
                 every_s: float = 0.5) -> None:
    """Wait until ``up()`` says the process ``proc`` started serves; a ``RuntimeError`` with the end of its ``log``
    when it exits first or is not up within ``timeout_s`` (it is left running: the caller stops it)."""
    if poll(lambda: proc.poll() is not None or up(), timeout_s=timeout_s, every_s=every_s) and proc.poll() is None:
        return
    why = f"exited with {proc.returncode}" if proc.poll() is not None else f"not up within {timeout_s:g} s"
    try:
        tail = log.read_text(errors="replace")[-3000:]
    except OSError:
        tail = "(no log)"
    raise RuntimeError(f"{what} {why}: {log}\n{tail}")


def http_ok(url: str, *, below: int = 300, timeout_s: float = 2) -> Callable[[], bool]:
    """A check for :func:`wait_started`: ``url`` answers a GET with a status below ``below``."""
    import httpx

    def ok() -> bool:
        try:
            return httpx.get(url, timeout=timeout_s).status_code < below
        except httpx.HTTPError:
            return False

    return ok


async def apoll(check: Callable[[], T | Awaitable[T]], done: Callable[[T], bool] = bool, *, timeout_s: float,
                every_s: float = 0.5) -> T:
    """:func:`poll` inside an event loop (it sleeps with ``asyncio.sleep``); ``check`` may be a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if done(value) or time.monotonic() >= deadline:  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        await asyncio.sleep(every_s)
