"""The knee of a run's concurrency points: where more concurrent users stop buying throughput."""

from __future__ import annotations

from roost.catalogue import Knee, find_knee
from roost.records import BenchPoint


def knee_of(points: list[BenchPoint]) -> Knee | None:
    """The knee of concurrency points (``roost.catalogue.find_knee`` over median output tok/s)."""
    return find_knee([(p.concurrency, p.output_tok_s.median) for p in points])
