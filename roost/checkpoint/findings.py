"""One audit or preflight observation (:class:`Finding`), declared apart from the run records that carry it
(``roost.records`` re-exports it): reading a checkpoint's findings loads no run record shape (``roost audit``
starts faster)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Severity = Literal["info", "warning", "error"]


class Finding(BaseModel):
    """One audit or preflight observation. ``code`` is stable (UPPER_SNAKE); scripts match on it."""

    code: str
    severity: Severity
    message: str = Field(description="One sentence: what was found and what to do.")
