"""Which store a URL names, and ``roost results`` on a shared store: ``--store``, ``--credentials``, the
environment, ``compact``; every mistake one line and exit 2, and no credential anywhere in a URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_roost
from support.errors import assert_one_line_error
from support.s3 import SECRET_KEY, MotoS3
from support.samples import spark_run

from roost import store
from roost.errors import UserError
from roost.hosts import CPU, HostProfile
from roost.store.location import open_store, parse_store_url
from roost.store.objects import LocalStore
from roost.store.s3 import S3Store


def test_urls_name_a_directory_or_a_bucket_and_prefix(tmp_path: Path) -> None:
    assert parse_store_url(str(tmp_path)).path == tmp_path
    assert parse_store_url(f"file://{tmp_path}/x").path == tmp_path / "x"
    s3 = parse_store_url("s3://roost-team/results/")
    assert (s3.kind, s3.bucket, s3.prefix) == ("s3", "roost-team", "results")
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store("s3://roost-team/results"), S3Store)


@pytest.mark.parametrize("url, says", [
    ("s3://AKIA:wJalrXUtnFEMI@roost-team/results", "credentials never go in the store URL"),
    ("s3://roost-team/results?secret=abc", "no query"),
    ("gs://bucket/x", "unsupported store scheme 'gs'"),
    ("s3:///results", "not a bucket name"),
    ("s3://bucket/../x", "may not contain '..'"),
    ("file://elsewhere/x", "not host 'elsewhere'"),
    ("   ", "is empty"),
])
def test_a_bad_store_url_is_one_clear_error(url: str, says: str) -> None:
    with pytest.raises(UserError, match="ROOST_RESULTS_STORE") as info:
        parse_store_url(url)
    assert says in str(info.value)
    assert "wJalrXUtnFEMI" not in str(info.value)


def test_a_host_block_names_its_store_and_a_bad_one_is_refused() -> None:
    host = CPU.model_copy(update={"results_store": "s3://roost-team/results"})
    assert HostProfile.model_validate(host.model_dump()).results_store == "s3://roost-team/results"
    with pytest.raises(UserError, match="results_store: credentials never go"):
        HostProfile.model_validate(CPU.model_dump() | {"results_store": "s3://k:s@b/p"})


@pytest.fixture
def shared(s3_server: MotoS3, s3_store: S3Store, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    """A bucket holding two runs; the shell's AWS_* environment reaches it (no credentials block)."""
    for day in (1, 2):
        store.append_run(spark_run(day=day), s3_store)
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    return s3_store


def test_results_lists_a_shared_store_by_flag_or_environment(shared: S3Store, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url = shared.url
    code, out, err = run_roost(capsys, monkeypatch, "results", "--store", url, "--json")
    assert code == 0, err
    assert [r["run_id"] for r in json.loads(out)] == [spark_run(day=d).meta.run_id for d in (1, 2)]
    monkeypatch.setenv("ROOST_RESULTS_STORE", url)
    code, out, err = run_roost(capsys, monkeypatch, "results")
    assert code == 0 and f"2 run(s) in {url}" in out
    code, out, err = run_roost(capsys, monkeypatch, "results", "compact")
    assert code == 0 and "compacted the runs of" in out
    code, out, err = run_roost(capsys, monkeypatch, "results", "compact")
    assert code == 0 and "already holds every run" in out
    assert SECRET_KEY not in out + err


@pytest.mark.parametrize("args, says", [
    (["--store", "s3://k:s@bucket/x"], "--store: credentials never go in the store URL"),
    (["--store", "ftp://x/y"], "--store: unsupported store scheme"),
    (["--store", "/tmp", "--dir", "/tmp"], "--store and --dir name the same thing"),
    (["--credentials", "team"], "--credentials goes with an s3:// --store"),
    (["--stroe", "s3://b/p"], "No such option: --stroe"),
])
def test_results_store_mistakes_are_one_line(args: list[str], says: str, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROOST_RESULTS_STORE", raising=False)
    assert_one_line_error(*run_roost(capsys, monkeypatch, "results", *args)[::2], says)


def test_results_on_a_store_that_does_not_answer_is_one_line_exit_1(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from roost.net import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "super-secret-value")
    code, _, err = run_roost(capsys, monkeypatch, "results", "--store", "s3://team/results")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "results store s3://team/results did not answer" in err and "super-secret-value" not in err
