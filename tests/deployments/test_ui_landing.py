"""A team's first landing from the Prefect UI (issue 39), on a Prefect server of its own with the UI on:
``roost setup`` as the README runs it on this one-host machine, the one worker it prints started, then in
headless Chromium at a laptop's 1,280 px:

1. every deployment setup created shows Ready (no sweep queue or deployment for one host, no red dot);
2. ``land/cpu`` is started with the UI's own Run > Quick run; the run is named for its profile, host,
   commit and start before its first log line, its log keeps vLLM's lines apart at their own levels with
   each progress line once (``support.run_log``), and its report artifact, opened from the run's Artifacts
   tab, shows its charts as images (no results server runs here) with every table and headline value inside
   the pane.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowRunFilter
from roost_workers import REPO
from support.browser import artifact_pane_facts, assert_fits_the_pane, chromium
from support.cli import roost_exe
from support.flow_logs import run_logs
from support.prefect_server import PrefectServer, using_api
from support.run_log import check_run_log
from support.wait import wait_for
from support.workers import Worker, start_worker, wait_final

pytestmark = pytest.mark.slow

LANDING_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A fresh Prefect server with the UI, ``roost setup --json`` against it and the worker it names for this
    machine's host (its results in a directory of its own)."""
    work = tmp_path_factory.mktemp("ui-team")
    env = {"PREFECT_HOME": str(work / "home"), "PREFECT_UI_ENABLED": "true", "PREFECT_SERVER_UI_ENABLED": "true",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    with PrefectServer(work / "prefect-server.log", env=env) as server, using_api(server.url):
        out = roost_exe("setup", "--json", timeout=600, cwd=REPO)
        assert out.returncode == 0, out.stderr[-3000:]
        report = json.loads(out.stdout)
        assert report["hosts"] == ["cpu"] and len(report["workers"]) == 1, report
        queues = re.findall(r"--work-queue (\S+)", report["workers"][0])
        worker: Worker = start_worker("ui-team-cpu", queues, pool=report["pool"], log=work / "worker.log",
                                      env={**os.environ, "ROOST_RESULTS_DIR": str(work / "results")})
        try:
            yield {"ui": server.url.removesuffix("/api"), "report": report, "work": work, "queues": queues}
        finally:
            worker.stop()


def _deployments() -> dict[str, Any]:
    with get_client(sync_client=True) as client:
        return {f"{client.read_flow(d.flow_id).name}/{d.name}": d for d in client.read_deployments()}


def test_one_host_setup_creates_what_it_serves_and_every_deployment_shows_ready(team: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    deps = _deployments()
    assert set(deps) == {"land/cpu", "rebenchmark/cpu", "audit/cpu"}, sorted(deps)
    assert team["queues"] == ["cpu"] and team["report"]["pool"] == "roost"
    # the pool's own default queue became the host's: no queue without a worker (a red dot on the dashboard)
    with get_client(sync_client=True) as client:
        pool = client.read_work_pool("roost")
        queues = client.read_work_queues(work_pool_name="roost")
        assert [(q.name, q.id) for q in queues] == [("cpu", pool.default_queue_id)], queues

    def ready() -> bool:
        with get_client(sync_client=True) as client:
            queues_ready = all(str(q.status).endswith("READY") and "NOT" not in str(q.status)
                               for q in client.read_work_queues(work_pool_name="roost"))
        return queues_ready and all(str(d.status).endswith("READY") and "NOT" not in str(d.status)
                                    for d in _deployments().values())

    wait_for("every deployment and queue Ready", ready, timeout_s=90, every_s=2)
    with chromium(tmp_path / "chromium") as browser:
        page = browser.new_page()
        page.set_viewport_size({"width": 1280, "height": 900})
        try:
            page.goto(f"{team['ui']}/deployments", wait_until="networkidle")
            page.get_by_text("land/cpu").or_(page.get_by_text("cpu", exact=True)).first.wait_for(timeout=60_000)
            page.wait_for_function("() => (document.body.innerText.match(/\\bReady\\b/g) || []).length >= 3",
                                   timeout=60_000)
            text = page.inner_text("body")
            assert "Not Ready" not in text and "sweep" not in text.lower(), text[:3000]
            page.goto(f"{team['ui']}/work-pools/work-pool/roost", wait_until="networkidle")
            page.get_by_text("cpu", exact=True).first.wait_for(timeout=60_000)
            assert "Not Ready" not in page.inner_text("body")
        finally:
            page.screenshot(path=str(tmp_path / "deployments.png"), full_page=True)
            page.close()


def test_a_landing_started_from_the_ui_shows_its_charts_in_the_report_artifact(team: dict[str, Any],
                                                                               tmp_path: Path) -> None:
    land = _deployments()["land/cpu"]
    with chromium(tmp_path / "chromium") as browser:
        page = browser.new_page()
        page.set_viewport_size({"width": 1280, "height": 900})
        try:
            page.goto(f"{team['ui']}/deployments/deployment/{land.id}", wait_until="networkidle")
            page.get_by_role("button", name="Run", exact=True).first.click()
            page.get_by_text("Quick run", exact=True).first.click()
            flow_run = wait_for("the run the UI created", lambda: _runs_of(land.id), timeout_s=60, every_s=1)[0]
        finally:
            page.screenshot(path=str(tmp_path / "deployment.png"), full_page=True)
            page.close()
        fr = wait_final(flow_run.id, LANDING_TIMEOUT_S)
        assert fr.state.is_completed(), (fr.state, (team["work"] / "worker.log").read_text()[-4000:])
        assert re.fullmatch(r"land · local · cpu · [0-9a-f]{7} · \d\d-\d\d \d\d:\d\d:\d\d UTC", fr.name), fr.name
        print(check_run_log(fr.id))
        # the server's random name, given when the UI created the run, is in the worker's two lines only (it
        # submits the run before the run's own process starts); every line of the run's process has roost's name
        created = flow_run.name
        named = [(line.name, line.message) for line in run_logs(fr.id) if created in line.message]
        assert created == fr.name or all(logger == "prefect.flow_runs.worker" for logger, _ in named), (created, named)
        with get_client(sync_client=True) as client:
            from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

            arts = client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[fr.id])))
        report = next(a for a in arts if a.type == "markdown" and (a.key or "").startswith("roost-report-"))
        facts = artifact_pane_facts(browser, f"{team['ui']}/artifacts/artifact/{report.id}", tmp_path, "report.png")
        assert facts is not None
        assert_fits_the_pane(facts, "the landing's report")
        charts = [i for i in facts["images"] if i["src"].startswith("data:image/png")]
        assert len(charts) >= 3, facts["images"]  # decode, TTFT, throughput at least: inline, no results server
        assert "/charts/" not in facts["text"], facts["text"][:3000]
        headline = next(t for t in facts["tables"] if t["head"][:1] == ["Headline"])
        values = {label: value for label, value, _ in headline["values"]}
        assert all(v and v != "—" for v in values.values()), values  # a missing value says why in its cell
        left, right = facts["pane"]
        print(f"report artifact at 1,280 px: pane {right - left:.0f} px, {len(facts['tables'])} tables, widest "
              f"{max(t['box'][1] - t['box'][0] for t in facts['tables']):.0f} px; {len(charts)} charts inline")
        for other in arts:  # the run's other tables (headline, benchmark points, accuracy) fit the pane too
            if other.type in ("markdown", "table") and other.id != report.id and other.key:
                seen = artifact_pane_facts(browser, f"{team['ui']}/artifacts/artifact/{other.id}", tmp_path,
                                           f"{other.key}.png")
                assert seen is not None and seen["tables"], other.key
                assert_fits_the_pane(seen, other.key)


def _runs_of(deployment_id: Any) -> list[Any]:
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                                     flow_run_filter=FlowRunFilter())
