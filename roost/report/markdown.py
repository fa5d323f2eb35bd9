"""Render the report document as GitHub-flavoured Markdown (charts linked by relative path), and
small inline PNGs for a Prefect artifact (``png_data_uri``)."""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from roost.report.document import Block, Bullets, Document, Image, Para, Table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> list[str]:
    align = ["---:" if i in t.align_right else "---" for i in range(len(t.headers))]
    lines = ["| " + " | ".join(_cell(h) for h in t.headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    return lines


def _block(block: Block, base: Path, images: Literal["link", "path"], sources: Mapping[Path, str]) -> list[str]:
    if isinstance(block, Para):
        return [block.text]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        if block.path in sources:
            return [f"![{block.alt}]({sources[block.path]})"]
        if images == "path":
            return [f"_Chart: {block.alt} — `{block.path}`_"]
        rel = Path(os.path.relpath(block.path, base)).as_posix()
        return [f"![{block.alt}]({rel})"]
    raise TypeError(f"unknown block {block!r}")


def render_markdown(
    doc: Document,
    base: Path,
    images: Literal["link", "path"] = "link",
    sources: Mapping[Path, str] | None = None,
) -> str:
    """The Markdown text. ``link``: images linked relative to ``base`` (the report's directory);
    ``path``: each chart named by its absolute path (for a Prefect artifact, which cannot show files).
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
