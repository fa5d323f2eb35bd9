"""A shared store that does not answer loses nothing: the run's objects are kept on the worker, the run
fails with ``results_store_unreachable`` saying where, and ``roost results push`` uploads them once the
store answers again. The store is really unreachable here (moto's server stopped, a closed port)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from prefect import flow
from support.cli import ROOST
from support.s3 import SECRET_KEY, MotoS3
from support.samples import spark_run

from roost import store
from roost.hosts import CPU
from roost.net import free_port
from roost.store import catalog
from roost.store.fallback import KeepLocalCopy, pending_dir, push_pending
from roost.store.layout import slug
from roost.store.objects import StoreError, StoreUnreachable
from roost.store.s3 import S3Store
from tasks.report import build_report

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def own_s3(tmp_path: Path) -> MotoS3:
    """A server of this test's own, which it stops and starts again."""
    server = MotoS3(tmp_path / "moto").start()
    server.create_bucket("team")
    yield server  # type: ignore[misc]
    server.stop()


def short(server: MotoS3) -> S3Store:
    return S3Store("team", "results", server.credentials(), connect_timeout_s=1, request_timeout_s=3, retries=1,
                   retry_window_s=3)


def test_an_unreachable_store_keeps_every_object_locally_until_it_is_pushed(own_s3: MotoS3, tmp_path: Path) -> None:
    target = short(own_s3)
    kept = KeepLocalCopy(target, tmp_path / "pending")
    own_s3.stop()
    rec = spark_run(day=3)
    store.append_run(rec, kept)
    store.append_requests(rec.meta, [{"request_id": "q1", "ttft_s": 0.1}], kept)
    assert kept.deferred and kept.message.startswith("results store s3://team/results unreachable")
    assert str(tmp_path / "pending") in kept.message and SECRET_KEY not in kept.message
    local = store.LocalStore(tmp_path / "pending")
    assert list(store.load_runs(local)["run_id"]) == [rec.meta.run_id]  # a store of its own, readable as one
    with pytest.raises(StoreUnreachable):
        push_pending(target, tmp_path / "pending")
    assert (tmp_path / "pending").is_dir()  # nothing removed while nothing was uploaded
    own_s3.start()
    own_s3.create_bucket("team")  # moto keeps nothing across a restart
    uploaded, present = push_pending(target, tmp_path / "pending")
    assert (uploaded, present) == (len(kept.deferred), 0)
    assert not (tmp_path / "pending").exists()
    assert list(store.load_runs(target)["run_id"]) == [rec.meta.run_id]
    assert store.load_records(target)[0].points == rec.points
    assert len(store.load_table("requests", target)) == 1


def test_the_report_still_renders_locally_and_says_what_was_kept(own_s3: MotoS3, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOST_RESULTS_DIR", str(tmp_path / "local"))
    kept = KeepLocalCopy(short(own_s3), tmp_path / "pending")
    own_s3.stop()
    outcome = build_report(spark_run(day=4), kept)
    assert outcome.files is not None and outcome.files.markdown.is_file()
    assert outcome.files.directory.is_relative_to(tmp_path / "local")
    assert any(e.startswith("history:") for e in outcome.errors)  # nothing to compare with: said, not raised
    assert any("kept in" in e and str(tmp_path / "pending") in e for e in outcome.errors)


@flow(name="report-only")
def report_only(day: int) -> dict[str, object]:
    """The land flow's last stages on a sample record, with the store the environment names."""
    from flows.lifecycle import finish, results_store
    from flows.stages import report_stage

    record = spark_run(day=day)
    with results_store(CPU):
        comparison = report_stage(record, notify=False)
    return finish(record, "land", None, comparison)


def test_a_run_whose_store_is_unreachable_fails_with_its_class_and_push_recovers_it(
        prefect_api: str, own_s3: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**own_s3.env(), "AWS_ENDPOINT_URL": dead, "ROOST_RESULTS_STORE": "s3://team/results",
           "ROOST_HOME": str(tmp_path / "home"), "ROOST_RESULTS_DIR": str(tmp_path / "local")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    state = report_only(5, return_state=True)
    assert state.is_failed()
    message = state.message or ""
    assert "results store s3://team/results unreachable" in message and "roost results push" in message
    assert SECRET_KEY not in message
    target = S3Store("team", "results", own_s3.credentials())
    waiting = pending_dir(target)
    assert waiting.is_dir() and (tmp_path / "local" / "reports").is_dir()
    # the store answers again (the same URL, now reachable): `roost results push` uploads what waited
    push = subprocess.run([ROOST, "results", "push"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "AWS_ENDPOINT_URL": own_s3.url})
    assert push.returncode == 0, push.stderr
    assert "uploaded" in push.stdout and not waiting.exists()
    (row,) = store.load_runs(target).to_dict(orient="records")
    assert row["run_id"] == spark_run(day=5).meta.run_id and row["status"] == "completed"
    listing = subprocess.run([ROOST, "results", "--json"], cwd=REPO, capture_output=True,
                             text=True, timeout=300, env={**os.environ, "AWS_ENDPOINT_URL": own_s3.url})
    assert listing.returncode == 0, listing.stderr
    assert [r["run_id"] for r in json.loads(listing.stdout)] == [row["run_id"]]


def test_a_store_refusing_a_write_keeps_the_rest_of_the_run_with_it_even_once_it_takes_writes(
        own_s3: MotoS3, tmp_path: Path) -> None:
    """Not only an unreachable store: a bucket that is not there (a refusal, ``results_store_error``) keeps
    the object locally too, and every later object of the run follows it, so the run's commit never lands
    without its record even when the store takes writes again mid-run."""
    target = S3Store("created-late", "results", own_s3.credentials())
    kept = KeepLocalCopy(target, tmp_path / "pending")
    rec = spark_run(day=6)
    store.append_requests(rec.meta, [{"request_id": "q1", "ttft_s": 0.1}], kept)  # NoSuchBucket
    own_s3.create_bucket("created-late")  # the store takes writes from now on
    store.append_run(rec, kept)
    assert target.list_objects("") == []  # nothing of the run went to the store alone
    failure = kept.kept_failure()
    assert type(failure) is StoreError and failure.failure_class == "results_store_error"
    assert "refused a write" in kept.message and "does not exist" in kept.message
    uploaded, _ = push_pending(target, tmp_path / "pending")
    assert uploaded == len(kept.deferred)
    run_key = f"runs/model={slug(rec.meta.repo_id)}/host={slug(rec.meta.host)}/{rec.meta.run_id}.parquet"
    # the run started months ago: pushed now, it is also a late commit (runs/_late/, read whatever the catalog)
    assert target.exists(run_key) and target.exists(catalog.late_key(run_key))
    assert list(store.load_runs(target)["run_id"]) == [rec.meta.run_id]
    assert store.load_record(rec.meta.run_id, target).points == rec.points
