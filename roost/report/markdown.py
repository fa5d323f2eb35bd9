"""Render the report document as GitHub-flavoured Markdown: for ``report.md`` (charts linked by relative path)
and for the Prefect UI's artifact pane (``images="pane"``: tables fitted to the pane, ``roost.report.pane``;
charts from the results URL or as small inline PNGs, ``png_data_uri``)."""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Literal

from roost.report.document import Block, Bullets, Document, Image, Para, Table
from roost.report.pane import fit_table

Images = Literal["link", "path", "pane"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> list[str]:
    align = ["---:" if i in t.align_right else "---" for i in range(len(t.headers))]
    lines = ["| " + " | ".join(_cell(h) for h in t.headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    return lines


_PANE_ALT = str.maketrans({"'": "\u2019", '"': "\u201d", "&": "+", "<": "\u2039", ">": "\u203a"})
"""The Prefect UI's Markdown renderer escapes these in alt text and then shows the entity (``server&#39;s``)."""


def _alt(text: str, images: Images) -> str:
    """Alt text as Markdown reads it: brackets escaped, one line (for the pane, without the characters the
    Prefect UI shows as entities)."""
    line = " ".join(text.split())
    if images == "pane":
        line = line.translate(_PANE_ALT)
    return line.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _block(block: Block, base: Path, images: Images, sources: Mapping[Path, str]) -> list[str]:
    if isinstance(block, Para):
        return [block.text]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Table):
        if images != "pane":
            return _table(block)
        lines: list[str] = []
        for part in fit_table(block):
            lines += [*([""] if lines else []), *(_table(part) if isinstance(part, Table) else
                                                   _block(part, base, images, sources))]
        return lines
    if isinstance(block, Image):
        if block.path in sources:
            return [f"![{_alt(block.alt, images)}]({sources[block.path]})"]
        if images == "pane":
            return [f"_Chart: {block.alt} (in the full report)_"]
        if images == "path":
            return [f"_Chart: {block.alt} — `{block.path}`_"]
        rel = Path(os.path.relpath(block.path, base)).as_posix()
        return [f"![{_alt(block.alt, images)}]({rel})"]
    raise TypeError(f"unknown block {block!r}")


def render_markdown(
    doc: Document,
    base: Path,
    images: Images = "link",
    sources: Mapping[Path, str] | None = None,
) -> str:
    """The Markdown text. ``link``: images linked relative to ``base`` (the report's directory);
    ``path``: each chart named by its absolute path; ``pane``: for the Prefect UI's artifact pane, which cannot
    show files and never wraps a table cell (tables fitted by ``roost.report.pane.fit_table``, a chart without a
    source named, not pointed at).
    A chart whose path is in ``sources`` is an image with that source instead (an ``http(s)`` URL, a
    ``data:`` URI).
    """
    srcs = sources or {}
    lines = [f"# {doc.title}", ""]
    lines += [f"- **{k}:** {v}" for k, v in doc.facts]
    for sec in doc.sections:
        lines += ["", f"## {sec.title}"]
        for block in sec.blocks:
            lines += ["", *_block(block, base, images, srcs)]
    return "\n".join(lines) + "\n"


INLINE_MAX_BYTES = 60_000
"""Largest inline chart for an artifact (the Prefect UI renders a ~40 KB ``data:`` PNG)."""


def png_data_uri(path: Path, max_bytes: int = INLINE_MAX_BYTES, width: int = 720) -> str | None:
    """A ``data:image/png`` URI of the chart at ``path``, downscaled and reduced to a palette until
    it is at most ``max_bytes`` long; None if it cannot be made that small or read."""
    from PIL import Image as PilImage  # pillow: matplotlib's own dependency

    try:
        with PilImage.open(path) as im:
            rgb = im.convert("RGB")
    except OSError:
        return None
    w = min(width, rgb.width)
    while w >= 240:
        small = rgb.resize((w, max(1, round(rgb.height * w / rgb.width))), PilImage.Resampling.LANCZOS)
        buf = io.BytesIO()
        small.quantize(colors=128, method=PilImage.Quantize.MEDIANCUT).save(buf, format="PNG", optimize=True)
        uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        if len(uri) <= max_bytes:
            return uri
        w = int(w * 0.8)
    return None


def pane_tables(rows: Sequence[Mapping[str, object]], text: Collection[str] = ()) -> str:
    """Rows of cells (one mapping each, keyed by column) as Markdown for the Prefect UI's artifact pane:
    fitted (``roost.report.pane.fit_table``), every column but those named in ``text`` aligned right as
    numbers, an empty cell for None."""
    headers = list(rows[0])
    table = Table(headers=headers, rows=[["" if v is None else str(v) for v in r.values()] for r in rows],
                  align_right=[i for i, h in enumerate(headers) if h not in text])
    return "\n".join(_block(table, Path("."), "pane", {})) + "\n"
