"""What can go wrong talking to the Hub or writing the download, and the sentence each fault becomes.

- **Transient** (:func:`is_transient`): 5xx, 408, 429, connection refused or reset, no such host,
  timeouts, a transfer cut short. The retry loop (``roost.hub._retries.with_retries``) backs off and
  tries again (3 tries in all while the endpoint has never answered, 6 once it has); what outlasts
  the retries is :class:`HubUnreachable` (a ``StageFailed``: worth running again later).
- **Client-side** (``UnsupportedProtocol``, ``LocalProtocolError``): what roost's own request cannot
  be; never retried, a ``UserError`` naming the endpoint.
- **Refused** (401/403/404 and the Hub's ``X-Error-Code``: RepoNotFound, GatedRepo, RevisionNotFound,
  DisabledRepo...): never retried; :func:`to_roost_error` turns it into a ``UserError`` whose
  sentence (:func:`hub_fault_sentence`) says which it is and what to do, never naming the token.
- **The local disk refusing** (full, read-only, permission denied): :func:`local_disk_errors` turns
  it into a ``UserError`` naming the file.

A file whose bytes do not match the listing is ``IntegrityError``, defined with the digest checks
in ``roost.hub.integrity``.
"""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2  # huggingface_hub's HTTP client (a dependency of huggingface-hub 2.x)

from roost.errors import RoostError, StageFailed, UserError
from roost.hub._local_folder import free_bytes
from roost.inputs.text import shown
from roost.units import format_bytes

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth retrying (with every other 5xx)."""


class HubStatusError(Exception):
    """An HTTP error status from the Hub, with its ``X-Error-Code`` (RepoNotFound, GatedRepo...)."""

    def __init__(self, status: int, code: str, message: str, url: str) -> None:
        super().__init__(f"HTTP {status} {code or ''} {message}".strip())
        self.status = status
        self.code = code
        self.message = message
        self.url = url

    @classmethod
    def from_response(cls, response: Any) -> HubStatusError:
        """The error an answer states; its ``X-Error-Message`` made one line and short, and rid of the
        credentials the request carried (a server may echo the request's headers)."""
        headers = response.headers
        message = headers.get("x-error-message", "") or ""
        code = headers.get("x-error-code", "") or ""
        for secret in _request_secrets(response):
            message, code = message.replace(secret, "***"), code.replace(secret, "***")
        return cls(
            status=int(response.status_code),
            code=shown(code, 60),
            message=shown(message, 200),
            url=str(response.url).split("?", 1)[0],
        )


def _request_secrets(response: Any) -> list[str]:
    """The credentials in the Authorization header of the request behind ``response`` (its whole
    value and the part after the scheme), longest first."""
    try:
        auth = response.request.headers.get("authorization") or ""
    except (AttributeError, RuntimeError):  # a response built without a request
        return []
    out = [auth, auth.partition(" ")[2]]
    return sorted({s for s in out if len(s) >= 4}, key=len, reverse=True)


class HubUnreachable(StageFailed):
    """The Hub kept failing transiently (5xx, resets, timeouts) after every retry roost makes
    (``roost.hub._retries``: its message counts them); worth running again later, not at once."""

    def __init__(self, message: str, stage: str = "download") -> None:
        super().__init__(stage, message)


class TransferIncomplete(Exception):
    """The server closed a transfer before the listed size arrived (transient: resume it)."""


class Stopped(Exception):
    """Another worker failed; this one stops quietly (partial files stay for resume)."""


@dataclass(frozen=True)
class FaultContext:
    """What a fault sentence needs to say which repo/revision/file and what to do."""

    repo_id: str
    revision: str
    endpoint: str
    have_token: bool
    path: str | None = None
    stage: str = "download"  # or "preflight": what the sentence of a fault that outlasted its retries names


def status_error(exc: BaseException) -> HubStatusError | None:
    """The HTTP status behind ``exc`` (roost's own, or huggingface_hub's HfHubHTTPError), or None."""
    if isinstance(exc, HubStatusError):
        return exc
    # huggingface_hub is not imported for this (importing it parses HF_ENDPOINT): an exception of its
    # type exists only once its module is loaded
    hf_errors = sys.modules.get("huggingface_hub.errors")
    if hf_errors is not None and isinstance(exc, hf_errors.HfHubHTTPError) and getattr(exc, "response", None) is not None:
        return HubStatusError.from_response(exc.response)
    return None


_CLIENT_SIDE = (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx2.UnsupportedProtocol,
                httpx2.LocalProtocolError)
"""Transport errors roost's own request causes (a redirect to a scheme httpx cannot ask, a header it
cannot send): asking again cannot help."""


def is_transient(exc: BaseException) -> bool:
    """5xx/408/429, connection resets, timeouts, truncated transfers: worth retrying."""
    status = status_error(exc)
    if status is not None:
        return status.status in TRANSIENT_STATUS or status.status >= 500
    if isinstance(exc, _CLIENT_SIDE):
        return False
    return isinstance(
        exc,
        TransferIncomplete | httpx.TransportError | httpx2.TransportError | TimeoutError | ConnectionError,
    )


def retry_may_cure(exc: BaseException) -> bool:
    """Whether running a failed step again at once (a Prefect task's ``retries``) may cure ``exc``: a
    transient fault (:func:`is_transient`) that no roost retry saw. Never :class:`HubUnreachable`, which
    roost raises only once its own attempts are spent (its message says how many, "the most roost
    makes"), nor a :class:`~roost.errors.UserError` (bad input, a refusal: asking again cannot help).
    One layer retries each failure: roost the Hub's faults, Prefect what escaped roost's retries."""
    if isinstance(exc, HubUnreachable | UserError):
        return False
    return is_transient(exc)


def short_fault(exc: BaseException) -> str:
    """``HTTP 503`` or ``ConnectError: refused``: what a retry log line says about a fault."""
    status = status_error(exc)
    if status is not None:
        return f"HTTP {status.status}"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def hub_fault_sentence(err: HubStatusError, ctx: FaultContext) -> str:
    """One sentence for a 401/403/404: which it is and what to do. Never includes the token.

    The Hub hides private repos: an anonymous caller gets 401 RepoNotFound and an authenticated one
    404 for a repo that is missing *or* private to someone else, so the sentence names both.
    """
    set_token = "set HF_TOKEN (or the Prefect Secret block) to a token with read access to it"
    where = f"{ctx.endpoint}/{ctx.repo_id}"
    if err.code == "GatedRepo":
        who = "the token roost used has not been granted access" if ctx.have_token else "no token was given"
        return (
            f"{ctx.repo_id} is a gated repository and {who} (HTTP {err.status}): accept its conditions at "
            f"{where} with your account, then set HF_TOKEN (or the Secret block) to a read token of that account"
        )
    if err.code == "DisabledRepo":
        return (
            f"{ctx.repo_id} has been disabled on {ctx.endpoint} (HTTP {err.status}); it cannot be downloaded"
        )
    if err.code == "RevisionNotFound":
        return (
            f"revision {ctx.revision!r} does not exist in {ctx.repo_id} (HTTP {err.status}): "
            "pass an existing branch, tag or full commit sha with --revision"
        )
    if err.status == 404 and ctx.path:
        return (
            f"{ctx.path} is listed in {ctx.repo_id}@{ctx.revision} but {ctx.endpoint} answered "
            f"HTTP 404 for it: check the revision, or report the broken repository to its owner"
        )
    if err.status == 404:
        if ctx.have_token:
            return (
                f"repository {ctx.repo_id} was not found on {ctx.endpoint} (HTTP 404): check the repo id for "
                "typos; if it is private, the token roost used cannot read it: use one that can"
            )
        return f"repository {ctx.repo_id} does not exist on {ctx.endpoint} (HTTP 404): check the repo id for typos"
    if err.status == 401:
        if ctx.have_token:
            return (
                f"{ctx.endpoint} refused access to {ctx.repo_id} with the token roost used (HTTP 401): the "
                "token is invalid or expired, or the repository does not exist; check the repo id, then "
                "create a new read token and set HF_TOKEN (or the Secret block) to it"
            )
        return (
            f"repository {ctx.repo_id} was not found on {ctx.endpoint} without a token (HTTP 401): check the "
            f"repo id for typos; if it is private, {set_token}"
        )
    if err.status == 403:
        return (
            f"access to {ctx.repo_id} is forbidden (HTTP 403): the token lacks read permission for it "
            "(a fine-grained token must list this repository); use a token that can read it"
        )
    return f"{ctx.endpoint} answered HTTP {err.status} for {ctx.repo_id}: {err.message or 'no detail given'}"


def to_roost_error(exc: BaseException, ctx: FaultContext) -> RoostError | None:
    """Map a non-transient Hub fault to the error the CLI and the task understand, or None."""
    if isinstance(exc, RoostError):
        return exc
    status = status_error(exc)
    if status is not None and not is_transient(exc):
        return UserError(hub_fault_sentence(status, ctx))
    if isinstance(exc, _CLIENT_SIDE):
        # the type only: a LocalProtocolError's text can quote a header value
        return UserError(
            f"{ctx.endpoint} cannot be asked for {ctx.repo_id} ({type(exc).__name__}: a redirect to a URL that "
            "is not http(s), or a request header httpx cannot send): check HF_ENDPOINT and any proxy settings"
        )
    return None


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}
_PATH_ERRNOS = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EEXIST}
"""A path that cannot be made or written (too long, a file where a directory must be...): no network
error has these."""


@contextlib.contextmanager
def local_disk_errors(local_dir: Path) -> Iterator[None]:
    """Turn the local disk refusing (full, read-only, permission denied) into a UserError naming the
    path and what to do; other OS errors (network ones included) pass through."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_ERRNOS | _PATH_ERRNOS:
            raise
        where = shown(str(exc.filename or local_dir), 160)
        if exc.errno in _PATH_ERRNOS:
            raise UserError(
                f"{where}: {exc.strerror or 'unusable path'}: choose another --local-dir (a directory, with a "
                "path short enough for the repository's files)"
            ) from None
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"{where}: no space left while downloading ({format_bytes(free_bytes(local_dir))} free "
                f"in {shown(str(local_dir), 160)}): free some space or choose another --local-dir; what is complete is kept"
            ) from None
        raise UserError(
            f"{where}: {exc.strerror or 'not writable'}: make {shown(str(local_dir), 160)} writable for this user "
            "or choose another --local-dir"
        ) from None
