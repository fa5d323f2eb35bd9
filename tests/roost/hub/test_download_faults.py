"""Fault classification, the 401/403/404 sentences, and the retry loop (no server: real functions)."""

from __future__ import annotations

import errno
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from roost.errors import UserError
from roost.hub.download import (
    FaultContext,
    HubStatusError,
    HubUnreachable,
    RetryPolicy,
    TransferIncomplete,
    hub_fault_sentence,
    is_transient,
    with_retries,
)

CTX = FaultContext(repo_id="org/model", revision="main", endpoint="https://hub.example", have_token=False)


def status(code: int, error_code: str = "") -> HubStatusError:
    return HubStatusError(code, error_code, "", "https://hub.example/x")


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (status(500), True),
        (status(502), True),
        (status(503), True),
        (status(504), True),
        (status(429), True),
        (status(408), True),
        (status(401, "RepoNotFound"), False),
        (status(403, "GatedRepo"), False),
        (status(404, "EntryNotFound"), False),
        (httpx.ConnectError("refused"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.RemoteProtocolError("peer closed"), True),
        (ConnectionResetError(), True),
        (TransferIncomplete("short"), True),
        (ValueError("bug"), False),
    ],
)
def test_transient_faults_are_5xx_408_429_resets_and_timeouts(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_gated_repo_sentence_says_accept_the_conditions() -> None:
    text = hub_fault_sentence(status(403, "GatedRepo"), CTX)
    assert text.startswith("org/model is a gated repository and no token was given (HTTP 403)")
    assert "accept its conditions at https://hub.example/org/model" in text
    with_token = replace(CTX, have_token=True)
    assert "has not been granted access" in hub_fault_sentence(status(403, "GatedRepo"), with_token)


def test_401_404_403_sentences_say_which_and_what_to_do() -> None:
    with_token = replace(CTX, have_token=True)
    assert "without a token (HTTP 401)" in hub_fault_sentence(status(401, "RepoNotFound"), CTX)
    assert "token is invalid or expired" in hub_fault_sentence(status(401), with_token)
    assert hub_fault_sentence(status(404, "RepoNotFound"), CTX).endswith("check the repo id for typos")
    assert "the token roost used cannot read it" in hub_fault_sentence(
        status(404, "RepoNotFound"), with_token
    )
    assert "lacks read permission" in hub_fault_sentence(status(403), with_token)
    assert "revision 'main' does not exist" in hub_fault_sentence(status(404, "RevisionNotFound"), CTX)
    file_ctx = replace(CTX, path="model.safetensors")
    assert hub_fault_sentence(status(404, "EntryNotFound"), file_ctx).startswith(
        "model.safetensors is listed in"
    )


def test_retry_delays_grow_exponentially_with_jitter_and_a_cap() -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=8.0)
    for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 8.0)]:
        delays = [policy.delay(failures) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > 0  # jittered


def test_transient_faults_are_retried_then_succeed() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise httpx.ConnectError("refused")
        return "ok"

    assert with_retries(flaky, what="t", ctx=CTX, policy=RetryPolicy(base_s=0.01), sleep=slept.append) == "ok"
    assert len(calls) == 3 and len(slept) == 2 and slept[1] >= slept[0] / 2


def test_404_is_not_retried() -> None:
    calls: list[int] = []

    def missing() -> None:
        calls.append(1)
        raise status(404, "RepoNotFound")

    with pytest.raises(UserError, match=r"does not exist on https://hub\.example"):
        with_retries(missing, what="t", ctx=CTX, policy=RetryPolicy(), sleep=lambda _s: None)
    assert len(calls) == 1


def test_retries_run_out_into_hub_unreachable_unless_bytes_keep_arriving() -> None:
    def down() -> None:
        raise status(503)

    with pytest.raises(HubUnreachable, match="3 attempts failed, last with HTTP 503"):
        with_retries(
            down, what="t", ctx=CTX, policy=RetryPolicy(attempts=3, base_s=0.0), sleep=lambda _s: None
        )

    on_disk = [0]

    def progressing() -> str:
        on_disk[0] += 100
        if on_disk[0] < 1000:
            raise TransferIncomplete("cut")
        return "done"

    # ten cuts, but each attempt made progress: the budget of 3 never runs out
    assert (
        with_retries(
            progressing,
            what="t",
            ctx=CTX,
            policy=RetryPolicy(attempts=3, base_s=0.0),
            progress_marker=lambda: on_disk[0],
            sleep=lambda _s: None,
        )
        == "done"
    )


def test_xet_progress_counts_bytes_written_once() -> None:
    """hf_xet reports network and reconstruction bytes on two bars; roost counts the file bytes only."""
    from types import SimpleNamespace

    from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

    from roost.hub.download import _byte_counting_tqdm

    counted: list[int] = []
    with XetDownloadProgressReporter(
        reconstruction_desc="model.safetensors: reconstructing file",
        transfer_desc="model.safetensors: downloading bytes",
        total=1000,
        log_level=20,
        tqdm_class=_byte_counting_tqdm(counted.append),
    ) as reporter:
        for done, sent in [(300, 400), (1000, 900)]:
            reporter.update_progress(
                SimpleNamespace(
                    total_bytes_completed=done,
                    total_transfer_bytes_completed=sent,
                    total_bytes_completion_rate=None,
                    total_transfer_bytes_completion_rate=None,
                    total_bytes=1000,
                )
            )
    assert sum(counted) == 1000


def test_selection_keeps_roost_bookkeeping_and_the_directory_safe() -> None:
    from roost.hub.download import DownloadSpec, select_files
    from roost.hub.integrity import HubFile

    def hub(path: str) -> HubFile:
        return HubFile(path=path, size=1, blob_id="0" * 40)

    spec = DownloadSpec(
        repo_id="org/model", allow_patterns=["*.json", "*.safetensors"], ignore_patterns=["original/*"]
    )
    picked = select_files(
        [
            hub("config.json"),
            hub(".roost/download.json"),
            hub("original/x.safetensors"),
            hub("a/model.safetensors"),
            hub("README.md"),
        ],
        spec,
    )
    assert [f.path for f in picked] == ["a/model.safetensors", "config.json"]
    with pytest.raises(UserError, match="outside the download directory"):
        select_files([hub("../escape.json")], spec)


# The local disk refusing mid-download: a full or read-only disk cannot be made here (and root
# ignores permissions), so these raise the OSError the filesystem would (FAKE fault, named as such).
@pytest.mark.parametrize(
    ("err", "match"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/models/m/model-00001.safetensors"),
         r"^/models/m/model-00001.safetensors: no space left while downloading \(.* free in .*\): free some space"),
        (OSError(errno.EROFS, "Read-only file system", "/models/m/config.json"),
         r"^/models/m/config.json: Read-only file system: make .* writable for this user or choose another --local-dir"),
    ],
)
def test_the_local_disk_refusing_is_a_user_error_naming_the_file(err: OSError, match: str, tmp_path: Path) -> None:
    from roost.hub.download import _local_disk_errors

    with pytest.raises(UserError, match=match), _local_disk_errors(tmp_path):
        raise err


def test_network_os_errors_pass_through_the_disk_guard(tmp_path: Path) -> None:
    from roost.hub.download import _local_disk_errors

    with pytest.raises(ConnectionResetError), _local_disk_errors(tmp_path):
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
