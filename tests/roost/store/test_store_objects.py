"""The object store contract both kinds of results store keep: write once, whole or nothing, listed in
key order from a point; typed failures that never carry a credential."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.s3 import SECRET_KEY, MotoS3

from roost.net import free_port
from roost.store.atomic import AlreadyStored
from roost.store.objects import LocalStore, MissingObject, ObjectStore, StoreError, StoreUnreachable
from roost.store.s3 import S3Store


def test_an_object_is_written_once_and_never_replaced(any_store: ObjectStore) -> None:
    any_store.put_new("runs/model=m/host=h/r1.parquet", b"first")
    with pytest.raises(AlreadyStored):
        any_store.put_new("runs/model=m/host=h/r1.parquet", b"second")
    assert any_store.get("runs/model=m/host=h/r1.parquet") == b"first"
    assert any_store.get_range("runs/model=m/host=h/r1.parquet", 1, 4) == b"irs"
    assert any_store.exists("runs/model=m/host=h/r1.parquet")
    assert not any_store.exists("runs/model=m/host=h/r2.parquet")
    with pytest.raises(MissingObject):
        any_store.get("runs/model=m/host=h/r2.parquet")


def test_listing_is_in_key_order_from_a_point_and_by_prefix(any_store: ObjectStore) -> None:
    for key in ["runs/model=a/host=x/3.parquet", "runs/model=a/host=x/1.parquet", "runs/model=a/host=y/2.parquet",
                "runs/model=b/host=x/1.parquet", "points/model=a/host=x/1.parquet"]:
        any_store.put_new(key, b"x")
    assert [o.key for o in any_store.list_objects("runs/model=a/")] == [
        "runs/model=a/host=x/1.parquet", "runs/model=a/host=x/3.parquet", "runs/model=a/host=y/2.parquet"]
    assert [o.key for o in any_store.list_objects("runs/model=a/host=x/", start_after="runs/model=a/host=x/1")] == [
        "runs/model=a/host=x/1.parquet", "runs/model=a/host=x/3.parquet"]
    assert [o.key for o in any_store.list_objects("runs/model=a/host=x/", start_after="runs/model=a/host=x/2")] == [
        "runs/model=a/host=x/3.parquet"]
    assert [o.key for o in any_store.list_objects("runs/model=a/host=x/3")] == ["runs/model=a/host=x/3.parquet"]
    assert all(o.size == 1 for o in any_store.list_objects("runs/"))
    assert any_store.list_dirs("runs/") == ["model=a", "model=b"]
    assert any_store.list_dirs("runs/model=a/") == ["host=x", "host=y"]
    assert any_store.list_dirs("nothing/") == [] and any_store.list_objects("nothing/") == []


def test_a_directory_store_never_lists_a_file_still_being_written(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put_new("runs/model=m/host=h/r1.parquet", b"whole")
    (tmp_path / "runs/model=m/host=h/.r2.parquet.x1y2.tmp").write_bytes(b"half")  # a writer mid-way
    assert [o.key for o in store.list_objects("runs/")] == ["runs/model=m/host=h/r1.parquet"]
    with pytest.raises(StoreError, match="leaves the store"):
        store.get("../outside")


def test_an_s3_put_that_finds_its_own_bytes_there_counts_as_written(s3_store: S3Store) -> None:
    """What obstore's retry of a PUT whose first attempt landed (its answer lost) meets: 412 on an object
    holding exactly these bytes. That is this write, done; other bytes under the key are another's."""
    key = "records/model=m/host=h/r1.json"
    s3_store.put_new(key, b"the record")
    s3_store.put_new(key, b"the record")  # the retry: no AlreadyStored
    with pytest.raises(AlreadyStored):
        s3_store.put_new(key, b"another record")
    assert s3_store.get(key) == b"the record"


def test_two_writers_racing_for_one_key_leave_exactly_one_whole_object(any_store: ObjectStore) -> None:
    key = "runs/model=m/host=h/contested.parquet"
    won: list[bytes] = []
    lost: list[bytes] = []
    gate = threading.Barrier(8)

    def write(n: int) -> None:
        data = f"writer-{n}-".encode() * 1000
        gate.wait()
        try:
            any_store.put_new(key, data)
            won.append(data)
        except AlreadyStored:
            lost.append(data)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    assert any_store.get(key) == won[0]


def test_an_unreachable_object_store_fails_fast_with_its_class_and_no_secret(s3_server: MotoS3) -> None:
    creds = s3_server.credentials().model_copy(update={"endpoint_url": f"http://127.0.0.1:{free_port()}"})
    store = S3Store("team", "results", creds, connect_timeout_s=1, request_timeout_s=2, retries=1, retry_window_s=3)
    t0 = time.monotonic()
    with pytest.raises(StoreUnreachable) as info:
        store.put_new("runs/model=m/host=h/r1.parquet", b"x")
    assert time.monotonic() - t0 < 30
    assert info.value.failure_class == "results_store_unreachable"
    assert "s3://team/results" in str(info.value) and SECRET_KEY not in str(info.value)
    with pytest.raises(StoreUnreachable):
        store.list_objects("runs/")


def test_a_missing_bucket_is_named(s3_server: MotoS3) -> None:
    store = S3Store("no-such-bucket", "results", s3_server.credentials())
    with pytest.raises(StoreError, match="no-such-bucket") as info:
        store.put_new("k", b"x")
    assert not isinstance(info.value, StoreUnreachable) and SECRET_KEY not in str(info.value)
