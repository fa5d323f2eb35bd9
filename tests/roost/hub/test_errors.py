"""Fault classification, the 401/403/404 sentences, and the local disk refusing (no server)."""

from __future__ import annotations

import errno
from dataclasses import replace
from pathlib import Path

import httpx
import httpx2
import pytest

from roost.errors import UserError
from roost.hub.errors import (
    FaultContext,
    HubStatusError,
    TransferIncomplete,
    hub_fault_sentence,
    is_transient,
    local_disk_errors,
    to_roost_error,
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
        (httpx2.ConnectError("refused"), True),  # huggingface_hub's client
        (httpx2.ReadTimeout("slow"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.RemoteProtocolError("peer closed"), True),
        (ConnectionResetError(), True),
        (TransferIncomplete("short"), True),
        (ValueError("bug"), False),
        (httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."), False),
        (httpx.LocalProtocolError("Illegal header value"), False),
        (httpx2.UnsupportedProtocol("no scheme"), False),
    ],
)
def test_transient_faults_are_5xx_408_429_resets_and_timeouts(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_gated_repo_sentence_says_accept_the_conditions() -> None:
    assert hub_fault_sentence(status(401, "GatedRepo"), CTX) == (
        "org/model is a gated repository and no token was given (HTTP 401): accept its conditions at "
        "https://hub.example/org/model with your account, then set HF_TOKEN (or the Secret block) to a "
        "read token of that account"
    )
    with_token = replace(CTX, have_token=True)
    assert hub_fault_sentence(status(403, "GatedRepo"), with_token).startswith(
        "org/model is a gated repository and the token roost used has not been granted access (HTTP 403): "
    )


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
    with pytest.raises(UserError, match=match), local_disk_errors(tmp_path):
        raise err


def test_network_os_errors_pass_through_the_disk_guard(tmp_path: Path) -> None:
    with pytest.raises(ConnectionResetError), local_disk_errors(tmp_path):
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")


def test_a_request_roost_cannot_make_is_a_user_error_without_its_text() -> None:
    """A LocalProtocolError's text can quote a header value (the token): only its type is named."""
    err = to_roost_error(httpx.LocalProtocolError("Illegal header value b'Bearer hf_secret'"), CTX)
    assert isinstance(err, UserError) and "hf_secret" not in str(err)
    assert str(err).startswith("https://hub.example cannot be asked for org/model (LocalProtocolError: ")


def test_an_error_message_the_hub_states_is_one_line_and_rid_of_the_token() -> None:
    request = httpx.Request("GET", "https://hub.example/api/models/org/model/refs",
                            headers={"authorization": "Bearer hf_echoed_secret"})
    response = httpx.Response(400, headers={"x-error-message": "bad: authorization=Bearer hf_echoed_secret\nmore",
                                            "x-error-code": "hf_echoed_secret"}, request=request)
    err = HubStatusError.from_response(response)
    assert "hf_echoed_secret" not in err.message + err.code and "\n" not in err.message
    assert err.message == "bad: authorization=***\\nmore"  # the newline escaped, the token gone
