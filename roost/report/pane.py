# ruff: noqa: RUF001  (the typographic characters the report uses, measured)
"""Tables that fit the Prefect UI's artifact pane (pure: a table in, narrower blocks out).

The Prefect UI renders an artifact's Markdown in a column about 726 px wide at a 1,280 px window, and its
tables never wrap a cell (``white-space: nowrap``): a table wider than the column scrolls sideways, its last
columns out of view. So the artifact (not the HTML report, which wraps) gets each table as it fits:

- a table whose widest row of cells fits is kept as it is;
- a table with a column too wide to sit beside its first column even alone (a sentence in a cell) becomes one
  bullet per row, which wraps;
- any other wide table is split into several, each with the first column (the row's key) and as many of the
  next columns as fit.

Widths are estimated from the advance widths of the UI's font (Inter, 14 px; bold in headers; code spans in
its monospace), measured in Chromium on the UI's own page; ``tests/tasks/test_report_artifact_browser.py``
checks the estimate against the real page.
"""

from __future__ import annotations

import re

from roost.report.blocks import Block, Bullets, Table

PANE_PX = 700.0
"""The width a table may take in the artifact pane at a 1,280 px window: the Markdown column (726 px, measured)
less the table's margin and border, and a few pixels for the estimate's error."""
CELL_PAD_PX = 25.0
"""A cell's horizontal padding (12 px each side) and its border."""
CODE_PAD_PX = 8.0
"""A code span's own padding."""
CODE_CHAR_PX = 7.4
"""A character of a code span (the UI's monospace at 12.25 px)."""

# advance widths (px) of ASCII 32..126 in Inter at 14 px, regular and bold (measured in the Prefect UI)
_TEXT = (3.9, 4.0, 6.5, 8.9, 9.0, 13.7, 9.0, 4.2, 5.1, 5.1, 7.0, 9.3, 4.0, 6.4, 4.0, 5.0, 8.8, 5.7, 8.5, 8.6, 9.0, 8.3,
         8.7, 8.2, 8.7, 8.7, 4.0, 4.2, 9.3, 9.3, 9.3, 7.2, 13.5, 9.9, 9.2, 10.2, 10.1, 8.4, 8.3, 10.4, 10.4, 3.8, 8.0,
         9.4, 7.9, 12.6, 10.5, 10.7, 8.9, 10.7, 9.0, 9.0, 9.0, 10.4, 9.9, 14.1, 9.6, 9.5, 8.8, 5.1, 4.4, 5.1, 6.6, 6.4,
         4.5, 7.9, 8.6, 8.0, 8.6, 8.2, 4.7, 8.6, 8.3, 3.4, 3.4, 7.7, 3.4, 12.3, 8.3, 8.4, 8.6, 8.6, 5.5, 7.4, 4.6, 8.3,
         7.9, 11.5, 7.6, 7.9, 7.7, 6.0, 4.7, 6.0, 9.3)
_BOLD = (3.5, 4.5, 7.3, 9.0, 9.1, 14.1, 9.3, 4.6, 5.2, 5.2, 7.6, 9.4, 4.5, 6.5, 4.5, 5.3, 9.2, 5.9, 8.7, 8.9, 9.3, 8.6,
         9.0, 8.3, 9.0, 9.0, 4.5, 4.6, 9.4, 9.4, 9.4, 7.6, 14.0, 10.4, 9.2, 10.3, 10.1, 8.5, 8.2, 10.5, 10.4, 3.9, 8.1,
         9.8, 7.9, 12.9, 10.6, 10.8, 9.0, 10.8, 9.1, 9.1, 9.2, 10.3, 10.4, 14.6, 10.1, 10.0, 9.1, 5.2, 4.7, 5.2, 6.7, 6.6,
         4.9, 8.0, 8.7, 8.2, 8.7, 8.3, 4.9, 8.8, 8.6, 3.7, 3.7, 8.0, 3.7, 12.6, 8.6, 8.5, 8.7, 8.7, 5.7, 7.7, 4.8, 8.6,
         8.2, 11.8, 8.0, 8.2, 7.9, 6.4, 5.0, 6.4, 9.4)
_OTHER = {"—": 14.0, "–": 7.0, "×": 9.4, "≥": 11.7, "≤": 11.7, "±": 9.4, "…": 13.4, "·": 4.5, "→": 11.7, "µ": 8.6}
_WIDEST = 14.6
"""Any other character is taken as wide as the widest measured: an estimate errs towards splitting."""

_SPANS = re.compile(r"`([^`]*)`|\*\*(.+?)\*\*|\[([^\]]*)\]\([^)]*\)")


def _chars_px(text: str, bold: bool) -> float:
    table = _BOLD if bold else _TEXT
    return sum(table[ord(c) - 32] if 32 <= ord(c) < 127 else _OTHER.get(c, _WIDEST) for c in text)


def text_px(text: str, bold: bool = False) -> float:
    """The width of one line of the report's inline syntax (``**bold**``, ```code```, ``[text](url)``) in the pane."""
    width, at = 0.0, 0
    for m in _SPANS.finditer(text):
        width += _chars_px(text[at : m.start()], bold)
        code, strong, link = m.groups()
        if code is not None:
            width += len(code) * CODE_CHAR_PX + CODE_PAD_PX
        elif strong is not None:
            width += _chars_px(strong, True)
        else:
            width += _chars_px(link or "", bold)
        at = m.end()
    return width + _chars_px(text[at:], bold)


def column_px(table: Table) -> list[float]:
    """Each column's width: its widest cell (the header in bold) and the cell's padding."""
    widths = [text_px(h, bold=True) for h in table.headers]
    for row in table.rows:
        for i, cell in enumerate(row[: len(widths)]):
            widths[i] = max(widths[i], text_px(cell))
    return [w + CELL_PAD_PX for w in widths]


def fit_table(table: Table, pane_px: float = PANE_PX) -> list[Block]:
    """``table`` as blocks that fit ``pane_px`` (the module's docstring): itself, bullets, or narrower tables."""
    widths = column_px(table)
    if sum(widths) <= pane_px or len(widths) < 2:
        return [table]
    if any(widths[0] + w > pane_px for w in widths[1:]):
        return [as_bullets(table)]
    groups: list[list[int]] = []
    for i in range(1, len(widths)):
        if groups and widths[0] + sum(widths[j] for j in groups[-1]) + widths[i] <= pane_px:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [_columns(table, [0, *g]) for g in groups]


def _columns(table: Table, keep: list[int]) -> Table:
    return Table(headers=[table.headers[i] for i in keep],
                 rows=[[row[i] if i < len(row) else "" for i in keep] for row in table.rows],
                 align_right=[n for n, i in enumerate(keep) if i in table.align_right])


def as_bullets(table: Table) -> Bullets:
    """One bullet per row: ``**key** — header: value · header: value`` (empty and dash-only cells left out)."""
    items = []
    for row in table.rows:
        rest = [f"{h}: {c}" for h, c in zip(table.headers[1:], row[1:], strict=False) if c.strip() not in ("", "—")]
        items.append(f"**{row[0]}**" + (" — " + " · ".join(rest) if rest else "") if row else "")
    return Bullets(items=[i for i in items if i])
