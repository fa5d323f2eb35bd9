"""The History section's links to earlier runs in the Prefect UI: plain link text (the UI's Markdown shows a
code span inside a link as raw backticks), and a link only to a flow run the report's own server holds."""

from __future__ import annotations

import re
from pathlib import Path

from support.samples import spark_run

from roost.records import RunRecord
from roost.report.blocks import Table
from roost.report.document import build_document
from roost.report.markdown import render_markdown
from roost.report.sections.history import history_section, run_link

TEAM = "http://prefect.team:4200"
OTHER = "http://10.0.0.7:4200"


def _run(day: int, ui: str, flow_run_id: str = "") -> RunRecord:
    run: RunRecord = spark_run(day=day, flow_run_id=flow_run_id or f"00000000-0000-4000-8000-0000000000{day:02d}")
    run.meta.prefect_ui_url = ui
    return run


def _run_cells(record: RunRecord, history: list[RunRecord], ui_url: str) -> dict[str, str]:
    table = history_section(record, history, None, {}, ui_url).blocks[0]
    assert isinstance(table, Table)
    return {row[1]: row[0] for row in table.rows}  # started -> the Run cell


def test_a_run_on_the_reports_server_links_with_its_id_as_plain_text() -> None:
    current, earlier = _run(9, TEAM), _run(1, TEAM + "/")  # a trailing slash is the same UI
    cells = _run_cells(current, [earlier], TEAM)
    assert cells["2026-03-01 02:00"] == (f"[{earlier.meta.run_id}]({TEAM}/runs/flow-run/"
                                         f"{earlier.meta.prefect_flow_run_id})")
    assert cells["2026-03-09 02:00"] == (f"[{current.meta.run_id}]({TEAM}/runs/flow-run/"
                                         f"{current.meta.prefect_flow_run_id}) (this run)")


def test_no_link_to_a_run_another_or_a_temporary_server_held() -> None:
    current = _run(9, TEAM)
    temporary, elsewhere, older = _run(1, ""), _run(2, OTHER), _run(3, "")
    older.meta = older.meta.model_validate(older.meta.model_dump(exclude={"prefect_ui_url"}))  # before the field
    cells = _run_cells(current, [temporary, elsewhere, older], TEAM)
    assert cells["2026-03-01 02:00"] == f"`{temporary.meta.run_id}`"
    assert cells["2026-03-02 02:00"] == f"`{elsewhere.meta.run_id}`"
    assert cells["2026-03-03 02:00"] == f"`{older.meta.run_id}`"
    assert cells["2026-03-09 02:00"].startswith(f"[{current.meta.run_id}](")


def test_a_report_made_through_a_temporary_server_links_nothing() -> None:
    current, earlier = _run(9, ""), _run(1, TEAM)
    for ui_url in ("", TEAM):  # the report's UI unknown, or one the run itself is not on
        cells = _run_cells(current, [earlier], ui_url)
        assert cells["2026-03-09 02:00"] == f"`{current.meta.run_id}` (this run)"
    assert run_link(current.meta, "") == "" and run_link(earlier.meta, "") == ""
    assert run_link(earlier.meta, TEAM) == f"{TEAM}/runs/flow-run/{earlier.meta.prefect_flow_run_id}"


def test_a_run_without_a_flow_run_links_nothing() -> None:
    run = spark_run(day=1)  # made outside Prefect: no flow run id
    run.meta.prefect_ui_url = TEAM
    assert run_link(run.meta, TEAM) == ""


def test_a_run_id_that_is_not_roosts_own_stays_a_code_span() -> None:
    current, odd = _run(9, TEAM), _run(1, TEAM)
    odd.meta.run_id = "run [1](javascript:x)"
    cells = _run_cells(current, [odd], TEAM)
    assert cells["2026-03-01 02:00"] == "`run [1](javascript:x)`"


def test_the_reports_markdown_has_no_markup_inside_a_links_text(tmp_path: Path) -> None:
    current, earlier = _run(9, TEAM), _run(1, TEAM)
    text = render_markdown(build_document(current, [earlier], None, {}, ui_url=TEAM), tmp_path, images="path")
    links = re.findall(r"\[([^\]]*)\]\((http[^)]*)\)", text)
    assert (earlier.meta.run_id, f"{TEAM}/runs/flow-run/{earlier.meta.prefect_flow_run_id}") in links
    assert (current.meta.run_id, f"{TEAM}/runs/flow-run/{current.meta.prefect_flow_run_id}") in links
    assert not [label for label, _ in links if "`" in label]
    spans = [span for line in text.splitlines() for span in re.findall(r"`[^`]*`", line)]
    assert spans and not [span for span in spans if "](" in span]  # nor a link inside a code span
