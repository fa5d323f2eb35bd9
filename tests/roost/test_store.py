"""The results store: append-only, atomic, partitioned, readable with one pandas call."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from support.samples import dist

from roost import store
from roost.errors import UserError
from roost.records import SCHEMA_VERSION, BenchPoint, NotifyResult, RunMeta, RunRecord, ServeObservation
from roost.store.objects import StoreError

REPO = Path(__file__).resolve().parents[2]


def make_run(run_id: str, day: int, repo_id: str = "deepreinforce/Ornith-1.0-9B", host: str = "spark",
             decode: float = 12.61, failed: bool = False) -> RunRecord:
    meta = RunMeta(run_id=run_id, started_at=dt.datetime(2026, 3, day, 2, 0, tzinfo=dt.UTC), roost_version="0.1.0",
                   profile="ornith-9b", repo_id=repo_id, revision="main", commit="4f1c2a9e" * 5,
                   served_model_name="ornith-9b", host=host, backend="docker",
                   vllm_args=["--max-model-len", "262144"])
    points = [] if failed else [
        BenchPoint(kind="prompt_length", prompt_tokens=511, output_tokens=256, concurrency=1, requests=3,
                   decode_tok_s=dist(decode * 1.003), ttft_s=dist(0.14), metrics_delta={"vllm:prompt_tokens_total": 1533.0}),
        BenchPoint(kind="prompt_length", prompt_tokens=2042, output_tokens=256, concurrency=1, requests=3,
                   decode_tok_s=dist(decode), ttft_s=dist(0.46)),
        BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=16, requests=32,
                   output_tok_s=dist(141.5), decode_tok_s=dist(8.8)),
        BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=32, requests=64,
                   skipped=True, skip_reason="above --max-num-seqs 20"),
    ]
    return RunRecord(meta=meta, points=points, decode_ceiling_tok_s=17.2,
                     status="failed" if failed else "completed", failed_stage="serve" if failed else "",
                     failure_class="HealthTimeout" if failed else "",
                     serve=ServeObservation(logged_kv_cache_tokens=390070, start_to_healthy_s=161.3))


def test_layout_is_hive_partitioned_by_model_and_host(tmp_path: Path) -> None:
    stored = store.append_run(make_run("r1", 1), tmp_path)
    assert stored.run_path == str(tmp_path / "runs/model=deepreinforce--Ornith-1.0-9B/host=spark/r1.parquet")
    assert stored.points_path == str(tmp_path / "points/model=deepreinforce--Ornith-1.0-9B/host=spark/r1.parquet")
    assert stored.record_path == str(tmp_path / "records/model=deepreinforce--Ornith-1.0-9B/host=spark/r1.json")
    assert RunRecord.model_validate_json(Path(stored.record_path).read_text()).meta.run_id == "r1"
    umask = os.umask(0o022)
    os.umask(umask)
    assert Path(stored.run_path).stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_one_pandas_call_reads_every_run_and_point(tmp_path: Path) -> None:
    store.append_run(make_run("r1", 1), tmp_path)
    store.append_run(make_run("r2", 2, host="cpu"), tmp_path)
    store.append_run(make_run("r3", 3, repo_id="roost/tiny-random"), tmp_path)
    store.append_run(make_run("r4", 4, failed=True), tmp_path)

    points = pd.read_parquet(tmp_path / "points")
    assert len(points) == 3 * 4  # the failed run has no points
    assert set(points["run_id"]) == {"r1", "r2", "r3"}
    assert set(points["model"].astype(str)) == {"deepreinforce--Ornith-1.0-9B", "roost--tiny-random"}
    assert set(points["host"].astype(str)) == {"spark", "cpu"}
    row = points[(points["run_id"] == "r1") & (points["prompt_tokens"] == 2042) & (points["kind"] == "prompt_length")]
    assert row["decode_tok_s_median"].item() == pytest.approx(12.61)
    assert json.loads(points[(points["run_id"] == "r1") & (points["prompt_tokens"] == 511)]["metrics_delta"].item()) == {
        "vllm:prompt_tokens_total": 1533.0}

    runs = pd.read_parquet(tmp_path / "runs")
    assert sorted(runs["run_id"]) == ["r1", "r2", "r3", "r4"]
    assert set(runs["store_version"]) == {store.STORE_VERSION}
    assert set(runs["schema_version"]) == {SCHEMA_VERSION}
    r1 = runs[runs["run_id"] == "r1"].iloc[0]
    assert r1["decode_tok_s"] == pytest.approx(12.61)  # the 2,042-token point is nearest 2,048
    assert r1["reference_prompt_tokens"] == 2042
    assert r1["decode_pct_of_ceiling"] == pytest.approx(100 * 12.61 / 17.2)
    assert r1["peak_output_tok_s"] == pytest.approx(141.5)
    assert runs[runs["run_id"] == "r4"].iloc[0]["failed_stage"] == "serve"


def test_schema_is_fixed_so_null_columns_do_not_break_reading(tmp_path: Path) -> None:
    # r1's decode is null everywhere (failed run), r2 has floats: the file schemas must still match.
    store.append_run(make_run("r1", 1, failed=True), tmp_path)
    store.append_run(make_run("r2", 2), tmp_path)
    a = pq.read_schema(next((tmp_path / "runs").rglob("r1.parquet")))
    b = pq.read_schema(next((tmp_path / "runs").rglob("r2.parquet")))
    assert a.equals(b, check_metadata=True)
    assert a.metadata[b"roost.store_version"] == str(store.STORE_VERSION).encode()
    assert pd.read_parquet(tmp_path / "runs")["decode_tok_s"].isna().tolist() == [True, False]


def test_filters_by_model_and_host(tmp_path: Path) -> None:
    store.append_run(make_run("r1", 1), tmp_path)
    store.append_run(make_run("r2", 2, host="cpu"), tmp_path)
    store.append_run(make_run("r3", 3, repo_id="roost/tiny-random", host="cpu"), tmp_path)
    assert list(store.load_runs(tmp_path, model="deepreinforce/Ornith-1.0-9B")["run_id"]) == ["r1", "r2"]
    assert list(store.load_runs(tmp_path, host="cpu")["run_id"]) == ["r2", "r3"]
    assert list(store.load_runs(tmp_path, model="roost--tiny-random", host="cpu")["run_id"]) == ["r3"]
    assert store.load_runs(tmp_path, model="nobody/else").empty
    assert set(store.load_points(tmp_path, host="spark")["run_id"]) == {"r1"}
    assert [r.meta.run_id for r in store.load_records(tmp_path, host="cpu")] == ["r2", "r3"]
    assert [r.meta.run_id for r in store.load_records(tmp_path, limit=1)] == ["r3"]
    assert store.load_record("r2", tmp_path).meta.host == "cpu"
    assert set(store.load_points(tmp_path, run_id="r3")["run_id"]) == {"r3"} and len(store.load_points(tmp_path, run_id="r3")) == 4
    with pytest.raises(UserError, match="no run 'r9'"):
        store.load_record("r9", tmp_path)


def test_load_on_an_empty_store_gives_empty_frames_with_the_columns(tmp_path: Path) -> None:
    runs = store.load_runs(tmp_path / "nothing-here")
    assert runs.empty and {"run_id", "decode_tok_s", "model", "host"} <= set(runs.columns)
    assert store.load_records(tmp_path / "nothing-here") == []


def test_append_only_a_stored_run_is_never_rewritten(tmp_path: Path) -> None:
    stored = store.append_run(make_run("r1", 1, decode=12.61), tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(store.AlreadyStored, match="r1"):
        store.append_run(make_run("r1", 1, decode=99.0), tmp_path)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before
    assert store.load_runs(tmp_path)["decode_tok_s"].tolist() == [pytest.approx(12.61)]
    with pytest.raises(store.AlreadyStored):
        store.atomic_write_bytes(Path(stored.run_path), b"overwrite attempt")
    assert Path(stored.run_path).read_bytes() == before[Path(stored.run_path)]


def test_each_run_adds_new_files_and_leaves_earlier_ones_untouched(tmp_path: Path) -> None:
    store.append_run(make_run("r1", 1), tmp_path)
    snapshot = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()}
    store.append_run(make_run("r2", 2), tmp_path)
    for p, (mtime, data) in snapshot.items():
        assert p.stat().st_mtime_ns == mtime and p.read_bytes() == data
    new = {p for p in tmp_path.rglob("*") if p.is_file()} - set(snapshot)
    assert {p.name for p in new} == {"r2.parquet", "r2.json"} and len(new) == 3


def test_a_failed_rename_leaves_no_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.append_run(make_run("r1", 1), tmp_path)

    def broken_link(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "link", broken_link)
    monkeypatch.setattr(os, "replace", broken_link)
    with pytest.raises(StoreError, match="No space"):
        store.append_run(make_run("r2", 2), tmp_path)
    names = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert names == ["r1.json", "r1.parquet", "r1.parquet"]
    assert list(pd.read_parquet(tmp_path / "runs")["run_id"]) == ["r1"]


# The crash itself is simulated (the real thing would need a power cut): a child process stores one run,
# then dies with os._exit at the named point while storing a second one.
CRASH_SCRIPT = textwrap.dedent(
    """
    import datetime as dt, os, sys
    sys.path[:0] = [{tests!r}, {tests_root!r}]
    from test_store import make_run
    from roost import store
    from roost.store import atomic
    root = {root!r}
    store.append_run(make_run("r1", 1), root)
    where = {where!r}
    if where == "mid-write":      # half the bytes of the temporary file are on disk, then the process dies
        def half_then_die(f, data):
            f.write(data[: len(data) // 2]); f.flush(); os._exit(9)
        atomic._write_fully = half_then_die
    elif where == "before-rename":  # the temporary file is complete and fsynced, the link never happens
        os.link = lambda src, dst: os._exit(9)
    elif where == "before-commit":  # record and points are written, the runs row is not
        from roost.store import objects
        real = objects.atomic_write_bytes
        def die_on_runs(path, data, **kw):
            if "/runs/" in str(path):
                os._exit(9)
            return real(path, data, **kw)
        objects.atomic_write_bytes = die_on_runs
    store.append_run(make_run("r2", 2), root)
    """
)


@pytest.mark.parametrize("where", ["mid-write", "before-rename", "before-commit"])
def test_a_crash_while_storing_leaves_earlier_rows_intact_and_no_torn_file(tmp_path: Path, where: str) -> None:
    from pathlib import Path as P

    root = tmp_path / "results"
    script = CRASH_SCRIPT.format(tests=str(P(__file__).parent), tests_root=str(P(__file__).parents[1]), root=str(root),
                                 where=where)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr

    visible = [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]
    hidden = [p for p in root.rglob(".*") if p.is_file()]
    if where != "before-commit":
        assert hidden and all(p.name.endswith(".tmp") for p in hidden)  # the crash left its temporary behind...
    for p in visible:  # ...but every visible file is complete
        if p.suffix == ".parquet":
            pq.read_table(p)
        else:
            RunRecord.model_validate_json(p.read_text())
    # One pandas call still reads the store, and it holds exactly the run committed before the crash.
    assert list(pd.read_parquet(root / "runs")["run_id"]) == ["r1"]
    assert set(store.load_points(root)["run_id"]) == {"r1"}
    assert [r.meta.run_id for r in store.load_records(root)] == ["r1"]
    # The store keeps working; a retry of the crashed run commits it.
    store.append_run(make_run("r2", 2), root)
    store.append_run(make_run("r3", 3), root)
    assert list(store.load_runs(root)["run_id"]) == ["r1", "r2", "r3"]
    assert len(pd.read_parquet(root / "points")) == 12


def test_notifications_are_appended_one_file_per_attempt(tmp_path: Path) -> None:
    meta = make_run("r1", 1).meta
    store.append_notification(meta, NotifyResult(status="failed", kind="regression", transport="bot",
                                                 detail="URLError: connection refused", retries=2), tmp_path)
    store.append_notification(meta, NotifyResult(status="sent", kind="regression", transport="bot",
                                                 channel="C0TEST", message_ts="1.2"), tmp_path)
    df = pd.read_parquet(tmp_path / "notifications")
    assert list(df["status"]) == ["failed", "sent"]
    assert sorted(p.name for p in (tmp_path / "notifications").rglob("*.parquet")) == ["r1-1.parquet", "r1-2.parquet"]
    assert list(store.load_notifications(tmp_path)["retries"]) == [2, 0]


def test_requests_are_one_table_read_like_the_others(tmp_path: Path) -> None:
    meta = make_run("r1", 1).meta
    rows = [{"request_id": f"q{i}", "phase": "prompt_length", "point": 0, "repeat": i, "concurrency": 1,
             "prompt_tokens": 511, "completion_tokens": 256, "ttft_s": 0.14, "decode_tok_s": 12.6, "unknown": 1}
            for i in range(3)]
    path = store.append_requests(meta, rows, tmp_path)
    assert path is not None and Path(path).parent == tmp_path / "requests" / f"model={store.slug(meta.repo_id)}" / "host=spark"
    assert store.append_requests(meta, [], tmp_path) is None
    df = store.load_table("requests", tmp_path, model=meta.repo_id)
    assert list(df["request_id"]) == ["q0", "q1", "q2"] and set(df["run_id"]) == {"r1"}
    assert list(df["host"]) == ["spark"] * 3 and "unknown" not in df.columns
    assert store.load_table("requests", tmp_path, host="elsewhere").empty


def test_slug_makes_directory_safe_names() -> None:
    assert store.slug("deepreinforce/Ornith-1.0-9B") == "deepreinforce--Ornith-1.0-9B"
    assert store.slug("a b/c?d") == "a_b--c_d"
    assert store.slug("..") == "_.."
    assert store.slug(store.slug("org/name")) == "org--name"
