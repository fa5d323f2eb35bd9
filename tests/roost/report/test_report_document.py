"""The report's points tables: prefill, the server's peak running and waiting, unmeasurable decode timings."""

from __future__ import annotations

from pathlib import Path

from support.samples import spark_record
from test_report_charts import queued_record

from roost.records import RunRecord
from roost.report.document import Section, Table, build_document
from roost.report.markdown import render_markdown


def section(record: RunRecord, title: str, charts: dict[str, Path] | None = None) -> Section:
    doc = build_document(record, [], None, charts or {})
    (sec,) = [s for s in doc.sections if s.title == title]
    return sec


def table(sec: Section) -> Table:
    return next(b for b in sec.blocks if isinstance(b, Table))


def texts(sec: Section) -> list[str]:
    return [b.text for b in sec.blocks if b.kind == "para"]  # type: ignore[union-attr]


def test_the_prompt_length_table_has_the_prefill_rate_and_its_chart(tmp_path: Path) -> None:
    sec = section(queued_record(), "Decode and TTFT vs prompt length", {"prefill_vs_prompt": tmp_path / "p.png"})
    t = table(sec)
    assert t.headers[-1] == "Prefill tok/s (median)" and len(t.headers) == len(t.rows[0])
    by_prompt = {row[0]: row[-1] for row in t.rows}
    # the 9B recipe: ~4,430 tok/s around 8K, ~2,300 by 250K (prompt tokens / TTFT)
    assert by_prompt["8,206"] == "4,436" and by_prompt["250,223"] == "2,296"
    assert any(b.kind == "image" and b.path == tmp_path / "p.png" for b in sec.blocks)
    # a record from before prefill was kept: the column reads "—"
    assert {row[-1] for row in table(section(spark_record(), "Decode and TTFT vs prompt length")).rows} == {"—"}


def test_the_concurrency_table_shows_peak_running_and_waiting_and_who_queued() -> None:
    sec = section(queued_record(), "Throughput vs concurrency")
    t = table(sec)
    assert t.headers[-3:] == ["Peak running", "Peak waiting", "Mean queue time (s)"]
    peaks = {row[0]: (row[-3], row[-2]) for row in t.rows}
    assert peaks["16"] == ("16", "0") and peaks["20"] == ("20", "0") and peaks["24"] == ("20", "4")
    (note,) = [x for x in texts(sec) if "queued" in x]
    assert note == ("The server runs at most 20 requests at once (`--max-num-seqs 20`). Requests queued at 24 (4 waiting) "
                    "concurrent: those users waited for a running slot instead of decoding.")
    # an older record (no gauges): "—", and only the cap is said
    old = section(spark_record(), "Throughput vs concurrency")
    assert {row[-1] for row in table(old).rows} == {row[-2] for row in table(old).rows} == {"—"}
    assert "The server runs at most 20 requests at once (`--max-num-seqs 20`)." in texts(old)


def test_no_queueing_is_said_when_the_gauges_saw_none() -> None:
    rec = queued_record()
    rec.points = [p for p in rec.points if p.kind == "prompt_length" or p.concurrency <= 20]
    rec.meta.vllm_args = []
    assert "No request queued at any level (mean queue time under 0.01 s, peak waiting 0)." in texts(
        section(rec, "Throughput vs concurrency"))


def test_a_queue_the_gauges_missed_is_read_from_vllms_queue_time() -> None:
    """The local profile on vLLM CPU: --max-num-seqs 2, 4 users, a step shorter than the 2 s gauge poll."""
    rec = queued_record()
    for p in rec.points:
        if p.kind == "concurrency":
            p.metrics_delta = {"num_requests_waiting_max": 0.0, "request_queue_count": float(p.requests),
                               "request_queue_time_s_mean": 0.48 if p.concurrency == 24 else 0.00002}
    sec = section(rec, "Throughput vs concurrency")
    assert {row[0]: row[-1] for row in table(sec).rows}["24"] == "0.48"
    (note,) = [x for x in texts(sec) if "queued" in x]
    assert "Requests queued at 24 (0.48 s mean queue time) concurrent" in note


def test_unmeasurable_decode_timings_are_counted_where_they_happened(tmp_path: Path) -> None:
    rec = queued_record()
    first = rec.points[0].model_copy(update={"unmeasurable": 2, "unmeasurable_reasons":
                                             "1 above the roofline ceiling, 1 delivered in a burst"})
    rec.points = [first, *rec.points[1:]]
    sec = section(rec, "Decode and TTFT vs prompt length")
    assert table(sec).rows[0][2] == "3/3 (2 unmeasurable)" and table(sec).rows[1][2] == "3/3"
    (note,) = [x for x in texts(sec) if "nmeasurable" in x]
    assert note == ("**Unmeasurable decode timings** — 511-token prompt: 2 of 3 (1 above the roofline ceiling, "
                    "1 delivered in a burst). Left out of decode tok/s, TPOT and ITL (the rule: "
                    "`roost/bench/validity.py`).")
    md = render_markdown(build_document(rec, [], None, {}), tmp_path)
    assert "| Unmeasurable decode timings | 2 of 164 |" in md  # the summary's headline row: the count in the cell
    assert ("- **Unmeasurable decode timings:** 511-token prompt: 2 (1 above the roofline ceiling, 1 delivered in a "
            "burst)") in md  # where and why under the table
    # none: no note, no headline row
    clean = render_markdown(build_document(queued_record(), [], None, {}), tmp_path)
    assert "nmeasurable" not in clean


def test_the_facts_name_the_serving_images_xgrammar_when_the_record_has_one() -> None:
    record = spark_record()
    assert "xgrammar" not in dict(build_document(record, [], None, {}).facts)  # a record from before the field
    record.meta.xgrammar_version = "0.2.3"
    facts = build_document(record, [], None, {}).facts
    assert dict(facts)["xgrammar"] == "`0.2.3`"
    labels = [label for label, _ in facts]
    assert labels.index("xgrammar") == labels.index("Image") + 2  # after the image and its vLLM
