"""The results store shared by a team: the same appends and reads on a directory and on an S3-compatible
bucket, the runs catalog (compaction, partition pruning, late commits), writers racing, objects a
reader must skip, a store written by roost 0.1, and baselines that stay per host."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import store_rows
from support.s3 import MotoS3
from support.samples import earlier_runs, spark_run

from roost import store
from roost.records import RunRecord
from roost.store import catalog
from roost.store.layout import slug
from roost.store.objects import LocalStore, ObjectStore
from roost.store.s3 import S3Store
from tasks.report import build_report

REPO = "deepreinforce/Ornith-1.0-9B"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "results-v1"
TESTS = Path(__file__).resolve().parents[2]


def run_at(when: dt.datetime, n: int, host: str = "spark", repo: str = REPO, decode: float = 1.0) -> RunRecord:
    run_id = f"{when:%Y%m%dT%H%M%SZ}-{n:08x}"
    rec = spark_run(day=1, run_id=run_id, scale=decode)
    meta = rec.meta.model_copy(update={"started_at": when, "host": host, "repo_id": repo})
    return rec.model_copy(update={"meta": meta})


def test_appends_and_reads_are_the_same_on_every_store(any_store: ObjectStore) -> None:
    t0 = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.UTC)
    for i in range(3):
        store.append_run(run_at(t0 + dt.timedelta(hours=i), i), any_store)
    store.append_run(run_at(t0, 9, host="spark-2"), any_store)
    store.append_run(run_at(t0, 10, repo="roost-demo/tiny-qwen3", host="cpu"), any_store)
    runs = store.load_runs(any_store)
    assert len(runs) == 5 and runs["run_id"].is_unique
    assert list(store.load_runs(any_store, model=REPO, host="spark")["run_id"]) == [
        f"{t0 + dt.timedelta(hours=i):%Y%m%dT%H%M%SZ}-{i:08x}" for i in range(3)]
    assert set(store.load_runs(any_store, host="spark-2")["host_name"]) == {"spark-2"}
    assert [r.meta.host for r in store.load_records(any_store, model=REPO, limit=2)] == ["spark", "spark"]
    assert len(store.load_points(any_store, model=REPO)) == 4 * len(spark_run().points)
    with pytest.raises(store.AlreadyStored):
        store.append_run(run_at(t0, 0), any_store)


def test_a_catalog_holds_every_run_and_runs_after_it_are_read_beside_it(any_store: ObjectStore) -> None:
    t0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    hosts = [f"spark-{h}" for h in range(6)]
    n = 0
    for h in hosts:
        for _ in range(12):
            store.append_run(run_at(t0 + dt.timedelta(minutes=n), n, host=h), any_store)
            n += 1
    before = store.load_runs(any_store)
    key = store.compact(any_store)
    assert key is not None and key.startswith("runs/_catalog/")
    assert store.compact(any_store) is None  # nothing new since
    stats = store.ReadStats()
    after = store.load_runs(any_store, stats=stats)
    assert stats.catalog == key and stats.objects <= 6  # the catalog, not 72 run objects
    assert sorted(after["run_id"]) == sorted(before["run_id"])
    assert (after.drop(columns=["stored_at"]).sort_values("run_id").reset_index(drop=True)
            .equals(before.drop(columns=["stored_at"]).sort_values("run_id").reset_index(drop=True)))
    # runs after the catalog are found beside it, once each
    late = run_at(t0 + dt.timedelta(days=1), 999, host="spark-3")
    store.append_run(late, any_store)
    one = store.load_runs(any_store, model=REPO, host="spark-3")
    assert len(one) == 13 and one["run_id"].iloc[-1] == late.meta.run_id


def test_a_partitions_read_fetches_only_its_row_groups_of_a_large_catalog(any_store: ObjectStore,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 runs over 12 partitions in one catalog: reading one partition fetches a small part of it
    (the footer and its row groups: ranged GETs on an object store), not the whole object. (Repeated
    rows compress so well that this catalog is a few hundred kB: the read blocks are made small to match.)"""
    monkeypatch.setattr(catalog._RangeFile, "BLOCK", 16384)
    parts = store_rows.partitions(3, 4)
    table = store_rows.synthetic_runs(20_000, parts, span_days=30)
    key = catalog.write_catalog(any_store, table)
    size = next(o.size for o in any_store.list_objects(key))
    repo, host = parts[5]
    part = store.ReadStats()
    got = store.load_runs(any_store, model=repo, host=host, stats=part)
    assert len(got) == sum(1 for r, h in zip(table["repo_id"].to_pylist(), table["host_name"].to_pylist(), strict=True)
                           if (r, h) == (repo, host))
    assert set(got["host_name"]) == {host}
    if isinstance(any_store, S3Store):
        assert part.bytes < size / 3, (part, size)


def test_a_run_that_commits_long_after_it_started_is_not_lost_behind_the_watermark(any_store: ObjectStore) -> None:
    t0 = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    for i in range(3):
        store.append_run(run_at(t0 + dt.timedelta(hours=i), i), any_store)
    store.compact(any_store)  # watermark: a week before the newest run
    slow = run_at(t0 - dt.timedelta(days=10), 77)  # started ten days earlier, committing now
    store.append_run(slow, any_store)
    assert slow.meta.run_id in set(store.load_runs(any_store, model=REPO, host="spark")["run_id"])
    assert slow.meta.run_id in set(store.load_runs(any_store)["run_id"])


def test_a_late_run_a_concurrent_compaction_missed_is_still_read(any_store: ObjectStore) -> None:
    """A compaction that listed the partition just before a late run committed writes a catalog whose
    watermark is past the run's start: the run's copy under runs/_late/ keeps it visible."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    recent = [run_at(now - dt.timedelta(hours=3 - i), i) for i in range(3)]
    for rec in recent:
        store.append_run(rec, any_store)
    listed_before = catalog.read_runs(any_store, store._runs_schema())  # what the racing compaction read
    slow = run_at(now - dt.timedelta(days=9), 77)  # a nine-day landing, committing now
    store.append_run(slow, any_store)
    assert any_store.exists(catalog.late_key(f"runs/model={slug(REPO)}/host=spark/{slow.meta.run_id}.parquet"))
    catalog.write_catalog(any_store, listed_before)
    newest = catalog.newest_catalog(any_store)
    assert newest is not None and catalog.read_watermark(any_store, newest) > slow.meta.run_id[:16]
    assert slow.meta.run_id in set(store.load_runs(any_store, model=REPO, host="spark")["run_id"])
    runs = store.load_runs(any_store)
    assert runs["run_id"].is_unique and len(runs) == 4
    store.compact(any_store)  # and the next compaction takes it in
    stats = store.ReadStats()
    assert len(store.load_runs(any_store, stats=stats)) == 4 and stats.objects == 0


def test_runs_compact_by_themselves_as_a_partition_grows(any_store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "COMPACT_AFTER", 5)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for i in range(12):
        store.append_run(run_at(t0 + dt.timedelta(minutes=i), i), any_store)
    catalogs = [o.key for o in any_store.list_objects("runs/_catalog/")]
    assert len(catalogs) == 2
    stats = store.ReadStats()
    assert len(store.load_runs(any_store, stats=stats)) == 12 and stats.catalog == max(catalogs)


RACE = textwrap.dedent("""
    import datetime as dt, sys
    sys.path[:0] = [{tests!r}, {here!r}]
    from test_store_shared import run_at, open_target
    from roost import store
    from roost.store import catalog
    catalog.COMPACT_AFTER = 6          # compactions race too
    target = open_target({kind!r}, {where!r})
    me = int(sys.argv[1])
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for i in range(30):
        store.append_run(run_at(t0 + dt.timedelta(seconds=i), me * 1000 + i), target)
""")


def open_target(kind: str, where: str) -> ObjectStore:
    """A store named by text, for a child process."""
    if kind == "dir":
        return LocalStore(where)
    url, bucket = where.split(" ")
    from pydantic import SecretStr
    from support.s3 import ACCESS_KEY, SECRET_KEY

    from roost.store.credentials import StoreCredentials

    return S3Store(bucket, "team/results", StoreCredentials(access_key_id=ACCESS_KEY, secret_access_key=SecretStr(SECRET_KEY),
                                                            endpoint_url=url, region="us-east-1", allow_http=True))


def test_two_writers_appending_at_once_keep_every_row(any_store: ObjectStore) -> None:
    if isinstance(any_store, S3Store):
        kind, where = "s3", f"{any_store.endpoint_url} {any_store.bucket}"
    else:
        assert isinstance(any_store, LocalStore)
        kind, where = "dir", str(any_store.root)
    script = RACE.format(tests=str(TESTS), here=str(Path(__file__).parent), kind=kind, where=where)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)], stderr=subprocess.PIPE, text=True)
             for n in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    runs = store.load_runs(any_store)
    assert len(runs) == 60 and runs["run_id"].is_unique
    assert len(store.load_records(any_store)) == 60
    assert any_store.list_objects("runs/_catalog/")  # they compacted while racing, and lost nothing


def test_objects_a_reader_cannot_parse_are_skipped_and_named(any_store: ObjectStore, caplog: pytest.LogCaptureFixture) -> None:
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    good = run_at(t0, 1)
    store.append_run(good, any_store)
    whole = any_store.get(f"runs/model={store.slug(REPO)}/host=spark/{good.meta.run_id}.parquet")
    # what a tool that does not write atomically leaves mid-copy (FAKE: the store itself never does this)
    any_store.put_new(f"runs/model={store.slug(REPO)}/host=spark/{run_at(t0, 2).meta.run_id}.parquet",
                      whole[: len(whole) // 2])
    any_store.put_new(f"points/model={store.slug(REPO)}/host=spark/stray.parquet", b"not parquet at all")
    stats = store.ReadStats()
    with caplog.at_level("WARNING", logger="roost.store"):
        runs = store.load_runs(any_store, stats=stats)
    assert list(runs["run_id"]) == [good.meta.run_id]
    assert len(stats.skipped) == 1 and "not a readable Parquet object" in caplog.text
    assert len(store.load_points(any_store)) == len(good.points)
    store.compact(any_store)  # the torn object stays out of the catalog too
    assert list(store.load_runs(any_store)["run_id"]) == [good.meta.run_id]


def test_a_store_written_by_roost_0_1_is_read_and_compacted_as_it_is(any_store: ObjectStore, tmp_path: Path) -> None:
    legacy = LocalStore(FIXTURE)
    for o in legacy.list_objects(""):
        any_store.put_new(o.key, legacy.get(o.key))
    expected = store.load_runs(LocalStore(FIXTURE))
    assert len(expected) > 0
    got = store.load_runs(any_store)
    assert sorted(got["run_id"]) == sorted(expected["run_id"])
    store.compact(any_store)
    again = store.load_runs(any_store)
    assert sorted(again["run_id"]) == sorted(expected["run_id"])
    assert [r.meta.run_id for r in store.load_records(any_store)] == list(again["run_id"])


def test_each_hosts_baseline_uses_only_its_own_runs_in_a_shared_store(any_store: ObjectStore, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Sparks land the same configuration into one store: spark-2 runs slower hardware. A spark run at
    spark-2's speed regresses against spark's own runs; spark-2's own runs are not its baseline."""
    monkeypatch.setenv("ROOST_RESULTS_DIR", str(tmp_path / "local"))
    ours = earlier_runs(4)
    theirs = [r.model_copy(update={"meta": r.meta.model_copy(update={"host": "spark-2",
                                                                      "run_id": r.meta.run_id + "-2"})})
              for r in earlier_runs(4)]
    theirs = [r.model_copy(update={"points": spark_run(day=i + 1, scale=0.8).points}) for i, r in enumerate(theirs)]
    for r in [*ours, *theirs]:
        store.append_run(r, any_store)
    slow = spark_run(day=9, scale=0.8)
    outcome = build_report(slow, any_store)
    assert outcome.comparison is not None and outcome.comparison.status == "regressed"
    assert outcome.comparison.baseline_run_ids == [r.meta.run_id for r in ours]
    second = spark_run(day=9, scale=0.8, run_id="20260309T020000Z-00000009-2")
    second = second.model_copy(update={"meta": second.meta.model_copy(update={"host": "spark-2"})})
    other = build_report(second, any_store)
    assert other.comparison is not None and other.comparison.status == "ok"
    assert other.comparison.baseline_run_ids == [r.meta.run_id for r in theirs]
    if isinstance(any_store, S3Store):  # the report files stay on the worker; the store holds the results
        assert outcome.files is not None and outcome.files.directory.is_relative_to(tmp_path / "local")


def test_old_objects_without_newer_columns_read_with_nulls(any_store: ObjectStore) -> None:
    rec = run_at(dt.datetime(2026, 11, 1, tzinfo=dt.UTC), 1)
    row = store.run_row(rec, "records/x.json")
    schema = pa.schema([f for f in store.RUNS_SCHEMA if f.name not in ("stored_at", "stages_s")])
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([{k: row[k] for k in schema.names}], schema=schema), sink)
    any_store.put_new(f"runs/model={store.slug(REPO)}/host=spark/{rec.meta.run_id}.parquet", sink.getvalue().to_pybytes())
    runs = store.load_runs(any_store)
    assert list(runs["run_id"]) == [rec.meta.run_id] and runs["stages_s"].isna().all()


def test_a_moved_directory_store_still_reads(tmp_path: Path) -> None:
    a = LocalStore(tmp_path / "a")
    store.append_run(run_at(dt.datetime(2026, 11, 1, tzinfo=dt.UTC), 1), a)
    store.compact(a)
    shutil.move(str(tmp_path / "a"), str(tmp_path / "b"))
    (rec,) = store.load_records(LocalStore(tmp_path / "b"))
    assert json.loads(rec.model_dump_json())["meta"]["host"] == "spark"


def test_s3_urls_name_objects_without_credentials(s3_server: MotoS3, s3_store: S3Store) -> None:
    stored = store.append_run(run_at(dt.datetime(2026, 11, 1, tzinfo=dt.UTC), 1), s3_store)
    assert stored.run_path.startswith(f"s3://{s3_store.bucket}/team/results/runs/model=")
    row = store.load_runs(s3_store).iloc[0]
    assert row["record_path"].startswith("s3://") and "secret" not in row["record_path"]
