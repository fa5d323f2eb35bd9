# ruff: noqa: RUF001  (the reports print a real minus sign)
"""The report stage: store -> compare -> render, and the Prefect artifacts with stable keys."""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest
from support.samples import earlier_runs, failed_run, spark_run

from roost.store import append_run, load_records, load_runs
from tasks.report import artifact_key, build_report, headline_table, results_url_for


def test_artifact_keys_are_lowercase_dashes() -> None:
    assert artifact_key("roost-report", "Ornith-9B", "spark") == "roost-report-ornith-9b-spark"
    assert artifact_key("roost-report", "qwen3.5_35b a3b", "DGX/Spark") == "roost-report-qwen3-5-35b-a3b-dgx-spark"
    assert artifact_key("roost-files", "--x--", "") == "roost-files-x"


def test_build_report_stores_compares_and_renders(tmp_path: Path) -> None:
    for r in earlier_runs(4):
        append_run(r, tmp_path)
    current = spark_run(day=9, scale=0.85)
    outcome = build_report(current, tmp_path)
    assert outcome.errors == []
    assert outcome.stored is not None and Path(outcome.stored.run_path).is_file()
    assert outcome.comparison is not None and outcome.comparison.status == "regressed"
    assert outcome.comparison.baseline_run_ids == [r.meta.run_id for r in earlier_runs(4)]
    assert outcome.files is not None and outcome.files.markdown.is_file() and outcome.files.key_chart is not None
    assert outcome.files.directory == tmp_path / "reports/model=deepreinforce--Ornith-1.0-9B/host=spark" / current.meta.run_id
    # the stored record points at its report; the store reads back with one pandas call
    stored = load_records(tmp_path)[-1]
    assert stored.report_path == str(outcome.files.markdown)
    assert list(pd.read_parquet(tmp_path / "runs")["run_id"])[-1] == current.meta.run_id
    # without a results URL the artifact shows every chart inline (small), headline charts first, names no
    # chart by its path on the worker (the Prefect UI cannot show the worker's files) and says how to serve
    # the full report; no file:// link
    md = outcome.artifact_markdown
    assert outcome.urls is None
    inline = re.findall(r"!\[[^\]]*\]\((data:image/png;base64,[A-Za-z0-9+/=]+)\)", md)
    assert len(inline) == len(outcome.files.charts) >= 5 and all(len(uri) <= 60_000 for uri in inline)
    assert base64.b64decode(inline[0].split(",", 1)[1]).startswith(b"\x89PNG")
    assert str(outcome.files.charts["ttft_vs_prompt"]) not in md and "/charts/" not in md
    assert "](charts/" not in md and "file://" not in md
    assert "roost results serve" in md and "ROOST_RESULTS_URL" in md


def test_with_a_results_url_every_chart_and_the_report_are_links_to_the_served_files(tmp_path: Path) -> None:
    outcome = build_report(spark_run(day=1), tmp_path, results_url="http://worker.tailnet:8765/")
    assert outcome.errors == [] and outcome.files is not None and outcome.urls is not None
    base = "http://worker.tailnet:8765/model=deepreinforce--Ornith-1.0-9B/host=spark/" + spark_run(day=1).meta.run_id
    assert outcome.urls.html == f"{base}/report.html"
    assert outcome.urls.key_chart == f"{base}/charts/decode_vs_prompt.png"
    md = outcome.artifact_markdown
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(images) == sorted(f"{base}/charts/{p.name}" for p in outcome.files.charts.values())
    assert f"[report.html]({base}/report.html)" in md and "data:" not in md
    assert str(tmp_path) not in md  # nothing on the worker's disk is named


def test_results_url_for_ignores_a_bad_setting(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("ROOST_RESULTS_URL", "file:///srv/results")
    assert results_url_for("http://spark:8765") == ""
    assert "ROOST_RESULTS_URL 'file:///srv/results': must be an http:// or https:// URL" in caplog.text
    monkeypatch.delenv("ROOST_RESULTS_URL")
    assert results_url_for("http://spark:8765") == "http://spark:8765/"


def test_first_and_failed_runs(tmp_path: Path) -> None:
    first = build_report(spark_run(day=1), tmp_path)
    assert first.comparison is not None and first.comparison.status == "baseline"
    failed = build_report(failed_run(), tmp_path)
    assert failed.comparison is not None and failed.comparison.status == "failed_run"
    assert failed.files is not None and "failed at stage `serve`" in failed.files.markdown.read_text()
    assert list(load_runs(tmp_path)["status"]) == ["completed", "failed"]


def test_storing_a_run_twice_is_a_warning_not_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    build_report(spark_run(day=1), tmp_path)
    again = build_report(spark_run(day=1), tmp_path)
    assert again.errors == [] and again.stored is None and again.files is not None
    assert "already in the results store" in caplog.text
    assert len(load_runs(tmp_path)) == 1


def test_an_unwritable_store_is_reported_and_the_stage_carries_on(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file where the results directory should be")
    outcome = build_report(spark_run(day=1), blocker)
    assert outcome.stored is None and outcome.files is None
    assert any(e.startswith("store:") for e in outcome.errors) and any(e.startswith("report:") for e in outcome.errors)
    assert outcome.comparison is not None and outcome.comparison.status == "baseline"


def test_headline_table_rows() -> None:
    hist = earlier_runs(4)
    current = spark_run(day=9, scale=0.85)
    from roost.regress import compare

    rows = {r["metric"]: r for r in headline_table(current, compare(current, hist))}
    decode = rows["decode tok/s @ 2,042-token prompt"]
    assert decode == {"metric": "decode tok/s @ 2,042-token prompt", "value": "10.7 tok/s", "change": "−14.8%",
                      "verdict": "regressed"}  # the baseline's value is in the report (the table fits its pane)
    assert rows["KV cache (vLLM log)"]["value"] == "390,070 tokens"  # the plan's figure is in the report's note
    assert rows["verdict"]["verdict"].startswith("REGRESSED")
    # every regressed metric has its row, headline or not
    assert {r["metric"] for r in rows.values() if r["verdict"] == "regressed"} >= {"decode tok/s @ 2,042-token prompt"}


@pytest.mark.slow
def test_report_task_publishes_artifacts_with_stable_keys(prefect_api: str, tmp_path: Path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from tasks.report import ReportOutcome, publish_artifacts, report_task

    base = "http://127.0.0.1:8765/"

    @flow(name="report-test")
    def run_report(day: int, scale: float, url: str) -> ReportOutcome:
        record = spark_run(day=day, scale=scale)
        outcome = report_task(record, results_root=tmp_path, results_url=url)
        outcome.artifact_keys = publish_artifacts(record, outcome)  # in the flow: the flow run's artifacts
        return outcome

    import datetime as dt

    started = dt.datetime.now(dt.UTC)  # the session's server holds other tests' artifacts under these keys
    first = run_report(1, 1.0, "")  # no results URL: no link or image artifact
    assert first.artifact_keys == {"markdown": "roost-report-ornith-9b-spark", "table": "roost-headline-ornith-9b-spark"}
    outcomes = [first, *(run_report(day, 1.0, base) for day in (2, 3, 4)), run_report(5, 0.85, base)]
    # no verdict before three earlier comparable runs
    assert [o.comparison.status for o in outcomes if o.comparison] == ["baseline", "insufficient", "insufficient",
                                                                      "ok", "regressed"]
    keys = outcomes[-1].artifact_keys
    assert keys == {"markdown": "roost-report-ornith-9b-spark", "table": "roost-headline-ornith-9b-spark",
                    "link": "roost-files-ornith-9b-spark", "image": "roost-chart-ornith-9b-spark"}
    assert outcomes[1].artifact_keys == keys

    with get_client(sync_client=True) as client:
        arts = [a for a in client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=list(keys.values())))) if a.created is not None and a.created >= started]
    by_key: dict[str, list[object]] = {}
    for a in arts:
        by_key.setdefault(str(a.key), []).append(a)
    assert {k: len(v) for k, v in by_key.items()} == {k: 5 if k in first.artifact_keys.values() else 4
                                                    for k in keys.values()}  # one per run: the key's history
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:  # each run's artifacts belong to its flow run, not a task run
        for a in arts:
            assert a.flow_run_id is not None and a.task_run_id is None  # type: ignore[attr-defined]
        assert len(client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(
            any_=list({a.flow_run_id for a in arts}))))) == 5  # type: ignore[attr-defined, misc]
    latest = {k: max(v, key=lambda a: a.created) for k, v in by_key.items()}  # type: ignore[attr-defined]
    md = latest[keys["markdown"]]
    assert md.type == "markdown"  # type: ignore[attr-defined]
    assert "| Decode tok/s @ 2,042-token prompt | 10.7 tok/s |" in md.data  # type: ignore[attr-defined]
    assert "**REGRESSED**" in md.data  # type: ignore[attr-defined]
    table = latest[keys["table"]]
    assert table.type == "table"  # type: ignore[attr-defined]
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data  # type: ignore[attr-defined]
    assert {"metric": "decode tok/s @ 2,042-token prompt", "value": "10.7 tok/s", "change": "−15.0%",
            "verdict": "regressed"} in rows
    link = latest[keys["link"]]
    files = outcomes[-1].files
    assert files is not None
    urls = outcomes[-1].urls
    assert urls is not None and urls.html.startswith(base) and urls.html.endswith(f"/{files.directory.name}/report.html")
    # Prefect stores a link artifact as Markdown: [text](link)
    assert link.data == f"[HTML report ({outcomes[-1].stored.run_id})]({urls.html})"  # type: ignore[attr-defined, union-attr]
    assert latest[keys["image"]].data == urls.key_chart  # type: ignore[attr-defined]
    assert "![" in md.data and f"]({urls.key_chart})" in md.data  # type: ignore[attr-defined]
