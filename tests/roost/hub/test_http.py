"""The retry loop and its backoff, and hf_xet's progress bars counted once (no server: real functions)."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

from roost.errors import UserError
from roost.hub._files import content_range_start
from roost.hub._retries import RetryPolicy, with_retries
from roost.hub.errors import FaultContext, HubStatusError, HubUnreachable, TransferIncomplete
from roost.hub.progress import byte_counting_tqdm

CTX = FaultContext(repo_id="org/model", revision="main", endpoint="https://hub.example", have_token=False)


def status(code: int, error_code: str = "") -> HubStatusError:
    return HubStatusError(code, error_code, "", "https://hub.example/x")


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
    assert len(calls) == 3 and len(slept) == 2
    assert 0.005 <= slept[0] <= 0.01 and 0.01 <= slept[1] <= 0.02  # half fixed, half jitter, doubling


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
    counted: list[int] = []
    with XetDownloadProgressReporter(
        reconstruction_desc="model.safetensors: reconstructing file",
        transfer_desc="model.safetensors: downloading bytes",
        total=1000,
        log_level=20,
        tqdm_class=byte_counting_tqdm(counted.append),
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


def test_content_range_start_reads_the_first_byte() -> None:
    assert content_range_start("bytes 4096-9999/10000") == 4096
    assert content_range_start("bytes */10000") is None
    assert content_range_start("") is None


def test_an_endpoint_that_never_answered_gets_three_tries_one_that_did_gets_the_budget() -> None:
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with pytest.raises(HubUnreachable, match=r"nothing answered at https://hub\.example \(ConnectError: \[Errno 111\] "
                                             r"Connection refused; 3 attempts in"):
        with_retries(refused, what="t", ctx=CTX, policy=RetryPolicy(base_s=0.0), sleep=lambda _s: None,
                     answered=lambda: False)
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(HubUnreachable, match="6 attempts failed, last with ConnectError"):
        with_retries(refused, what="t", ctx=CTX, policy=RetryPolicy(base_s=0.0), sleep=lambda _s: None,
                     answered=lambda: True)  # a Hub that answered before and is restarting
    assert len(calls) == 6
