"""The results store's faults with the real parts: a real small filesystem (a tmpfs mounted for the test)
filled while a run is written, by the store itself and by the land flow's report stage; and files in the
store that are not its rows (a text file named like a row, a torn copy, a Parquet file of other columns
or types, a torn catalog), read by the store and by ``roost results --dir`` as a user runs it.

Stray files are skipped with one warning naming each (exit 0), never a crash: one file another tool left
must not hide every other run of a shared store from listings, histories and baselines; the store never
deletes anything, so the file stays where it is for a person to look at."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect import flow
from support.cli import ROOST
from support.samples import spark_run

from roost import store
from roost.hosts import CPU
from roost.records import RunRecord
from roost.store import catalog
from roost.store.layout import slug
from roost.store.objects import LocalStore, StoreFull

REPO = Path(__file__).resolve().parents[2]
DISK_BYTES = 2 * 1024 * 1024


@pytest.fixture
def store_small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem of 2 MiB (tmpfs), mounted for this test and unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem (mount -t tmpfs) needs root: run the tests as root to fill a real disk")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755", "tmpfs", str(mnt)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"mount -t tmpfs failed as root: {done.stderr.strip()}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def store_fill(mnt: Path, leave: int = 0) -> Path:
    """Fill the filesystem at ``mnt`` with one file until it refuses a write, then give ``leave`` bytes back."""
    filler = mnt / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        while True:  # the last partial block
            try:
                os.write(fd, b"\0" * 512)
            except OSError:
                break
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, filler.stat().st_size - leave)
    return filler


def store_snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def store_assert_whole(root: Path) -> None:
    """No temporary left, and every visible file a whole object of the store."""
    hidden = [p for p in root.rglob(".*") if "reports" not in p.relative_to(root).parts]
    assert hidden == [], hidden
    for p in root.rglob("*"):
        if "reports" in p.relative_to(root).parts:  # the rendered report files: not objects of the store
            continue
        if p.suffix == ".parquet":
            pq.read_table(p)
        elif p.suffix == ".json":
            RunRecord.model_validate_json(p.read_text())


@pytest.mark.parametrize("leave", [0, 40 * 1024], ids=["full", "nearly-full"])
def test_a_full_disk_refuses_the_run_whole_and_the_next_write_after_space_is_freed_succeeds(
        store_small_disk: Path, leave: int) -> None:
    root = store_small_disk / "results"
    earlier = [spark_run(day=d) for d in (1, 2, 3)]
    for rec in earlier:
        store.append_run(rec, root)
    history = store_snapshot(root)
    filler = store_fill(store_small_disk, leave)

    new = spark_run(day=4)
    with pytest.raises(StoreFull) as failed:
        store.append_run(new, root)
    message = str(failed.value)
    assert "\n" not in message and message.startswith(f"results store {root}: could not write ")
    assert "no space" in message.lower() and failed.value.failure_class == "results_store_full"

    store_assert_whole(root)  # nothing torn is visible ("nearly-full": the record may be, whole)
    assert {p: b for p, b in store_snapshot(root).items() if p in history} == history
    assert list(store.load_runs(root)["run_id"]) == [r.meta.run_id for r in earlier]  # the new run is not committed
    assert [r.meta.run_id for r in store.load_records(root)] == [r.meta.run_id for r in earlier]
    assert set(store.load_points(root)["run_id"]) == {r.meta.run_id for r in earlier}
    assert set(pd.read_parquet(root / "runs")["run_id"]) == {r.meta.run_id for r in earlier}

    filler.unlink()  # space freed: the same run is written (its record kept if the first attempt wrote it)
    stored = store.append_run(new, root)
    assert Path(stored.run_path).is_file()
    assert list(store.load_runs(root)["run_id"]) == [r.meta.run_id for r in [*earlier, new]]
    assert store.load_record(new.meta.run_id, root).points == new.points
    store_assert_whole(root)


@flow(name="store-faults-report")
def store_report_only(day: int) -> dict[str, object]:
    """The land flow's last stages (``flows.stages``: report, then the verdict) on a sample record, with the
    store the environment names."""
    from flows.lifecycle import finish, results_store
    from flows.stages import report_stage

    record = spark_run(day=day)
    with results_store(CPU):
        comparison = report_stage(record, notify=False)
    return finish(record, "land", None, comparison)


@pytest.mark.slow
@pytest.mark.parametrize("copy_on", ["another-disk", "the-full-disk"])
def test_a_landing_whose_results_disk_is_full_fails_saying_so_and_loses_nothing_it_measured(
        prefect_api: str, store_small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_on: str) -> None:
    """The report stage writes the run through ``KeepLocalCopy``: the store (a directory on the full disk)
    refuses it, so it goes to the worker's local copy (``$ROOST_HOME/pending-results``). On another disk the
    copy holds it until `roost results push`; on the same full disk nothing can hold it, and the run must fail
    saying it is not stored (it used to end Completed, green, with its results written nowhere)."""
    root = store_small_disk / "results"
    home = tmp_path / "home" if copy_on == "another-disk" else store_small_disk / "home"
    for k, v in {"ROOST_RESULTS_STORE": str(root), "ROOST_HOME": str(home), "ROOST_RESULTS_DIR": str(root)}.items():
        monkeypatch.setenv(k, v)
    earlier = [spark_run(day=d) for d in (1, 2)]
    for rec in earlier:
        store.append_run(rec, root)
    home.mkdir(parents=True, exist_ok=True)
    filler = store_fill(store_small_disk)

    state = store_report_only(5, return_state=True)
    assert state.is_failed()
    message = state.message or ""
    assert "\n" not in message and f"results store {root} is full" in message and "no space" in message.lower()
    assert list(store.load_runs(root)["run_id"]) == [r.meta.run_id for r in earlier]
    store_assert_whole(root)
    run_id = spark_run(day=5).meta.run_id
    filler.unlink()

    if copy_on == "another-disk":
        pending = home / "pending-results" / slug(str(root))
        assert f"kept in {pending}" in message and "`roost results push`" in message
        assert any(p.name == f"{run_id}.parquet" for p in pending.rglob("*"))
        push = subprocess.run([ROOST, "results", "--dir", str(root), "push"], capture_output=True, text=True,
                              timeout=120, cwd=REPO)
        assert push.returncode == 0, push.stderr
        assert "uploaded" in push.stdout and not pending.exists()
    else:
        assert "the run is NOT stored" in message and "free space and run it again" in message
        again = store_report_only(5, return_state=True)  # the same run once the disk has room
        assert again.is_completed(), again.message
    runs = store.load_runs(root)
    assert list(runs["run_id"]) == [*(r.meta.run_id for r in earlier), run_id]
    assert store.load_record(run_id, root).points == spark_run(day=5).points
    store_assert_whole(root)


# --- files in the store that are not its rows ---------------------------------------------------------------


def store_strays(root: Path) -> dict[str, Path]:
    """Three runs and a catalog of them, then every kind of file a reader must step over (a FAKE of what a
    copy that is not atomic or another tool leaves: the store itself never writes them)."""
    runs = [spark_run(day=d) for d in (1, 2, 3)]
    for rec in runs[:2]:
        store.append_run(rec, root)
    good_catalog = store.compact(root)
    assert good_catalog is not None
    store.append_run(runs[2], root)
    part = root / f"runs/model={slug(runs[0].meta.repo_id)}/host=spark"
    row = (part / f"{runs[0].meta.run_id}.parquet").read_bytes()
    strays = {
        "text": part / "20260310T020000Z-0000text.parquet",
        "torn": part / "20260311T020000Z-0000torn.parquet",
        "types": part / "20260312T020000Z-000types.parquet",
        "other": part / "20260313T020000Z-000other.parquet",
        "points": root / f"points/model={slug(runs[0].meta.repo_id)}/host=spark/20260310T020000Z-0000text.parquet",
        "catalog": root / "runs/_catalog/202603/20260320T020000Z-00000009-0000000009-0123456789ab.parquet",
    }
    strays["text"].write_text("run_id,decode\nnot parquet,1\n")
    strays["torn"].write_bytes(row[: len(row) // 2])
    bad = pq.read_table(pa.BufferReader(row))
    pq.write_table(bad.set_column(bad.schema.get_field_index("decode_tok_s"), "decode_tok_s",
                                  pa.array(["fast"] * bad.num_rows)), strays["types"])
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), strays["other"])
    strays["points"].write_text("nothing here")
    catalog_bytes = (root / good_catalog).read_bytes()
    strays["catalog"].write_bytes(catalog_bytes[: len(catalog_bytes) - 100])  # newer name, torn footer
    return strays


def test_files_that_are_not_rows_are_skipped_and_named_by_every_reader(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "results"
    strays = store_strays(root)
    ids = [spark_run(day=d).meta.run_id for d in (1, 2, 3)]
    stats = store.ReadStats()
    with caplog.at_level("WARNING", logger="roost.store"):
        assert list(store.load_runs(root, stats=stats)["run_id"]) == ids
    skipped = {root / k for k in stats.skipped}
    assert skipped == {strays[k] for k in ("text", "torn", "types", "other", "catalog")}
    for path in skipped:
        assert str(path) in caplog.text
    assert "column decode_tok_s holds string, not double" in caplog.text
    assert "not rows of the table (no run_id or started_at column)" in caplog.text
    assert stats.catalog != str(strays["catalog"].relative_to(root))  # the older, whole catalog was used
    assert set(store.load_points(root)["run_id"]) == set(ids)
    assert [r.meta.run_id for r in store.load_records(root)] == ids
    assert list(store.load_runs(root, model=spark_run().meta.repo_id, host="spark")["run_id"]) == ids
    new = store.compact(root)  # a new catalog of the three runs, without the strays
    assert new is not None and new != str(strays["catalog"].relative_to(root))
    after = store.ReadStats()
    assert list(store.load_runs(root, stats=after)["run_id"]) == ids and after.catalog == new
    assert all(p.exists() for p in strays.values())  # left in place: the store deletes nothing


def test_roost_results_lists_every_run_around_stray_files_and_names_them(tmp_path: Path) -> None:
    root = tmp_path / "results"
    strays = store_strays(root)
    ids = [spark_run(day=d).meta.run_id for d in (1, 2, 3)]
    env = {k: v for k, v in os.environ.items() if k != "ROOST_RESULTS_STORE"}
    listing = subprocess.run([ROOST, "results", "--dir", str(root)], capture_output=True, text=True,
                             timeout=120, cwd=REPO, env=env)
    assert listing.returncode == 0, listing.stderr
    assert [line.split()[0] for line in listing.stdout.splitlines()[2:5]] == ids
    assert f"3 run(s) in {root}" in listing.stdout
    assert "Traceback" not in listing.stderr and "internal error" not in listing.stderr
    lines = listing.stderr.strip().splitlines()
    named = {k for k in ("text", "torn", "types", "other", "catalog") for line in lines if str(strays[k]) in line}
    assert named == {"text", "torn", "types", "other", "catalog"}, listing.stderr
    assert len(lines) == 5 and all(line.startswith("results store: skipped ") for line in lines), lines


def test_a_catalog_a_copy_truncated_is_passed_over_by_writers_too(tmp_path: Path) -> None:
    """A run committed beside a torn catalog (its late-commit check and compaction read the catalog) is stored
    and read like any other."""
    root = tmp_path / "results"
    store_strays(root)
    late = spark_run(day=25)
    store.append_run(late, root)
    assert late.meta.run_id in set(store.load_runs(root)["run_id"])
    assert catalog.newest_catalog(LocalStore(root)) is not None
