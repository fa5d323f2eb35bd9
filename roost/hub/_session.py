"""The connection to one Hub: endpoint, credentials, timeouts, and what every answer goes through.

:class:`HubSession` holds the HTTP client of one endpoint and one repository type (``model``,
``dataset`` or ``space``: the API's ``/api/models/...`` or ``/api/datasets/...``, the files'
``/<repo>/resolve/...`` or ``/datasets/<repo>/resolve/...``). The token is sent only to the
endpoint's host (httpx drops it on a redirect to another origin; a pagination link to another origin
is refused) and never appears in a log line or a message, nor does a password in the endpoint's
userinfo (sent as basic auth, shown as ``***``). An error answer's body is read only up to a bound;
every JSON answer is bounded and validated by ``roost.hub.answers``; the bytes read are counted.

The Hub's calls are built on it: file transfers (``roost.hub._files``), then the API calls
(``roost.hub._http.HubClient``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from roost.errors import UserError
from roost.hub import answers
from roost.hub._endpoint import CONNECT_TIMEOUT_S, FIRST_ANSWER_TIMEOUT_S, READ_TIMEOUT_S, hub_timeout
from roost.hub._redact import guard_logs, release_logs, scrub
from roost.hub._retries import RetryPolicy, with_retries
from roost.hub.answers import BadAnswer
from roost.hub.errors import FaultContext, HubStatusError
from roost.inputs.text import redact_url, shown

T = TypeVar("T")

RepoType = Literal["model", "dataset", "space"]
"""The kinds of Hub repository (huggingface_hub's ``repo_type``)."""
_URL_PREFIX: dict[RepoType, str] = {"model": "", "dataset": "datasets/", "space": "spaces/"}
"""What precedes ``<org>/<name>`` in a file's URL: a model's files are at the top level."""
ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error answer's body read (to reuse the connection) before it is closed instead."""


def _split_userinfo(endpoint: str) -> tuple[str, tuple[str, str] | None]:
    """The endpoint without its userinfo, and the user and password in it (None when it has none)."""
    parts = urlsplit(endpoint)
    if "@" not in parts.netloc:
        return endpoint, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=hostport)), (unquote(user), unquote(password))


class HubSession:
    """One endpoint's HTTP client for one repository type, with the token kept out of every message."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        policy: RetryPolicy | None = None,
        timeout: float | httpx.Timeout | None = None,
        stage: str = "download",
        repo_type: RepoType = "model",
    ) -> None:
        endpoint = endpoint.rstrip("/")
        self._base, userinfo = _split_userinfo(endpoint)
        self.endpoint = redact_url(endpoint)
        """The endpoint as messages show it (a password replaced by ``***``); requests go to ``_base``."""
        self.stage = stage
        self.repo_type: RepoType = repo_type
        self.policy = policy or RetryPolicy()
        self._token = token
        self._password = userinfo[1] if userinfo else None
        self._lock = threading.Lock()
        self._bytes_read = 0
        self._answered = False
        self._closed = False
        guard_logs(self._token, self._password)
        if isinstance(timeout, httpx.Timeout):
            self.timeout = timeout
        elif timeout is not None:
            self.timeout = httpx.Timeout(timeout, connect=min(CONNECT_TIMEOUT_S, timeout))
        else:
            self.timeout = hub_timeout()
        headers = {"user-agent": "roost"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        # httpx drops the authorization header when a redirect leaves the endpoint's origin (CDN).
        self._http = httpx.Client(
            headers=headers,
            auth=userinfo if userinfo and not token else None,
            follow_redirects=True,
            max_redirects=10,
            timeout=self.timeout,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
            event_hooks={"response": [self._on_answer]},
        )

    def _on_answer(self, _response: httpx.Response) -> None:
        self._answered = True

    def has_answered(self) -> bool:
        """Whether the endpoint has answered any request of this client (any HTTP status)."""
        return self._answered

    @property
    def has_token(self) -> bool:
        return bool(self._token)

    def close(self) -> None:
        self._http.close()
        if not self._closed:
            self._closed = True
            release_logs(self._token, self._password)

    def scrub(self, text: str) -> str:
        """``text`` with the token and the endpoint's password replaced by ``***``."""
        return scrub(text, self._token, self._password)

    def context(self, repo_id: str, revision: str, path: str | None = None) -> FaultContext:
        return FaultContext(repo_id, revision, self.endpoint, self.has_token, path, self.stage)

    def retry(
        self,
        fn: Callable[[], T],
        *,
        what: str,
        ctx: FaultContext,
        progress_marker: Callable[[], int] | None = None,
        stop: threading.Event | None = None,
    ) -> T:
        """:func:`with_retries` with this client's policy, knowing whether the endpoint ever answered."""
        return with_retries(fn, what=what, ctx=ctx, policy=self.policy, progress_marker=progress_marker,
                            stop=stop, answered=self.has_answered)

    @property
    def bytes_read(self) -> int:
        """Body bytes this client has read from the network (API answers, metadata, headers, files)."""
        return self._bytes_read

    def _count(self, n: int) -> None:
        with self._lock:
            self._bytes_read += n

    def _refuse(self, r: httpx.Response) -> HubStatusError:
        """The error for an HTTP error answer, its body read only up to a bound (then closed)."""
        read = 0
        for chunk in r.iter_raw():
            read += len(chunk)
            if read > ERROR_BODY_LIMIT:
                break
        self._count(r.num_bytes_downloaded)
        return HubStatusError.from_response(r)

    def bad_answer(self, call: str, exc: BadAnswer | str) -> UserError:
        """The UserError for an answer of ``call`` that does not fit (``exc`` says which field and why)."""
        what = f"{exc.field}: {exc.reason}" if isinstance(exc, BadAnswer) and exc.field else str(exc)
        return UserError(self.scrub(
            f"{self.endpoint} answered {call} with {what}; that is not a Hugging Face Hub answer: check that "
            "HF_ENDPOINT points at a Hub, or report the repository to its owner"
        ))

    def _read_bounded(self, r: httpx.Response, limit: int, too_big: Callable[[], Exception]) -> bytes:
        """The body of an open answer (an HTTP error refused first), ``too_big()`` raised past ``limit``
        bytes; what was read is counted either way."""
        if r.status_code >= 400:
            raise self._refuse(r)
        body = bytearray()
        try:
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > limit:
                    raise too_big()
        finally:
            self._count(r.num_bytes_downloaded)
        return bytes(body)

    def _get_json(self, url: str, params: dict[str, str] | None = None) -> tuple[Any, httpx.Response]:
        """GET a Hub API answer: the decoded JSON (at most ``answers.MAX_ANSWER_BYTES``) and the response
        (for its pagination links)."""
        call = "GET " + url.split("?", 1)[0].removeprefix(self._base)
        # an endpoint that never answered waits FIRST_ANSWER_TIMEOUT_S at most: a silent server costs
        # its 3 tries ~30 s, not ~90 s
        timeout = self.timeout if self._answered else httpx.Timeout(
            min(FIRST_ANSWER_TIMEOUT_S, self.timeout.read or READ_TIMEOUT_S), connect=self.timeout.connect)
        with self._http.stream("GET", url, params=params, timeout=timeout) as r:
            body = self._read_bounded(r, answers.MAX_ANSWER_BYTES, lambda: self.bad_answer(
                call, f"more than {answers.MAX_ANSWER_BYTES:,} bytes"))
        try:
            return answers.decode(bytes(body)), r
        except BadAnswer as exc:
            kind = r.headers.get("content-type", "no content type")
            raise self.bad_answer(call, f"something other than JSON (HTTP {r.status_code}, {shown(kind, 60)}: "
                                        f"{exc.reason})") from None

    def _api_path(self, repo_id: str, *parts: str) -> str:
        """``/api/models/<repo_id>/<parts>`` (``/api/datasets/...`` for a dataset): an API call's path, as
        requests and messages name it."""
        return "/".join([f"/api/{self.repo_type}s/{repo_id}", *(quote(p, safe="") for p in parts)])

    def _api(self, repo_id: str, *parts: str) -> str:
        return self._base + self._api_path(repo_id, *parts)

    def file_url(self, repo_id: str, commit: str, path: str) -> str:
        return f"{self._base}/{_URL_PREFIX[self.repo_type]}{repo_id}/resolve/{commit}/{quote(path)}"

