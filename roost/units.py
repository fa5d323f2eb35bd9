"""Units and how numbers of bytes and seconds are printed: one rule each.

- **Disk and network** sizes are decimal (1 GB = 10^9 bytes), as the Hub, disks and link speeds
  are quoted: :func:`format_bytes` prints ``21.80 GB``, ``512 MB``, ``780 B``.
- **Memory** sizes are binary (1 GiB = 2^30 bytes), as vLLM prints them ("4.0 GiB KV cache"):
  :func:`format_memory` prints ``4.00 GiB``, ``45.60 MiB``, ``12 B``.
- Bandwidth is decimal GB/s (vendors publish the DGX Spark's 273 GB/s that way).
"""

from __future__ import annotations

GB = 10**9

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def format_bytes(n: float) -> str:
    """Bytes on disk or on the wire, decimal units: ``780 B``, ``1.50 kB``, ``21.80 GB``."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{value:.2f} TB"


def format_memory(n: float) -> str:
    """Bytes of memory, binary units as vLLM prints them: ``12 B``, ``789.00 KiB``, ``4.00 GiB``."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float) -> str:
    """A duration: ``42 s``, ``3m07s``, ``1h05m``."""
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
