"""The report artifact as a person sees it in the Prefect UI at a laptop's 1,280 px (headless Chromium).

The artifacts of three runs are published on the session's Prefect server by the real report stage (a
regression against a five-run history with unmeasurable decode timings and a long audit finding, a first run,
a failed run) and opened in the UI: every table fits the artifact pane without scrolling sideways, every
headline value lies inside it, the charts are images (inline, no results server), and the pane names no file
on the worker the browser cannot open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from support.browser import artifact_pane_facts, assert_fits_the_pane, chromium, prefect_ui
from support.samples import failed_record, history, spark_record

from roost.records import RunRecord
from roost.store import append_run
from tasks.report import build_report, publish_artifacts

pytestmark = pytest.mark.slow


def _regressed() -> RunRecord:
    rec = spark_record(run_id="20260310T020000Z-0000cccc", scale=0.8)
    first = rec.points[0].model_copy(update={"unmeasurable": 2, "unmeasurable_reasons":
                                             "1 above the roofline ceiling, 1 delivered in a burst"})
    rec.points = [first, *rec.points[1:]]
    return rec


@pytest.fixture(scope="module")
def published(prefect_api: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """{what: artifact id} of the report artifacts of three runs, each published by its own flow run."""
    root = tmp_path_factory.mktemp("results")
    for earlier in history(5):
        append_run(earlier, root)
    out: dict[str, str] = {}
    for what, record in (("regressed", _regressed()), ("first", spark_record(run_id="20260310T020000Z-0000dddd")
                                                        .model_copy(update={"meta": spark_record().meta.model_copy(
                                                            update={"run_id": "20260310T020000Z-0000dddd",
                                                                    "host": "cpu"})})),
                         ("failed", failed_record())):
        flow_run_id = _publish(record, root)
        with get_client(sync_client=True) as client:
            arts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
                any_=[flow_run_id])))
        out |= {f"{what}:{'markdown' if a.key.startswith('roost-report-') else 'table'}": str(a.id) for a in arts
                if a.key is not None and a.key.startswith(("roost-report-", "roost-headline-"))}
    return out


def _publish(record: RunRecord, root: Path) -> Any:
    @flow(name="report-artifact-check")
    def publish() -> Any:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        assert ctx is not None and ctx.flow_run is not None
        outcome = build_report(record, root)
        assert outcome.errors == [], outcome.errors
        publish_artifacts(record, outcome)
        return ctx.flow_run.id

    return publish()


def test_every_table_and_headline_value_fits_the_pane_at_1280_px(published: dict[str, str], prefect_api: str,
                                                                 tmp_path: Path) -> None:
    with prefect_ui(prefect_api, tmp_path / "ui") as ui, chromium(tmp_path / "chromium") as browser:
        for key, artifact_id in sorted(published.items()):
            facts = artifact_pane_facts(browser, f"{ui}/artifacts/artifact/{artifact_id}", tmp_path / "shots",
                                        f"{key.replace(':', '-')}.png")
            assert facts is not None, f"{key}: no Markdown pane"
            assert_fits_the_pane(facts, key)
            if key.endswith(":markdown"):
                headline = [t for t in facts["tables"] if t["head"][:1] == ["Headline"]]
                assert len(headline) == 1 and len(headline[0]["values"]) >= 10, (key, facts["tables"])
                values = dict((label, value) for label, value, _ in headline[0]["values"])
                assert "/charts/" not in facts["text"] and "file://" not in facts["text"], key
            if key == "regressed:markdown":
                assert values["Decode tok/s @ 2,042-token prompt"] == "10.1 tok/s", values
                assert values["Unmeasurable decode timings"] == "2 of 164", values
                assert "REGRESSED" in facts["text"] and "band ±" in facts["text"], facts["text"][:2000]
                assert len(facts["images"]) >= 5, facts["images"]  # every chart, inline: no results server
            if key == "failed:markdown":
                assert values["Decode tok/s"] == "— (the run failed at serve)", values
