"""Render the report document as one self-contained HTML file (charts embedded as base64 PNG)."""

from __future__ import annotations

import base64
import html
import re

from roost.report.document import Block, Bullets, Document, Image, Para, Table

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1d1d1f;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ddd;padding-bottom:.3em}h2{font-size:1.25em;margin-top:1.8em;
border-bottom:1px solid #eee;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}th,td{border:1px solid #ddd;padding:.3em .6em;
vertical-align:top}th{background:#f5f5f7;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{background:#f2f2f4;padding:0 .25em;border-radius:3px;font-size:.92em}
img{max-width:100%;border:1px solid #eee;margin:.6em 0}ul.facts{list-style:none;padding-left:0}
strong.bad{color:#b00020}
"""

_CODE = re.compile(r"`([^`]*)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")


def inline(text: str) -> str:
    """Escape text, then turn ``**bold**``, ```code``` and ``[text](http(s) URL)`` into tags."""
    out = html.escape(text, quote=False)
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    out = _LINK.sub(lambda m: f'<a href="{html.escape(html.unescape(m.group(2)))}">{m.group(1)}</a>', out)
    return _BOLD.sub(_strong, out)


def _strong(m: re.Match[str]) -> str:
    cls = ' class="bad"' if m.group(1) == "REGRESSED" else ""
    return f"<strong{cls}>{m.group(1)}</strong>"


def _table(t: Table) -> str:
    head = "".join(f"<th>{inline(h)}</th>" for h in t.headers)
    body = []
    for row in t.rows:
        cells = "".join(
            f"<td class=\"num\">{inline(c)}</td>" if i in t.align_right else f"<td>{inline(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _block(block: Block) -> str:
    if isinstance(block, Para):
        return f"<p>{inline(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{inline(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        data = base64.b64encode(block.path.read_bytes()).decode("ascii")
        alt = html.escape(block.alt)
        return f"<figure><img alt=\"{alt}\" title=\"{alt}\" src=\"data:image/png;base64,{data}\"></figure>"
    raise TypeError(f"unknown block {block!r}")


def render_html(doc: Document) -> str:
    """A complete HTML page with no external references."""
    parts = [
        "<!DOCTYPE html>",
        "<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
        "<ul class=\"facts\">" + "".join(f"<li><strong>{html.escape(k)}:</strong> {inline(v)}</li>" for k, v in doc.facts) + "</ul>",
    ]
    for sec in doc.sections:
        parts.append(f"<section><h2>{html.escape(sec.title)}</h2>")
        parts += [_block(b) for b in sec.blocks]
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
