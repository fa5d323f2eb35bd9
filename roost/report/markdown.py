"""Render the report document as GitHub-flavoured Markdown (charts linked by relative path)."""

from __future__ import annotations

import os
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


def _block(block: Block, base: Path, images: Literal["link", "path"]) -> list[str]:
    if isinstance(block, Para):
        return [block.text]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        if images == "path":
            return [f"_Chart: {block.alt} — `{block.path}`_"]
        rel = Path(os.path.relpath(block.path, base)).as_posix()
        return [f"![{block.alt}]({rel})"]
    raise TypeError(f"unknown block {block!r}")


def render_markdown(doc: Document, base: Path, images: Literal["link", "path"] = "link") -> str:
    """The Markdown text. ``link``: images linked relative to ``base`` (the report's directory);
    ``path``: each chart named by its absolute path (for a Prefect artifact, which cannot show files).
    """
    lines = [f"# {doc.title}", ""]
    lines += [f"- **{k}:** {v}" for k, v in doc.facts]
    for sec in doc.sections:
        lines += ["", f"## {sec.title}"]
        for block in sec.blocks:
            lines += ["", *_block(block, base, images)]
    return "\n".join(lines) + "\n"
