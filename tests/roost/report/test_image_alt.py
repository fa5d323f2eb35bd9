"""A chart's alt text reaches the reader as written (issue 39: "server&#39;s cap" showed literally):
HTML-escaped exactly once in ``report.html``, and in the Markdown (report.md, the Prefect artifact) an
image whose alt text a CommonMark renderer reads back whole, ``]`` included."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from roost.report.document import Document, Image, Section
from roost.report.html import render_html
from roost.report.markdown import render_markdown

ALT = "Aggregate output vs concurrency: the server's cap & queueing <above> [the knee] ends here"


class _Alts(HTMLParser):
    """The decoded ``alt`` and ``title`` of every ``<img>`` (what a browser shows)."""

    def __init__(self) -> None:
        super().__init__()
        self.alts: list[str] = []
        self.titles: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.alts.append(dict(attrs).get("alt") or "")
            self.titles.append(dict(attrs).get("title") or "")


def _alts(page: str) -> _Alts:
    parser = _Alts()
    parser.feed(page)
    return parser


@pytest.fixture
def doc(tmp_path: Path) -> Document:
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG\r\n\x1a\n")
    return Document(title="t", facts=[], sections=[Section(title="s", blocks=[Image(alt=ALT, path=chart)])])


def test_html_escapes_alt_text_once(doc: Document) -> None:
    page = render_html(doc)
    shown = _alts(page)
    assert shown.alts == [ALT] and shown.titles == [ALT]  # decoded once by the browser: the text as written
    assert "&amp;#" not in page and "&amp;amp;" not in page and "&amp;lt;" not in page  # never escaped twice
    assert "<above>" not in page  # and never left unescaped


def test_markdown_alt_text_reads_back_whole(doc: Document, tmp_path: Path) -> None:
    text = render_markdown(doc, tmp_path)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("![")]
    assert "[the knee]" not in line  # a bare ] would end the alt text early
    rendered = MarkdownIt("commonmark").render(text)
    assert _alts(rendered).alts == [ALT]  # one escaping, by the renderer: what the reader sees is the text


PREFECT_UI_ESCAPES = "&<>\"'"
"""What the Prefect UI's Markdown renderer (marked: an image token's ``text`` is ``escape(text)``) escapes
in alt text before the page escapes the attribute again: any of these shows as ``&#39;``, ``&amp;``..."""


def test_artifact_alt_text_has_nothing_the_prefect_ui_escapes_twice(doc: Document, tmp_path: Path) -> None:
    (chart,) = [b.path for s in doc.sections for b in s.blocks if isinstance(b, Image)]
    text = render_markdown(doc, tmp_path, images="pane", sources={chart: "data:image/png;base64,AA=="})
    (line,) = [ln for ln in text.splitlines() if ln.startswith("![")]
    alt = line[2:line.rindex("](")]
    assert not set(alt) & set(PREFECT_UI_ESCAPES)
