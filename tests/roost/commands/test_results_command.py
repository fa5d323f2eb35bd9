"""``roost results``: list and filter stored runs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
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
                   decode_tok_s_median=decode, ttft_s_median=0.46),
        BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=20, requests=40,
                   output_tok_s=150.2),
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
    exe = Path(sys.executable).parent / "roost"
    proc = subprocess.run([str(exe), "results", "--dir", str(root), "--host", "mars"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "roost: error: --host 'mars': no runs for it; known: cpu, spark"
