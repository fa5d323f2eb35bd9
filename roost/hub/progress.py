"""Progress of a download: bytes done of total per phase (download, then verify), rate and ETA.

Workers add to a thread-safe byte counter; :class:`ProgressMeter` turns it into throttled
:class:`DownloadProgress` reports, always delivered on the thread that runs the download, so a
callback (a CLI line, a Prefect progress artifact) never runs concurrently with itself.
:func:`byte_counting_tqdm` forwards the bytes of huggingface_hub's own bars (an hf_xet transfer) to a counter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from roost._compat import XET_TRANSFER_BAR_MARKER
from roost.hub.integrity import ByteCounter
from roost.units import format_bytes, format_seconds

Phase = Literal["download", "verify"]


class DownloadProgress(BaseModel):
    """One progress report: bytes done of total in the current phase, with rate and ETA."""

    phase: Phase
    bytes_done: int
    bytes_total: int
    rate_bps: float = Field(description="Bytes per second since the phase started (this run's bytes only).")
    eta_s: float | None
    files_done: int
    files_total: int

    @property
    def fraction(self) -> float:
        return 1.0 if self.bytes_total <= 0 else min(1.0, self.bytes_done / self.bytes_total)

    def line(self) -> str:
        eta = "" if self.eta_s is None else f", ETA {format_seconds(self.eta_s)}"
        return (
            f"{self.phase}: {format_bytes(self.bytes_done)} / {format_bytes(self.bytes_total)} "
            f"({100 * self.fraction:.1f}%) at {format_bytes(self.rate_bps)}/s{eta}; "
            f"files {self.files_done}/{self.files_total}"
        )


ProgressCallback = Callable[[DownloadProgress], None]


class ProgressMeter:
    """Turns a byte counter into throttled DownloadProgress reports (always on the caller's thread)."""

    def __init__(
        self,
        callback: ProgressCallback | None,
        phase: Phase,
        total: int,
        files_total: int,
        interval: float,
    ) -> None:
        self.callback = callback
        self.phase: Phase = phase
        self.total = total
        self.files_total = files_total
        self.files_done = 0
        self.counter = ByteCounter()
        self.interval = interval
        self.t0 = time.monotonic()
        self._base = 0
        self._last = 0.0

    def restart_clock(self) -> None:
        """Measure the rate from now on (bytes counted so far do not enter it)."""
        self.t0 = time.monotonic()
        self._base = self.counter.value

    def snapshot(self) -> DownloadProgress:
        done = self.counter.value
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        rate = (done - self._base) / elapsed
        eta = (
            (self.total - done) / rate
            if rate > 0 and done < self.total
            else (0.0 if done >= self.total else None)
        )
        return DownloadProgress(
            phase=self.phase,
            bytes_done=done,
            bytes_total=self.total,
            rate_bps=rate,
            eta_s=eta,
            files_done=self.files_done,
            files_total=self.files_total,
        )

    def tick(self, force: bool = False) -> None:
        """Report now when ``force`` or when ``interval`` has passed since the last report."""
        if self.callback is None:
            return
        now = time.monotonic()
        if force or now - self._last >= self.interval:
            self._last = now
            self.callback(self.snapshot())


def byte_counting_tqdm(sink: Callable[[int], None]) -> Any:
    """A silent tqdm class that forwards the bytes of huggingface_hub's file bar to ``sink``.

    hf_xet reports network bytes ("downloading bytes") and file bytes on two bars; only the file
    bytes are forwarded, so each byte of the file counts once.
    """

    class _Counter(tqdm):  # type: ignore[misc, type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._forward = XET_TRANSFER_BAR_MARKER not in str(kwargs.get("desc", ""))
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if n and self._forward:
                sink(int(n))
            return None

    return _Counter
