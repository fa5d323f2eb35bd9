# ruff: noqa: RUF001  (the reports print a real minus sign)
"""The report stage: store -> compare -> render, and the Prefect artifacts with stable keys."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest
from support.samples import earlier_runs, failed_run, spark_run

from roost.store import append_run, load_records, load_runs
from tasks.report import artifact_key, build_report, headline_table


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
    assert outcome.stored is not None and outcome.stored.run_path.is_file()
    assert outcome.comparison is not None and outcome.comparison.status == "regressed"
    assert outcome.comparison.baseline_run_ids == [r.meta.run_id for r in earlier_runs(4)]
    assert outcome.files is not None and outcome.files.markdown.is_file() and outcome.files.key_chart is not None
    assert outcome.files.directory == tmp_path / "reports/model=deepreinforce--Ornith-1.0-9B/host=spark" / current.meta.run_id
    # the stored record points at its report; the store reads back with one pandas call
    stored = load_records(tmp_path)[-1]
    assert stored.report_path == str(outcome.files.markdown)
    assert list(pd.read_parquet(tmp_path / "runs")["run_id"])[-1] == current.meta.run_id
    # the artifact markdown names charts by path (the Prefect UI cannot show local files)
    assert f"`{outcome.files.charts['decode_vs_prompt']}`" in outcome.artifact_markdown
    assert "](charts/" not in outcome.artifact_markdown


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
    assert decode == {"metric": "decode tok/s @ 2,042-token prompt", "value": "10.7 tok/s", "baseline": "12.6 tok/s",
                      "change": "−14.8%", "verdict": "regressed"}
    assert rows["KV cache (vLLM log)"]["value"] == "390,070 tokens (plan 390,070)"
    assert rows["status"]["verdict"] == "regressed"


@pytest.mark.slow
def test_report_task_publishes_artifacts_with_stable_keys(prefect_api: str, tmp_path: Path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from tasks.report import ReportOutcome, report_task

    @flow(name="report-test")
    def run_report(day: int, scale: float) -> ReportOutcome:
        return report_task(spark_run(day=day, scale=scale), results_root=tmp_path)

    outcomes = [run_report(1, 1.0), run_report(2, 1.0), run_report(3, 0.85)]
    assert [o.comparison.status for o in outcomes if o.comparison] == ["baseline", "ok", "regressed"]
    keys = outcomes[-1].artifact_keys
    assert keys == {"markdown": "roost-report-ornith-9b-spark", "table": "roost-headline-ornith-9b-spark",
                    "link": "roost-files-ornith-9b-spark"}
    assert all(o.artifact_keys == keys for o in outcomes)

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys.values()))))
    by_key: dict[str, list[object]] = {}
    for a in arts:
        by_key.setdefault(str(a.key), []).append(a)
    assert {k: len(v) for k, v in by_key.items()} == {k: 3 for k in keys.values()}  # one per run: the key's history
    latest = {k: max(v, key=lambda a: a.created) for k, v in by_key.items()}  # type: ignore[attr-defined]
    md = latest[keys["markdown"]]
    assert md.type == "markdown"  # type: ignore[attr-defined]
    assert "| Decode tok/s @ 2,042-token prompt | 10.7 tok/s |" in md.data  # type: ignore[attr-defined]
    assert "**REGRESSED**" in md.data  # type: ignore[attr-defined]
    table = latest[keys["table"]]
    assert table.type == "table"  # type: ignore[attr-defined]
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data  # type: ignore[attr-defined]
    assert {"metric": "decode tok/s @ 2,042-token prompt", "value": "10.7 tok/s", "baseline": "12.6 tok/s",
            "change": "−15.0%", "verdict": "regressed"} in rows
    link = latest[keys["link"]]
    files = outcomes[-1].files
    assert files is not None
    # Prefect stores a link artifact as Markdown: [text](link)
    assert link.data == f"[HTML report ({outcomes[-1].stored.run_id})]({files.html.resolve().as_uri()})"  # type: ignore[attr-defined, union-attr]
