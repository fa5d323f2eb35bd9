from __future__ import annotations

from roost.report.html import inline


def test_links_bold_and_code_become_tags_and_everything_else_is_escaped() -> None:
    text = "[`20260309T020000Z-0009`](http://ui:4200/runs/flow-run/7d2f?a=1&b=2) **REGRESSED** <script>"
    assert inline(text) == ('<a href="http://ui:4200/runs/flow-run/7d2f?a=1&amp;b=2"><code>20260309T020000Z-0009</code></a> '
                            '<strong class="bad">REGRESSED</strong> &lt;script&gt;')


def test_only_http_links_are_made() -> None:
    assert inline("[x](javascript:alert(1))") == "[x](javascript:alert(1))"
    assert '"' not in inline('[x](http://h/"onmouseover=1)').split('href="')[1].split('">')[0]
