"""Tables fitted to the Prefect UI's artifact pane (``roost.report.pane``); the estimate is checked against the
real page by ``tests/tasks/test_report_artifact_browser.py``."""

from __future__ import annotations

from pathlib import Path

from support.samples import spark_record

from roost.report.blocks import Bullets, Table
from roost.report.document import build_document
from roost.report.markdown import render_markdown
from roost.report.pane import PANE_PX, column_px, fit_table, text_px


def test_widths_follow_the_font_and_the_inline_syntax() -> None:
    assert text_px("iiii") < text_px("MMMM")
    assert text_px("**Decode**") > text_px("Decode")  # bold is wider
    assert text_px("[run 1](http://host/a/very/long/url)") == text_px("run 1")  # a link shows its text only
    assert text_px("`abc`") == 3 * 7.4 + 8.0  # monospace and the code span's padding


def test_a_table_that_fits_is_kept_as_it_is() -> None:
    table = Table(headers=["Headline", "Value"], rows=[["Decode tok/s", "12.6 tok/s"]], align_right=[1])
    assert fit_table(table) == [table]


def test_a_wide_table_is_split_with_its_key_column_repeated_and_alignment_kept() -> None:
    headers = ["Prompt tokens", *(f"Statistic number {i}" for i in range(8))]
    table = Table(headers=headers, rows=[["2,048", *(f"{i}.00 tok/s" for i in range(8))]], align_right=list(range(9)))
    parts = fit_table(table)
    assert len(parts) > 1 and all(isinstance(p, Table) for p in parts)
    for part in parts:
        assert isinstance(part, Table)
        assert part.headers[0] == "Prompt tokens" and sum(column_px(part)) <= PANE_PX
        assert part.align_right == list(range(len(part.headers)))
    # every column once, in order
    assert [h for p in parts if isinstance(p, Table) for h in p.headers[1:]] == headers[1:]


def test_a_sentence_in_a_cell_turns_the_table_into_bullets() -> None:
    finding = "config sets mtp_num_hidden_layers: 1 but no mtp.* tensor is in the index; " * 3
    table = Table(headers=["Severity", "Code", "Finding"], rows=[["warning", "`MTP`", finding], ["info", "`X`", "—"]])
    (bullets,) = fit_table(table)
    assert isinstance(bullets, Bullets)
    assert bullets.items == [f"**warning** — Code: `MTP` · Finding: {finding}", "**info** — Code: `X`"]


def test_the_artifact_rendering_fits_every_table_and_the_report_file_keeps_them_whole(tmp_path: Path) -> None:
    doc = build_document(spark_record(), [], None, {})
    pane = render_markdown(doc, tmp_path, images="pane")
    for block in (ln for ln in pane.split("\n\n") if ln.startswith("| ")):
        header = [c.strip() for c in block.splitlines()[0].strip("|").split(" | ")]
        rows = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in block.splitlines()[2:]]
        assert sum(column_px(Table(headers=header, rows=rows))) <= PANE_PX, header
    # the sample's findings hold sentences (bullets), its per-point tables are wider than the pane (split)
    assert "- **warning** — Code: `MTP_ADVERTISED_NOT_SHIPPED` · Finding: config sets" in pane
    assert pane.count("| Prompt tokens |") >= 2 and pane.count("| Run |") >= 2
    whole = render_markdown(doc, tmp_path)
    assert "| Prompt tokens | Output tokens | OK/requests |" in whole  # report.md: one table per section
    assert "| Severity | Code | Finding |" in whole and pane.count("| Prompt tokens |") > whole.count("| Prompt tokens |")
