"""The Hub over HTTP: which endpoint and token, the few calls the download makes, and the retry loop.

huggingface_hub is imported only where it is used (the stored token, hf_xet): importing it parses
``HF_ENDPOINT``, and an unusable value would fail there, before :func:`check_endpoint` could say why.

- :func:`resolve_endpoint` / :func:`resolve_token`: ``HF_ENDPOINT`` and ``HF_TOKEN`` (read at call
  time), else huggingface.co and the token ``hf auth login`` stored. Both are checked before any
  request: an endpoint that is not an ``http(s)://`` URL with a host (and a port in 1..65535) is a
  ``UserError`` naming the setting; a token with whitespace inside or control characters likewise
  (without showing it).
- :func:`hub_timeout`: every request is bounded in time: 10 s to connect, and 30 s
  (``HF_HUB_DOWNLOAD_TIMEOUT`` when set) for each read, 10 s for the first answer of an endpoint, so
  a server that accepts and never answers (3 tries, ~32 s), or a body that stalls midway, is a
  timeout, never a hang.
- :class:`HubClient`: resolve a revision to a commit, list the files at a commit, fetch one file over
  HTTP (appending to its partial file with a ``Range`` request) or through ``hf_xet``. The token is
  sent only to the endpoint's host (httpx drops it on a redirect to another origin; a pagination link
  to another origin is refused) and never appears in a log line or a message, nor does a password in
  the endpoint's userinfo (sent as basic auth, shown as ``***``). Every JSON answer is bounded and
  validated by ``roost.hub.answers``.
- :func:`with_retries`: transient faults (``roost.hub.errors.is_transient``) are retried with
  exponential backoff and jitter (:class:`RetryPolicy`); a transfer that made progress starts its
  budget afresh; refusals become the ``UserError`` sentence at once. An endpoint that has never
  answered this client (connection refused, no such host, a timeout before any answer) gets
  ``RetryPolicy.unanswered_attempts`` tries (3: about 2 s for a refused connection), not the patient
  budget meant for a Hub that answered and then faltered.
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from roost._compat import XET_TRANSFER_BAR_MARKER
from roost._compat import xet_available as _xet_available
from roost.errors import CheckFailed, UserError
from roost.hub import answers
from roost.hub.answers import BadAnswer
from roost.hub.errors import (
    FaultContext,
    HubStatusError,
    HubUnreachable,
    Stopped,
    TransferIncomplete,
    is_transient,
    short_fault,
    status_error,
    to_roost_error,
)
from roost.hub.integrity import HubFile
from roost.inputs.text import redact_url, shown
from roost.inputs.urls import http_url_problem

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ENDPOINT = "https://huggingface.co"
FULL_SHA = re.compile(r"[0-9a-f]{40}")
STREAM_CHUNK = 1024 * 1024
"""Bytes per read of a streamed transfer, at most (1 MiB): each network read is written as it arrives,
so a transfer that stalls keeps what it received."""
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
"""Seconds a request waits for the next bytes (an answer's head, or more of its body) before it is a
timeout; ``HF_HUB_DOWNLOAD_TIMEOUT`` (huggingface_hub's own setting) overrides it."""
FIRST_ANSWER_TIMEOUT_S = 10.0
"""Seconds an API call waits for an endpoint that has not answered yet (huggingface_hub's metadata timeout)."""
MAX_PAGES = 10_000
"""Tree pages followed at most (1,000 files each)."""
ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error answer's body read (to reuse the connection) before it is closed instead."""
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


def resolve_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT`` read now (not at import), else huggingface.co; checked by
    :func:`check_endpoint` before any request is made."""
    if endpoint:
        return check_endpoint(endpoint, "the Hub endpoint")
    env = os.environ.get("HF_ENDPOINT")
    if env:
        return check_endpoint(env, "HF_ENDPOINT")
    return DEFAULT_ENDPOINT


def check_endpoint(value: str, source: str = "HF_ENDPOINT") -> str:
    """``value`` without a trailing ``/`` when it is a URL roost can ask: ``http`` or ``https``, a host,
    a port in 1..65535 if any, no query or fragment, and one httpx accepts; a UserError naming
    ``source`` (``HF_ENDPOINT``) and saying why otherwise. A password in it is never shown."""
    unset = ", or unset it to use https://huggingface.co" if source == "HF_ENDPOINT" else ""
    remedy = f"set it to the Hub's base URL, e.g. https://huggingface.co or http://127.0.0.1:8090{unset}"

    def bad(why: str) -> UserError:
        return UserError(f"{source} {shown(redact_url(value), 200)!r} is not a usable Hub URL ({why}): {remedy}")

    problem = http_url_problem(value, "Hub")
    if problem is not None:
        raise bad(problem)
    parts = urlsplit(value)
    if parts.query or parts.fragment:
        raise bad("it has a query or a fragment; the base URL has neither")
    return value.rstrip("/")


def resolve_token(token: str | None = None) -> str | None:
    """``token``, else ``HF_TOKEN``, else the token ``hf auth login`` stored; None for anonymous access.

    Surrounding whitespace is dropped (a token read from a file keeps its newline); a token with
    whitespace inside, control or non-ASCII characters is a UserError that does not show it."""
    if token:
        value, source = token, "the Hugging Face token given"
    elif os.environ.get("HF_TOKEN"):
        value, source = os.environ["HF_TOKEN"], "HF_TOKEN"
    else:
        from huggingface_hub import get_token  # here: huggingface_hub reads HF_ENDPOINT when imported

        value, source = get_token() or "", "the token stored by `hf auth login`"
    value = value.strip()
    if not value:
        return None
    if not _TOKEN_CHARS.fullmatch(value):
        raise UserError(
            f"{source} holds whitespace, a control character or a non-ASCII character, which no Hugging Face "
            "token has (the value is not shown): set it to the token alone"
        )
    return value


def hub_timeout() -> httpx.Timeout:
    """The timeouts of every Hub request: 10 s to connect, 30 s (``HF_HUB_DOWNLOAD_TIMEOUT``) per read."""
    raw = os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT", "").strip()
    read = READ_TIMEOUT_S
    if raw:
        try:
            read = float(raw)
        except ValueError:
            read = math.nan
        if not (math.isfinite(read) and 0 < read <= 3600):
            raise UserError(
                f"HF_HUB_DOWNLOAD_TIMEOUT={shown(raw, 40)!r} is not a number of seconds in (0, 3600]: set it "
                f"to e.g. 30, or unset it ({READ_TIMEOUT_S:.0f} s)"
            )
    return httpx.Timeout(read, connect=min(CONNECT_TIMEOUT_S, read))


def is_full_sha(revision: str) -> bool:
    return FULL_SHA.fullmatch(revision) is not None


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every secret in it replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


_LIVE_SECRETS: dict[str, int] = {}
_SECRETS_LOCK = threading.Lock()
_HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy", "hpack.hpack")
"""The HTTP client's loggers: at DEBUG, httpcore logs every answer's headers, which a server may fill
with the request's own ``Authorization`` header."""


class _ScrubSecrets(logging.Filter):
    """Replace the token and endpoint password of every open :class:`HubClient` in the HTTP client's log
    records (a filter on each logger that creates them: a parent's filter would not see them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _SECRETS_LOCK:
            secrets = list(_LIVE_SECRETS)
        if secrets:
            text = record.getMessage()
            clean = scrub(text, *secrets)
            if clean != text:
                record.msg, record.args = clean, None
        return True


def _guard_logs(*secrets: str | None) -> None:
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ScrubSecrets) for f in logger.filters):
            logger.addFilter(_ScrubSecrets())
    with _SECRETS_LOCK:
        for s in secrets:
            if s:
                _LIVE_SECRETS[s] = _LIVE_SECRETS.get(s, 0) + 1


def _release_logs(*secrets: str | None) -> None:
    with _SECRETS_LOCK:
        for s in secrets:
            if s and s in _LIVE_SECRETS:
                _LIVE_SECRETS[s] -= 1
                if not _LIVE_SECRETS[s]:
                    del _LIVE_SECRETS[s]


# ----------------------------------------------------------------------------------------- retries


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter for transient faults."""

    attempts: int = Field(default=6, ge=1, description="Tries per request without progress.")
    unanswered_attempts: int = Field(
        default=3, ge=1,
        description="Tries while the endpoint has never answered this client (refused, no such host, timeouts).",
    )
    base_s: float = 1.0
    cap_s: float = 30.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based): half fixed, half random."""
        ceiling = min(self.cap_s, self.base_s * float(2 ** (failures - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    ctx: FaultContext,
    policy: RetryPolicy,
    progress_marker: Callable[[], int] | None = None,
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    answered: Callable[[], bool] | None = None,
) -> T:
    """Call ``fn``; retry transient faults with backoff; map the rest to roost errors.

    ``progress_marker`` (e.g. bytes on disk) lets a transfer that made progress start afresh.
    ``answered`` says whether the endpoint has ever answered (None: assume it has); while it has not,
    a transport fault gets ``policy.unanswered_attempts`` tries and its own sentence.
    """
    failures = 0
    started = time.monotonic()
    marker = progress_marker() if progress_marker else 0
    while True:
        try:
            return fn()
        except Exception as exc:
            mapped = to_roost_error(exc, ctx)
            if mapped is not None:
                raise mapped from None
            if not is_transient(exc):
                raise
            if progress_marker is not None:
                now = progress_marker()
                if now > marker:
                    failures = 0
                marker = now
            unanswered = answered is not None and not answered() and status_error(exc) is None
            limit = policy.unanswered_attempts if unanswered else policy.attempts
            failures += 1
            if failures >= limit:
                if unanswered:
                    raise HubUnreachable(
                        f"{what}: nothing answered at {ctx.endpoint} ({short_fault(exc)}; {failures} attempts in "
                        f"{time.monotonic() - started:.1f} s, the most roost makes at an endpoint that never "
                        "answered): check that a Hub runs there and that HF_ENDPOINT names it, then run again",
                        ctx.stage,
                    ) from None
                kept = " (finished files and partial transfers are kept and resumed)" if ctx.stage == "download" else ""
                raise HubUnreachable(
                    f"{what}: {limit} attempts failed, last with {short_fault(exc)}; "
                    f"check that {ctx.endpoint} is reachable and run again{kept}",
                    ctx.stage,
                ) from None
            delay = policy.delay(failures)
            log.warning(
                "transient fault while %s (%s); retry %d/%d in %.1f s",
                what,
                short_fault(exc),
                failures,
                limit - 1,
                delay,
            )
            if stop is not None and stop.wait(delay):
                raise Stopped() from None
            if stop is None:
                sleep(delay)


# -------------------------------------------------------------------------------------- Hub client


def _split_userinfo(endpoint: str) -> tuple[str, tuple[str, str] | None]:
    """The endpoint without its userinfo, and the user and password in it (None when it has none)."""
    parts = urlsplit(endpoint)
    if "@" not in parts.netloc:
        return endpoint, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=hostport)), (unquote(user), unquote(password))


class HubClient:
    """The few Hub calls the download stage makes, with the token kept out of every message."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        policy: RetryPolicy | None = None,
        timeout: float | httpx.Timeout | None = None,
        stage: str = "download",
    ) -> None:
        endpoint = endpoint.rstrip("/")
        self._base, userinfo = _split_userinfo(endpoint)
        self.endpoint = redact_url(endpoint)
        """The endpoint as messages show it (a password replaced by ``***``); requests go to ``_base``."""
        self.stage = stage
        self.policy = policy or RetryPolicy()
        self._token = token
        self._password = userinfo[1] if userinfo else None
        self._lock = threading.Lock()
        self._bytes_read = 0
        self._answered = False
        self._closed = False
        _guard_logs(self._token, self._password)
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
            _release_logs(self._token, self._password)

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

    def _api(self, repo_id: str, *parts: str) -> str:
        return "/".join([f"{self._base}/api/models/{repo_id}", *(quote(p, safe="") for p in parts)])

    def resolve(self, repo_id: str, revision: str) -> str:
        """The commit sha ``revision`` (branch, tag, or commit) points at.

        A full sha is its own answer (the listing at it proves it exists); a branch or tag is looked up
        in the repo's refs; a short sha is asked of the Hub.
        """
        if is_full_sha(revision):
            return revision
        ctx = self.context(repo_id, revision)
        refs_url = self._api(repo_id, "refs")
        raw, _ = self.retry(lambda: self._get_json(refs_url), what=f"listing refs of {repo_id}", ctx=ctx)
        try:
            refs = answers.refs(raw)
        except BadAnswer as exc:
            raise self.bad_answer(f"GET /api/models/{repo_id}/refs", exc) from None
        branches = {b.name: b.targetCommit for b in refs.branches}
        tags = {t.name: t.targetCommit for t in refs.tags}
        names = {**tags, **branches}
        name = revision
        for prefix in ("refs/heads/", "refs/tags/"):
            if revision.startswith(prefix):
                name = revision[len(prefix) :]
        if name in names:
            return names[name]
        listed = ", ".join(shown(n, 60) for n in sorted(branches)[:20])
        listed_tags = ", ".join(shown(n, 60) for n in sorted(tags)[:20])
        not_found = UserError(
            f"revision {shown(revision)!r} does not exist in {repo_id} (branches: "
            f"{listed or 'none'}; tags: {listed_tags or 'none'}): "
            "pass an existing branch, tag or full commit sha with --revision"
        )
        if not re.fullmatch(r"[0-9a-fA-F]{4,39}", revision):
            raise not_found

        def lookup() -> Any:
            try:
                return self._get_json(self._api(repo_id, "revision", revision))[0]
            except HubStatusError as exc:
                if exc.status in (401, 404) and exc.code != "GatedRepo":
                    raise not_found from None  # the repo exists (its refs listed): the revision does not
                raise

        info = self.retry(lookup, what=f"resolving {repo_id}@{revision}", ctx=ctx)
        try:
            return answers.revision_info(info).sha
        except BadAnswer as exc:
            raise self.bad_answer(f"GET /api/models/{repo_id}/revision/{revision}", exc) from None

    def list_files(self, repo_id: str, commit: str, *, recursive: bool = True) -> list[HubFile]:
        """Every file at ``commit`` (only the top level unless ``recursive``) with size, git blob id and
        (for LFS) sha256: the Hub's tree listing, page by page as its ``Link`` headers say (on the
        endpoint's own origin only), each entry checked by ``roost.hub.answers``."""
        call = f"GET /api/models/{repo_id}/tree/{commit}"
        origin = urlsplit(self._base)[:2]

        def listing() -> list[HubFile]:
            out: list[answers.TreeFile] = []
            url: str | None = self._api(repo_id, "tree", commit)
            params: dict[str, str] | None = {"recursive": "true" if recursive else "false", "expand": "false"}
            seen: set[str] = set()
            while url:
                if len(seen) >= MAX_PAGES:
                    raise self.bad_answer(call, f"more than {MAX_PAGES:,} pages")
                seen.add(url)
                page, r = self._get_json(url, params)
                try:
                    out += answers.tree_page(page, len(out))
                except BadAnswer as exc:
                    raise self.bad_answer(call, exc) from None
                url, params = r.links.get("next", {}).get("url"), None
                if url is not None:
                    nxt = urlsplit(str(r.url.join(url)))
                    if nxt[:2] != origin:
                        raise self.bad_answer(call, f"a next-page link to another origin ({nxt.scheme}://{nxt.hostname})")
                    url = str(r.url.join(url))
                    if url in seen:
                        raise self.bad_answer(call, "a next-page link back to a page already read")
            try:
                answers.check_listing(out)
            except BadAnswer as exc:
                raise self.bad_answer(call, exc) from None
            return [
                HubFile(path=f.path, size=f.size, blob_id=f.oid, lfs_sha256=f.lfs.oid if f.lfs else None,
                        xet_hash=f.xetHash)
                for f in out
            ]

        return self.retry(listing, what=f"listing files of {repo_id}@{commit[:12]}", ctx=self.context(repo_id, commit))

    def file_url(self, repo_id: str, commit: str, path: str) -> str:
        return f"{self._base}/{repo_id}/resolve/{commit}/{quote(path)}"

    def read_small(self, repo_id: str, commit: str, path: str, *, limit: int) -> bytes:
        """The whole of a small file at ``commit`` (a config, an index), refused beyond ``limit`` bytes."""
        with self._http.stream("GET", self.file_url(repo_id, commit, path)) as r:
            return self._read_bounded(r, limit, lambda: UserError(
                f"hf://{repo_id}@{commit}/{path}: larger than {limit:,} bytes; not a metadata file roost can audit"))

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

    def read_prefix(self, repo_id: str, commit: str, path: str, want: Callable[[bytes, int], int],
                    first: int) -> tuple[bytes, list[tuple[str, int]]]:
        """The first bytes of a file, never more than needed: ``want(prefix, stated)`` says how many bytes
        are needed in all once it has seen ``prefix`` (at least 8 bytes), ``stated`` being the file's
        size as the server stated it (-1: not stated).

        Asks for ``bytes=0-(first-1)``. A server that honours ``Range`` answers 206 with that slice (or a
        shorter one: the rest is asked for with further ranged requests, at most
        :data:`MAX_RANGE_REQUESTS` in all); one that ignores it answers 200 with the whole file, read
        only until ``want`` is satisfied and then closed. Returns the prefix and the sizes the first
        answer stated for the file (:func:`size_claims`). A connection closed early is
        ``TransferIncomplete`` (transient).
        """
        url = self.file_url(repo_id, commit, path)
        buf = bytearray()
        need = 8
        total = -1
        claims: list[tuple[str, int]] = []
        ranged = False
        for _ in range(MAX_RANGE_REQUESTS):
            start = len(buf)
            end = first - 1 if start == 0 else max(need, start + 1) - 1
            with self._http.stream("GET", url, headers={"range": f"bytes={start}-{end}"}) as r:
                if r.status_code >= 400:
                    raise self._refuse(r)
                if start == 0:
                    claims = size_claims(r)
                    total = claims[0][1] if claims else -1
                    ranged = r.status_code == 206
                elif r.status_code != 206:
                    raise TransferIncomplete(f"server answered a further range of {path} with HTTP {r.status_code}")
                if r.status_code == 206:
                    span = content_range(r.headers.get("content-range", ""))
                    if span is None or span[0] != start:
                        raise TransferIncomplete(
                            f"server answered range {start}-{end} of {path} with Content-Range "
                            f"{shown(r.headers.get('content-range', 'none'), 60)}"
                        )
                try:
                    for chunk in r.iter_bytes():
                        buf += chunk
                        if len(buf) >= 8:
                            need = want(bytes(buf[:8]), total)
                        # a 206 slice (at most what was asked) is read to its end: the server sent it
                        # anyway, bytes_read then counts it, and the connection stays reusable
                        if (len(buf) > end) if ranged else (len(buf) >= need):
                            break
                finally:
                    self._count(r.num_bytes_downloaded)
            if len(buf) >= need:
                return bytes(buf[:need]), claims
            if not ranged or len(buf) == start:
                raise TransferIncomplete(f"connection closed after {len(buf):,} of the first {need:,} bytes of {path}")
        raise self.bad_answer(
            f"GET /{repo_id}/resolve/{commit[:12]}/{path}",
            f"{MAX_RANGE_REQUESTS} range answers holding {len(buf):,} bytes in all, short of the {need:,} needed",
        )

    def fetch_http(
        self,
        url: str,
        part: Path,
        size: int,
        on_bytes: Callable[[int], None],
        stop: threading.Event,
        label: str = "",
    ) -> int:
        """One attempt: append to ``part`` from where it ends (HTTP Range) until it holds ``size`` bytes.

        Returns the number of bytes that were already on disk when this attempt started. A server that
        states another size for the file than the listing (Content-Length, Content-Range, X-Linked-Size)
        or sends more bytes than the listing says is a ``CheckFailed`` at once (a commit's file never
        changes: retrying cannot help); a body cut short is ``TransferIncomplete`` (resumed). A server
        that answers a range with a shorter slice, whole, is asked for the rest at once.
        """
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            part.unlink()
            have = 0
        if have == size:
            return have
        if have:
            log.info("resuming %s at byte %d of %d", label or part.name, have, size)
        started = have
        while True:
            whole_slice = self._fetch_answer(url, part, size, have, on_bytes, stop, label or part.name)
            got = part.stat().st_size
            if got >= size:
                return started
            if not whole_slice or got <= have:
                raise TransferIncomplete(f"connection closed at {got} of {size} bytes")
            have = got

    def _fetch_answer(self, url: str, part: Path, size: int, have: int, on_bytes: Callable[[int], None],
                      stop: threading.Event, name: str) -> bool:
        """One request of :meth:`fetch_http`, appending its body to ``part`` (which holds ``have`` bytes).
        True when it was a 206 slice received whole (its Content-Range's last byte arrived)."""
        headers = {"range": f"bytes={have}-"} if have else {}
        with self._http.stream("GET", url, headers=headers) as r:
            if r.status_code == 416:  # the partial file does not fit this object: start over
                part.unlink(missing_ok=True)
                raise TransferIncomplete(f"server refused range {have}- (416)")
            if r.status_code >= 400:
                raise self._refuse(r)
            for header, claimed in size_claims(r):
                if claimed != size:
                    raise CheckFailed(
                        f"{self.endpoint} serves {name} with {header} {claimed:,} bytes but its listing says "
                        f"{size:,}: the server or the repository is inconsistent (nothing of this answer was "
                        "kept); try again later or report it to the repository's owner"
                    )
            pos = 0  # offset in the file of the body's next byte
            last = size - 1
            if r.status_code == 206:
                span = content_range(r.headers.get("content-range", ""))
                if span is None or span[0] != have:
                    part.unlink(missing_ok=True)
                    raise TransferIncomplete(f"server answered range from {span[0] if span else None}, asked {have}")
                pos, last = have, min(span[1], size - 1)
            elif have:
                # The server ignored Range (olah's local mirror does): the bytes on disk stay, the
                # same number of bytes at the head of the body is skipped.
                log.info("server ignored the Range request; skipping the %d bytes already on disk", have)
            with open(part, "ab") as f:
                for chunk in r.iter_bytes():  # as each read arrives (a chunk_size would hold back up to it)
                    if stop.is_set():
                        raise Stopped()
                    if pos + len(chunk) > size:
                        f.close()
                        part.unlink(missing_ok=True)
                        raise CheckFailed(
                            f"{self.endpoint} sent more than the {size:,} bytes its listing says {name} holds: "
                            "the server or the repository is inconsistent; try again later or report it to "
                            "the repository's owner"
                        )
                    if pos < have:  # skipping what is on disk already
                        keep = chunk[have - pos:]
                        pos += len(chunk) - len(keep)
                        chunk = keep
                        if not chunk:
                            continue
                    f.write(chunk)
                    pos += len(chunk)
                    on_bytes(len(chunk))
            return r.status_code == 206 and pos == last + 1

    def fetch_xet(
        self, repo_id: str, commit: str, path: str, local_dir: Path, on_bytes: Callable[[int], None]
    ) -> None:
        """Fetch one Xet-stored file with hf_xet (through huggingface_hub) straight to ``local_dir/path``.

        huggingface_hub's metadata call is bounded by this client's read timeout; hf_xet's own transfer
        keeps its own timeouts."""
        from huggingface_hub import hf_hub_download

        hf_hub_download(
            repo_id,
            path,
            revision=commit,
            local_dir=local_dir,
            endpoint=self._base,
            token=self._token if self._token else False,
            force_download=True,
            etag_timeout=float(self.timeout.read or READ_TIMEOUT_S),
            tqdm_class=byte_counting_tqdm(on_bytes),
        )


MAX_RANGE_REQUESTS = 8
"""Ranged requests one header read makes at most (a server answering with ever shorter slices)."""


def size_claims(r: httpx.Response) -> list[tuple[str, int]]:
    """Every size an answer states for the whole file: Content-Range's total (206), Content-Length (a
    200 in identity encoding) and X-Linked-Size (the Hub's header for an LFS file, on the answer or a
    redirect before it)."""
    claims: list[tuple[str, int]] = []
    m = re.fullmatch(r"bytes \d+-\d+/(\d+)", r.headers.get("content-range", "").strip())
    if m:
        claims.append(("Content-Range", int(m.group(1))))
    length = r.headers.get("content-length", "").strip()
    if r.status_code == 200 and length.isdigit() and not r.headers.get("content-encoding"):
        claims.append(("Content-Length", int(length)))
    for answer in (*r.history, r):
        linked = answer.headers.get("x-linked-size", "").strip()
        if linked.isdigit():
            claims.append(("X-Linked-Size", int(linked)))
            break
    return claims


def content_range(value: str) -> tuple[int, int] | None:
    """The first and last byte of a ``Content-Range: bytes <start>-<end>/<size>`` answer, or None."""
    m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", value.strip())
    if not m or int(m.group(2)) < int(m.group(1)):
        return None
    return int(m.group(1)), int(m.group(2))


def content_range_start(value: str) -> int | None:
    """The first byte of a ``Content-Range: bytes <start>-<end>/<size>`` answer, or None."""
    m = re.match(r"bytes (\d+)-", value)
    return int(m.group(1)) if m else None


def xet_available() -> bool:
    """hf_xet is installed, so Xet-stored files can be fetched through it."""
    return _xet_available()


def byte_counting_tqdm(sink: Callable[[int], None]) -> Any:
    """A silent tqdm class that forwards the bytes of huggingface_hub's file bar to ``sink``.

    hf_xet reports network bytes ("downloading bytes") and file bytes on two bars; only the file
    bytes are forwarded, so each byte of the file counts once.
    """

    class _Counter(tqdm):  # type: ignore[misc, type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._forward = XET_TRANSFER_BAR_MARKER not in str(kwargs.get("desc", ""))
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if n and self._forward:
                sink(int(n))
            return None

    return _Counter
