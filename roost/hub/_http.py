"""The Hub over HTTP: which endpoint and token, the few calls the download makes, and the retry loop.

- :func:`resolve_endpoint` / :func:`resolve_token`: ``HF_ENDPOINT`` and ``HF_TOKEN`` (read at call
  time), else huggingface.co and the token ``hf auth login`` stored.
- :class:`HubClient`: resolve a revision to a commit, list the files at a commit, fetch one file over
  HTTP (appending to its partial file with a ``Range`` request) or through ``hf_xet``. The token is
  sent only to the endpoint's host (httpx drops it on a redirect to another origin) and never
  appears in a log line or a message.
- :func:`with_retries`: transient faults (``roost.hub.errors.is_transient``) are retried with
  exponential backoff and jitter (:class:`RetryPolicy`); a transfer that made progress starts its
  budget afresh; refusals become the ``UserError`` sentence at once.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from huggingface_hub import get_token, hf_hub_download
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from roost._compat import XET_TRANSFER_BAR_MARKER
from roost._compat import xet_available as _xet_available
from roost.errors import UserError
from roost.hub.errors import (
    FaultContext,
    HubStatusError,
    HubUnreachable,
    Stopped,
    TransferIncomplete,
    is_transient,
    short_fault,
    to_roost_error,
)
from roost.hub.integrity import HubFile

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ENDPOINT = "https://huggingface.co"
FULL_SHA = re.compile(r"[0-9a-f]{40}")
STREAM_CHUNK = 1024 * 1024
"""Bytes per read of a streamed transfer (1 MiB)."""


def resolve_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT`` read now (not at import), else huggingface.co."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_token(token: str | None = None) -> str | None:
    """``token``, else ``HF_TOKEN``, else the token ``hf auth login`` stored; None for anonymous access."""
    if token:
        return token
    return os.environ.get("HF_TOKEN") or get_token() or None


def is_full_sha(revision: str) -> bool:
    return FULL_SHA.fullmatch(revision) is not None


# ----------------------------------------------------------------------------------------- retries


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter for transient faults."""

    attempts: int = Field(default=6, ge=1, description="Tries per request without progress.")
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
) -> T:
    """Call ``fn``; retry transient faults with backoff; map the rest to roost errors.

    ``progress_marker`` (e.g. bytes on disk) lets a transfer that made progress start afresh.
    """
    failures = 0
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
            failures += 1
            if failures >= policy.attempts:
                kept = " (finished files and partial transfers are kept and resumed)" if ctx.stage == "download" else ""
                raise HubUnreachable(
                    f"{what}: {policy.attempts} attempts failed, last with {short_fault(exc)}; "
                    f"check that {ctx.endpoint} is reachable and run again{kept}",
                    ctx.stage,
                ) from None
            delay = policy.delay(failures)
            log.warning(
                "transient fault while %s (%s); retry %d/%d in %.1f s",
                what,
                short_fault(exc),
                failures,
                policy.attempts - 1,
                delay,
            )
            if stop is not None and stop.wait(delay):
                raise Stopped() from None
            if stop is None:
                sleep(delay)


# -------------------------------------------------------------------------------------- Hub client


class HubClient:
    """The few Hub calls the download stage makes, with the token kept out of every message."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        policy: RetryPolicy | None = None,
        timeout: float = 30.0,
        stage: str = "download",
    ) -> None:
        self.endpoint = endpoint
        self.stage = stage
        self.policy = policy or RetryPolicy()
        self._token = token
        self._lock = threading.Lock()
        self._bytes_read = 0
        headers = {"user-agent": "roost"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        # httpx drops the authorization header when a redirect leaves the endpoint's origin (CDN).
        self._http = httpx.Client(
            headers=headers,
            follow_redirects=True,
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
        )

    @property
    def has_token(self) -> bool:
        return bool(self._token)

    def close(self) -> None:
        self._http.close()

    def context(self, repo_id: str, revision: str, path: str | None = None) -> FaultContext:
        return FaultContext(repo_id, revision, self.endpoint, self.has_token, path, self.stage)

    @property
    def bytes_read(self) -> int:
        """Body bytes this client has read from the network (API answers, metadata, headers, files)."""
        return self._bytes_read

    def _count(self, n: int) -> None:
        with self._lock:
            self._bytes_read += n

    def _get_json(self, url: str, params: dict[str, str] | None = None) -> tuple[Any, httpx.Response]:
        """GET a Hub API answer: the decoded JSON and the response (for its pagination links)."""
        r = self._http.get(url, params=params)
        self._count(r.num_bytes_downloaded)
        if r.status_code >= 400:
            raise HubStatusError.from_response(r)
        try:
            return r.json(), r
        except ValueError:
            raise UserError(
                f"{self.endpoint} answered {url.split('?', 1)[0]} with something other than JSON "
                f"(HTTP {r.status_code}, {r.headers.get('content-type', 'no content type')}); "
                "check HF_ENDPOINT points at a Hugging Face Hub"
            ) from None

    def _api(self, repo_id: str, *parts: str) -> str:
        return "/".join([f"{self.endpoint}/api/models/{repo_id}", *(quote(p, safe="") for p in parts)])

    def resolve(self, repo_id: str, revision: str) -> str:
        """The commit sha ``revision`` (branch, tag, or commit) points at.

        A full sha is its own answer (the listing at it proves it exists); a branch or tag is looked up
        in the repo's refs; a short sha is asked of the Hub.
        """
        if is_full_sha(revision):
            return revision
        ctx = self.context(repo_id, revision)
        refs, _ = with_retries(
            lambda: self._get_json(self._api(repo_id, "refs")),
            what=f"listing refs of {repo_id}",
            ctx=ctx,
            policy=self.policy,
        )
        branches = {b["name"]: b["targetCommit"] for b in refs.get("branches") or []}
        tags = {t["name"]: t["targetCommit"] for t in refs.get("tags") or []}
        names = {**tags, **branches}
        name = revision
        for prefix in ("refs/heads/", "refs/tags/"):
            if revision.startswith(prefix):
                name = revision[len(prefix) :]
        if name in names:
            return str(names[name])
        not_found = UserError(
            f"revision {revision!r} does not exist in {repo_id} (branches: "
            f"{', '.join(sorted(branches)) or 'none'}; tags: {', '.join(sorted(tags)) or 'none'}): "
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

        info = with_retries(lookup, what=f"resolving {repo_id}@{revision}", ctx=ctx, policy=self.policy)
        sha = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(sha, str) or not is_full_sha(sha):
            raise UserError(
                f"{self.endpoint} did not say which commit {repo_id}@{revision} is; pass a full commit sha"
            )
        return sha

    def list_files(self, repo_id: str, commit: str, *, recursive: bool = True) -> list[HubFile]:
        """Every file at ``commit`` (only the top level unless ``recursive``) with size, git blob id and
        (for LFS) sha256: the Hub's tree listing, page by page as its ``Link`` headers say."""

        def listing() -> list[HubFile]:
            out: list[HubFile] = []
            url: str | None = self._api(repo_id, "tree", commit)
            params: dict[str, str] | None = {"recursive": "true" if recursive else "false", "expand": "false"}
            while url:
                page, r = self._get_json(url, params)
                if not isinstance(page, list):
                    raise UserError(f"{self.endpoint} listed {repo_id}@{commit[:12]} as something other than a list")
                out += [_hub_file(item) for item in page if isinstance(item, dict) and item.get("type") == "file"]
                url, params = r.links.get("next", {}).get("url"), None
            return out

        return with_retries(
            listing,
            what=f"listing files of {repo_id}@{commit[:12]}",
            ctx=self.context(repo_id, commit),
            policy=self.policy,
        )

    def file_url(self, repo_id: str, commit: str, path: str) -> str:
        return f"{self.endpoint}/{repo_id}/resolve/{commit}/{quote(path)}"

    def read_small(self, repo_id: str, commit: str, path: str, *, limit: int) -> bytes:
        """The whole of a small file at ``commit`` (a config, an index), refused beyond ``limit`` bytes."""
        with self._http.stream("GET", self.file_url(repo_id, commit, path)) as r:
            if r.status_code >= 400:
                r.read()
                self._count(r.num_bytes_downloaded)
                raise HubStatusError.from_response(r)
            body = bytearray()
            try:
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise UserError(
                            f"hf://{repo_id}@{commit}/{path}: larger than {limit:,} bytes; not a metadata file "
                            "roost can audit"
                        )
            finally:
                self._count(r.num_bytes_downloaded)
        return bytes(body)

    def read_prefix(self, repo_id: str, commit: str, path: str, want: Callable[[bytes, int], int],
                    first: int) -> tuple[bytes, int]:
        """The first bytes of a file, never more than needed: ``want(prefix, stated)`` says how many bytes
        are needed in all once it has seen ``prefix`` (at least 8 bytes), ``stated`` being the file's
        size as the server stated it (-1: not stated).

        Asks for ``bytes=0-(first-1)``. A server that honours ``Range`` answers 206 with that slice (and
        one more ranged request fetches the rest when ``want`` asks for more); one that ignores it
        answers 200 with the whole file, read only until ``want`` is satisfied and then closed. Returns
        the prefix and the file's size as the server stated it (Content-Range or Content-Length; -1
        when it stated none). A connection closed early is ``TransferIncomplete`` (transient).
        """
        url = self.file_url(repo_id, commit, path)
        buf = bytearray()
        need = 8
        with self._http.stream("GET", url, headers={"range": f"bytes=0-{first - 1}"}) as r:
            if r.status_code >= 400:
                r.read()
                self._count(r.num_bytes_downloaded)
                raise HubStatusError.from_response(r)
            total = _stated_size(r)
            ranged = r.status_code == 206
            try:
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) >= 8:
                        need = want(bytes(buf[:8]), total)
                    # a 206 slice (at most ``first`` bytes) is read to its end: the server sent it
                    # anyway, bytes_read then counts it, and the connection stays reusable
                    if len(buf) >= need and (not ranged or len(buf) >= first):
                        break
            finally:
                self._count(r.num_bytes_downloaded)
        if len(buf) < need and ranged and len(buf) == first:  # the slice asked for was short of the header
            with self._http.stream("GET", url, headers={"range": f"bytes={first}-{need - 1}"}) as r:
                if r.status_code >= 400:
                    r.read()
                    self._count(r.num_bytes_downloaded)
                    raise HubStatusError.from_response(r)
                if r.status_code != 206 or content_range_start(r.headers.get("content-range", "")) != first:
                    raise TransferIncomplete(f"server answered the second range of {path} with HTTP {r.status_code}")
                try:
                    for chunk in r.iter_bytes():
                        buf += chunk
                        if len(buf) >= need:
                            break
                finally:
                    self._count(r.num_bytes_downloaded)
        if len(buf) < need:
            raise TransferIncomplete(f"connection closed after {len(buf):,} of the first {need:,} bytes of {path}")
        return bytes(buf[:need]), total

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

        Returns the number of bytes that were already on disk when this attempt started.
        """
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            part.unlink()
            have = 0
        if have == size:
            return have
        if have:
            log.info("resuming %s at byte %d of %d", label or part.name, have, size)
        headers = {"range": f"bytes={have}-"} if have else {}
        with self._http.stream("GET", url, headers=headers) as r:
            if r.status_code == 416:  # the partial file does not fit this object: start over
                part.unlink(missing_ok=True)
                raise TransferIncomplete(f"server refused range {have}- (416)")
            if r.status_code >= 400:
                r.read()
                raise HubStatusError.from_response(r)
            skip = 0
            if have and r.status_code == 200:
                # The server ignored Range (olah's local mirror does): the bytes on disk stay, the
                # same number of bytes at the head of the body is skipped.
                log.info("server ignored the Range request; skipping the %d bytes already on disk", have)
                skip = have
            elif have and r.status_code == 206:
                start = content_range_start(r.headers.get("content-range", ""))
                if start != have:
                    part.unlink(missing_ok=True)
                    raise TransferIncomplete(f"server answered range from {start}, asked {have}")
            with open(part, "ab") as f:
                for chunk in r.iter_bytes(STREAM_CHUNK):
                    if stop.is_set():
                        raise Stopped()
                    if skip:
                        if len(chunk) <= skip:
                            skip -= len(chunk)
                            continue
                        chunk = chunk[skip:]
                        skip = 0
                    f.write(chunk)
                    on_bytes(len(chunk))
        got = part.stat().st_size
        if got < size:
            raise TransferIncomplete(f"connection closed at {got} of {size} bytes")
        if got > size:
            part.unlink()
            raise TransferIncomplete(f"server sent {got} bytes, the listing says {size}")
        return have

    def fetch_xet(
        self, repo_id: str, commit: str, path: str, local_dir: Path, on_bytes: Callable[[int], None]
    ) -> None:
        """Fetch one Xet-stored file with hf_xet (through huggingface_hub) straight to ``local_dir/path``."""
        hf_hub_download(
            repo_id,
            path,
            revision=commit,
            local_dir=local_dir,
            endpoint=self.endpoint,
            token=self._token if self._token else False,
            force_download=True,
            tqdm_class=byte_counting_tqdm(on_bytes),
        )


def _hub_file(item: dict[str, Any]) -> HubFile:
    """One file of a tree listing, read as huggingface_hub's ``RepoFile`` reads it."""
    lfs = item.get("lfs")
    try:
        return HubFile(
            path=item["path"],
            size=int(item["size"]),
            blob_id=item["oid"],
            lfs_sha256=lfs["oid"] if isinstance(lfs, dict) else None,
            xet_hash=item.get("xetHash"),
        )
    except (KeyError, TypeError, ValueError):
        raise UserError(f"the Hub's listing has a file entry without a path or size: {str(item)[:200]}") from None


def _stated_size(r: httpx.Response) -> int:
    """The whole file's size as a response states it: Content-Range's total (206), else Content-Length
    (200, identity encoding); -1 when neither says."""
    m = re.match(r"bytes \d+-\d+/(\d+)", r.headers.get("content-range", ""))
    if m:
        return int(m.group(1))
    length = r.headers.get("content-length")
    if r.status_code == 200 and length and length.isdigit() and not r.headers.get("content-encoding"):
        return int(length)
    return -1


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
