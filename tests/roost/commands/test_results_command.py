"""``roost results``: list and filter stored runs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
from support.cli import ROOST
from support.samples import dist
from typer.testing import CliRunner

from roost.cli import app
from roost.records import BenchPoint, RunMeta, RunRecord
from roost.store import append_run

runner = CliRunner()


def stored(root: Path, run_id: str, day: int, repo_id: str, profile: str, host: str, decode: float | None) -> None:
    meta = RunMeta(run_id=run_id, started_at=dt.datetime(2026, 3, day, 2, 0, tzinfo=dt.UTC), roost_version="0.1.0",
                   profile=profile, repo_id=repo_id, revision="main", commit="c0ffee", served_model_name=profile,
                   host=host, backend="process")
    points = [] if decode is None else [
        BenchPoint(kind="prompt_length", prompt_tokens=2042, output_tokens=256, concurrency=1, requests=3,
                   decode_tok_s=dist(decode), ttft_s=dist(0.46)),
        BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=20, requests=40,
                   output_tok_s=dist(150.2)),
    ]
    append_run(RunRecord(meta=meta, points=points, decode_ceiling_tok_s=17.2,
                         status="completed" if decode is not None else "failed",
                         failed_stage="" if decode is not None else "health-wait",
                         failure_class="" if decode is not None else "HealthTimeout"), root)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    stored(tmp_path, "run-a", 1, "deepreinforce/Ornith-1.0-9B", "ornith-9b", "spark", 12.61)
    stored(tmp_path, "run-b", 2, "roost/tiny-random", "local", "cpu", 96.0)
    stored(tmp_path, "run-c", 3, "deepreinforce/Ornith-1.0-9B", "ornith-9b", "spark", None)
    stored(tmp_path, "run-d", 4, "deepreinforce/Ornith-1.0-9B", "ornith-9b", "spark", 12.40)
    return tmp_path


def test_lists_every_run_oldest_first(root: Path) -> None:
    res = runner.invoke(app, ["results", "--dir", str(root)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:3] == ["run", "started", "(UTC)"]
    body = [ln for ln in lines[2:] if ln.startswith("run-")]
    assert [ln.split()[0] for ln in body] == ["run-a", "run-b", "run-c", "run-d"]
    assert "12.6" in body[0] and "73.3" in body[0] and "150.2" in body[0]
    assert "failed at health-wait: HealthTimeout" in body[2]
    assert "4 run(s) in" in res.output


def test_filters_by_model_host_and_last(root: Path) -> None:
    def ids(*args: str) -> list[str]:
        res = runner.invoke(app, ["results", "--dir", str(root), "--json", *args])
        assert res.exit_code == 0, res.output
        return [r["run_id"] for r in json.loads(res.output)]

    assert ids("--model", "deepreinforce/Ornith-1.0-9B") == ["run-a", "run-c", "run-d"]
    assert ids("--model", "ornith-9b", "--last", "2") == ["run-c", "run-d"]  # a profile name works too
    assert ids("--model", "roost--tiny-random") == ["run-b"]  # so does the directory slug
    assert ids("--host", "cpu") == ["run-b"]
    assert ids("--last", "1") == ["run-d"]


def test_json_has_every_column_with_nulls_and_iso_dates(root: Path) -> None:
    res = runner.invoke(app, ["results", "--dir", str(root), "--json", "--model", "ornith-9b"])
    rows = json.loads(res.output)
    failed = rows[1]
    assert failed["status"] == "failed" and failed["decode_tok_s"] is None and failed["failed_stage"] == "health-wait"
    assert rows[0]["decode_tok_s"] == 12.61 and rows[0]["started_at"] == "2026-03-01T02:00:00+00:00"
    assert rows[0]["model"] == "deepreinforce--Ornith-1.0-9B" and rows[0]["host"] == "spark"


def test_unknown_model_or_host_is_a_usage_error_naming_the_known_ones(root: Path) -> None:
    res = runner.invoke(app, ["results", "--dir", str(root), "--model", "nope/nothing"])
    assert res.exit_code == 2
    assert "--model 'nope/nothing': no runs for it in the results store; known: " in res.output
    assert "deepreinforce/Ornith-1.0-9B" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["results", "--dir", str(root), "--model", "local", "--host", "spark"])
    assert res.exit_code == 2 and "known: cpu" in res.output


def test_empty_store_and_bad_options(tmp_path: Path) -> None:
    res = runner.invoke(app, ["results", "--dir", str(tmp_path / "none")])
    assert res.exit_code == 0 and "no runs recorded yet in" in res.output
    res = runner.invoke(app, ["results", "--dir", str(tmp_path / "none"), "--json"])
    assert res.exit_code == 0 and json.loads(res.output) == []
    assert runner.invoke(app, ["results", "--last", "0"]).exit_code == 2
    afile = tmp_path / "f"
    afile.write_text("x")
    res = runner.invoke(app, ["results", "--dir", str(afile)])
    assert res.exit_code == 2 and "not a directory" in res.output


def test_the_console_script(root: Path) -> None:
    proc = subprocess.run([ROOST, "results", "--dir", str(root), "--host", "mars"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "roost: error: --host 'mars': no runs for it; known: cpu, spark"


FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "results-v1"


def test_runs_stored_by_roost_0_1_are_listed_and_form_the_baseline_of_a_new_run(tmp_path: Path) -> None:
    import shutil

    from roost.regress import RegressConfig, compare
    from roost.store import load_records
    from tasks.report import build_report

    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    res = runner.invoke(app, ["results", "--dir", str(root), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["run_id"] for r in rows] == ["20260220T020000Z-00000000", "20260221T020000Z-00000001",
                                           "20260302T020000Z-0000bbbb", "20261201T012147Z-6345416b",
                                           "20261201T012535Z-69fe66ca"]
    assert [r["status"] for r in rows] == ["completed", "completed", "failed", "completed", "completed"]
    assert rows[-1]["decode_tok_s"] == pytest.approx(189.44, abs=0.01) and rows[-1]["knee_concurrency"] == 4

    # a new landing of the same configuration is compared with the two runs roost 0.1 stored
    earlier = load_records(root, model="roost-demo/tiny-qwen3")
    assert len(earlier) == 2 and earlier[0].meta.comparable_key() == earlier[1].meta.comparable_key()
    now = earlier[-1].model_copy(deep=True)
    now.meta = now.meta.model_copy(update={"run_id": "20261202T010000Z-0000cafe",
                                           "started_at": dt.datetime(2026, 12, 2, 1, 0, tzinfo=dt.UTC)})
    for p in now.points:
        if p.kind == "prompt_length":
            p.decode_tok_s.median = (p.decode_tok_s.median or 0.0) / 2  # half the decode rate: a regression
    # two earlier runs: no verdict by default ("insufficient baseline"); a profile asking for two gets one
    assert compare(now, earlier).status == "insufficient"
    outcome = build_report(now, root, RegressConfig(min_runs=2))
    assert outcome.comparison is not None
    assert outcome.comparison.baseline_run_ids == [r.meta.run_id for r in earlier]
    regressed = {c.metric.name for c in outcome.comparison.regressions}
    assert regressed == {"decode_tok_s@prompt=128", "decode_tok_s@prompt=1024"}
    listed = json.loads(runner.invoke(app, ["results", "--dir", str(root), "--json"]).stdout)
    assert [r["run_id"] for r in listed][-1] == "20261202T010000Z-0000cafe" and len(listed) == 6
