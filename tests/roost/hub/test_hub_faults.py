"""The Hub boundary's faults: an unusable endpoint or token refused before any request, every request
bounded in time (a server that accepts and never answers, a body that stalls midway, nothing
listening), sizes a server states against its listing, secrets never echoed, and a download
directory that cannot be used or that a file name or symlink would lead out of.

The servers are the real mirror (olah) and, for what olah cannot do, the FAKES of
``support.hub_faults`` (each named so). Wall times are bounds against hangs, not speed figures."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from hub_samples import REPO, SharedHub, sha256_of
from support.hub import shard_name
from support.hub_faults import EchoHub, SilentHub, SizeLieHub, StallHub

from roost.errors import CheckFailed, UserError
from roost.hub._endpoint import check_endpoint, hub_timeout, resolve_endpoint, resolve_token
from roost.hub.errors import HubUnreachable
from roost.hub.snapshot import DownloadSpec, RetryPolicy, download_and_verify, usable_local_dir
from roost.net import free_port

QUICK = RetryPolicy(attempts=2, base_s=0.05, cap_s=0.1)


# ---------------------------------------------------------------------------------- the endpoint


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("notaurl", "no http:// or https:// scheme"),
        ("ftp://hub.example", "scheme 'ftp'; only http:// and https:// are Hub URLs"),
        ("http://", "no host"),
        ("http://127.0.0.1:99999", "the port is not a number in 1..65535"),
        ("http://127.0.0.1:0", "port 0"),
        ("http://hub.example:abc", "the port is not a number in 1..65535"),
        ("http://[::1", "it does not parse as a URL: invalid ipv6 url"),
        ("http://hub.example/\nx", "it holds whitespace or a control character"),
        ("http://hub.example/?a=1", "it has a query or a fragment"),
    ],
)
def test_an_unusable_endpoint_is_refused_before_any_request(value: str, why: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", value)
    with pytest.raises(UserError) as info:
        resolve_endpoint()
    message = str(info.value)
    assert message.startswith("HF_ENDPOINT '") and f"is not a usable Hub URL ({why}" in message
    assert "\n" not in message and info.value.exit_code == 2


def test_an_endpoint_password_is_never_shown(shared_hub: SharedHub, tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        check_endpoint("https://user:s3cret-pw@:443")
    assert "s3cret-pw" not in str(info.value) and "user:***@" in str(info.value)
    # a usable one with a password works against the real mirror (sent as basic auth), shown redacted
    host = shared_hub.endpoint.removeprefix("http://")
    result = download_and_verify(DownloadSpec(repo_id=REPO, allow_patterns=["config.json"]), tmp_path / "dl",
                                 endpoint=f"http://user:s3cret-pw@{host}")
    assert result.endpoint == f"http://user:***@{host}" and "s3cret-pw" not in result.model_dump_json()
    assert check_endpoint("https://hub.example/mirror/") == "https://hub.example/mirror"


def test_a_token_that_cannot_be_one_is_refused_without_being_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("hf_abc def", "hf_abc\x01", "hf_abcé"):
        monkeypatch.setenv("HF_TOKEN", bad)
        with pytest.raises(UserError) as info:
            resolve_token()
        assert "HF_TOKEN holds whitespace" in str(info.value) and bad not in str(info.value)
    monkeypatch.setenv("HF_TOKEN", "  hf_from_a_file\n")
    assert resolve_token() == "hf_from_a_file"


def test_the_timeouts_bound_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    t = hub_timeout()
    assert (t.connect, t.read, t.write, t.pool) == (10.0, 30.0, 30.0, 30.0)
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2")
    assert (hub_timeout().connect, hub_timeout().read) == (2.0, 2.0)
    for bad in ("abc", "-1", "0", "nan", "1e9"):
        monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", bad)
        with pytest.raises(UserError, match=r"^HF_HUB_DOWNLOAD_TIMEOUT=.* is not a number of seconds"):
            hub_timeout()


# ------------------------------------------------------------------------------ bounded in time


def test_nothing_listening_gives_up_after_three_quick_tries(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(HubUnreachable) as info:
        download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=endpoint)
    took = time.monotonic() - t0
    message = str(info.value)
    assert f"nothing answered at {endpoint} (ConnectError: [Errno 111] Connection refused; 3 attempts in" in message
    assert info.value.exit_code == 1 and took < 10


def test_a_hub_that_accepts_and_never_answers_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
    with SilentHub() as silent:
        t0 = time.monotonic()
        with pytest.raises(HubUnreachable) as info:
            download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=silent.endpoint,
                                retry=RetryPolicy(base_s=0.05, cap_s=0.1))
        took = time.monotonic() - t0
    assert f"listing refs of {REPO}: nothing answered at {silent.endpoint} (ReadTimeout" in str(info.value)
    assert silent.accepted == 3 and took < 10


def test_a_body_that_stalls_midway_times_out_and_keeps_what_arrived(
    shared_hub: SharedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
    name = shard_name(1, 2)
    body = (shared_hub.main_src / name).read_bytes()
    with StallHub(shared_hub.endpoint, name, body, after=100_000) as stall:
        t0 = time.monotonic()
        with pytest.raises(HubUnreachable) as info:
            download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=stall.endpoint, retry=QUICK)
        took = time.monotonic() - t0
    assert f"fetching {name}: 2 attempts failed, last with ReadTimeout" in str(info.value)
    assert f"check that {stall.endpoint} is reachable" in str(info.value)
    assert stall.attempts == 2 and took < 15
    # what arrived is kept: the next run against the real mirror resumes the shard from it
    result = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=shared_hub.endpoint)
    shard = next(f for f in result.files if f.path == name)
    assert shard.resumed_from == 100_000 and shard.sha256 == sha256_of(shared_hub.main_src / name)


# ------------------------------------------------------------------------------- sizes and secrets


@pytest.mark.parametrize(("header", "delta"), [("content-length", -1000), ("x-linked-size", 5)])
def test_a_size_the_server_states_against_the_listing_fails_at_once(
    shared_hub: SharedHub, tmp_path: Path, header: str, delta: int
) -> None:
    name = shard_name(1, 2)
    body = (shared_hub.main_src / name).read_bytes()
    shown = {"content-length": "Content-Length", "x-linked-size": "X-Linked-Size"}[header]
    with SizeLieHub(shared_hub.endpoint, name, body, len(body) + delta, header) as lie, \
            pytest.raises(CheckFailed) as info:
        download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=lie.endpoint)
    assert str(info.value).startswith(
        f"{lie.endpoint} serves {name} with {shown} {len(body) + delta:,} bytes but its listing says {len(body):,}"
    )
    assert info.value.exit_code == 1 and lie.attempts == 1  # not retried: a commit's file never changes
    assert not (tmp_path / "dl" / name).exists()


def test_the_token_never_appears_even_when_the_hub_echoes_the_request(
    shared_hub: SharedHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "hf_echoed_" + os.urandom(8).hex()
    with EchoHub(shared_hub.endpoint) as echo, caplog.at_level(logging.DEBUG), pytest.raises(UserError) as info:
        download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=echo.endpoint, token=secret)
    message = str(info.value)
    assert message.startswith(f"{echo.endpoint} answered HTTP 400 for {REPO}: bad request: ")
    assert "authorization: ***" in message.lower() and secret not in message
    assert not [r for r in caplog.records if secret in r.getMessage()]


# ---------------------------------------------------------------------------- the local directory


def test_an_unusable_local_dir_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("x")
    cases = {
        tmp_path / ("x" * 5000): "path too long (",
        tmp_path / ("y" * 300) / "m": "a component is longer than 255 bytes",
        afile: "exists and is a file, not a directory; pass a directory",
        afile / "sub": f"is under {afile}, which is a file, not a directory",
    }
    for path, said in cases.items():
        with pytest.raises(UserError) as info:
            usable_local_dir(path)
        assert said in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 400
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UserError, match="exists and is a FIFO"):
        download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "fifo", endpoint=f"http://127.0.0.1:{free_port()}")


def test_a_symlink_or_a_fifo_in_the_directory_is_never_followed(shared_hub: SharedHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    dl.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("keep me\n")
    (dl / "config.json").symlink_to(outside)
    with pytest.raises(UserError) as info:
        download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
    assert f"config.json would be written or read at {outside}, outside {dl}" in str(info.value)
    assert outside.read_text() == "keep me\n"
    (dl / "config.json").unlink()
    os.mkfifo(dl / "tokenizer.json")  # hashing it in place would block forever
    with pytest.raises(UserError, match=r"tokenizer\.json is a FIFO \(named pipe\), where the repository has a file"):
        download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
