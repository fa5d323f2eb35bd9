"""The one result shape of every benchmark: a list of rows, one per figure, that ``benchmarks/run_all.py``
(``bash scripts/bench``) collects into the table of ``docs/benchmarks.md``.

Each script keeps its own command line and human output, and gains ``--json OUT`` (:func:`add_json_argument`):
at the end of a run it writes its rows there (:func:`write_rows`). A row is one figure: roost's value, the
reference it is set against (another tool, the direct path, the code before a change) when there is one,
their ratio, the target as text and the script's verdict on it. A script judges only what it can judge
from its own run; a figure without a target, or one the run cannot decide (too few samples, a degenerate
measurement), is "not judged". Correctness is not a verdict: a script whose run is wrong (an exception, a
digest that differs, two tools that disagree on a count) exits non-zero and writes no rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Verdict = Literal["met", "missed", "not judged"]
VERDICTS: tuple[Verdict, ...] = ("met", "missed", "not judged")


@dataclass(frozen=True)
class Row:
    """One figure of a benchmark run."""

    figure: str
    """What was measured, e.g. ``"client CPU per streamed token, 32 streams (marginal)"``."""
    unit: str
    """The unit of :attr:`roost` and :attr:`reference` (``"s"``, ``"ms"``, ``"µs"``, ``"%"``, ``"GB/s"``, ``""``)."""
    roost: float
    """roost's figure."""
    reference: float | None = None
    """The same figure of the reference, in the same unit; None when the figure has no reference."""
    reference_name: str = ""
    """What the reference is (``"vllm bench serve"``, ``"direct"``, ``"sha256sum"``)."""
    target: str = ""
    """The target as text (``"< 0.5 s"``, ``"ratio <= 1"``); "" when the figure has none."""
    verdict: Verdict = "not judged"
    detail: str = ""
    """What the verdict rests on when it is not the figure itself, e.g. ``"+1.55 ms"``, or why not judged."""
    ratio: float | None = field(default=None)
    """roost / reference; computed from the two when not given."""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"{self.figure}: verdict {self.verdict!r} is not one of {VERDICTS}")
        if not math.isfinite(self.roost):
            raise ValueError(f"{self.figure}: roost's figure is {self.roost}")
        if self.ratio is None and self.reference is not None and self.reference != 0:
            object.__setattr__(self, "ratio", self.roost / self.reference)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Row:
        return cls(**doc)


def judged(ok: bool) -> Verdict:
    """The verdict of a target check."""
    return "met" if ok else "missed"


def add_json_argument(ap: argparse.ArgumentParser) -> None:
    """``--json OUT``: where the run writes its rows (see the module docstring)."""
    ap.add_argument("--json", type=Path, metavar="OUT", dest="json_out",
                    help="also write the figures as rows (benchmarks/_table.py) to OUT, for `bash scripts/bench`")


def write_rows(path: Path | None, benchmark: str, rows: list[Row]) -> None:
    """Write ``rows`` to ``path`` (nothing when None) atomically: a reader never sees half a file."""
    if path is None:
        return
    if not rows:
        raise ValueError(f"{benchmark}: a run without figures")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"benchmark": benchmark, "rows": [r.to_json() for r in rows]}, f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def read_rows(path: Path) -> tuple[str, list[Row]]:
    """The benchmark's name and rows written by :func:`write_rows`."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return str(doc["benchmark"]), [Row.from_json(r) for r in doc["rows"]]


def number(value: float) -> str:
    """A figure as people read it: three significant digits, thousands separated, no exponent."""
    if value == 0:
        return "0"
    mag = abs(value)
    if mag >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(mag)))
    return f"{value:.{min(digits, 6)}f}"


def with_unit(value: float, unit: str) -> str:
    if not unit:
        return number(value)
    return f"{number(value)}{'' if unit == '%' else ' '}{unit}"
