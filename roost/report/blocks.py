"""The report as a small document tree, which ``markdown.py`` and ``html.py`` render from one source.

Text uses a tiny inline syntax both renderers understand: ``**bold**`` and ```code```.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class Para(BaseModel):
    kind: Literal["para"] = "para"
    text: str


class Bullets(BaseModel):
    kind: Literal["bullets"] = "bullets"
    items: list[str]


class Table(BaseModel):
    kind: Literal["table"] = "table"
    headers: list[str]
    rows: list[list[str]]
    align_right: list[int] = Field(default_factory=list, description="Column indexes holding numbers.")


class Image(BaseModel):
    kind: Literal["image"] = "image"
    alt: str
    path: Path


Block = Para | Bullets | Table | Image


class Section(BaseModel):
    title: str
    blocks: list[Block] = Field(default_factory=list)


class Document(BaseModel):
    title: str
    facts: list[tuple[str, str]]
    sections: list[Section]


def code(text: object) -> str:
    """Inline code, safe for the tiny syntax (backticks inside are replaced)."""
    return "`" + str(text).replace("`", "'") + "`"
