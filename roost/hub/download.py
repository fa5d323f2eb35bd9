"""Download a checkpoint from the Hub once, verify every byte, and never fetch or hash it twice.

``download_and_verify(spec, local_dir)``:

1. resolves ``spec.revision`` (branch, tag or commit) to a commit sha; everything after names the commit;
2. skips, with one log line, when the manifest says this commit was verified here and every selected
   file's fingerprint (size, mtime_ns, inode) is unchanged; a pinned commit needs no network for that;
3. lists the files at that commit, keeps those the allow/ignore patterns select;
4. hashes files already on disk that roost has not verified (or that changed since): a file that
   changed after roost verified it fails the run (it is reported, never replaced silently);
5. checks free space against the bytes still to fetch plus a margin, refusing early with both numbers;
6. fetches the rest in parallel, resuming each interrupted transfer from its partial file
   (``.roost/partial/``) with an HTTP ``Range`` request; uses ``hf_xet`` for files the Hub serves from Xet
   storage when it is installed (resume then happens per file);
7. verifies each fetched file as soon as it lands (size, and sha256 or git blob id against the listing),
   in a thread pool, and records it in the manifest.

Faults: 401/403/404 fail at once with a sentence saying which and what to do (``UserError``); 5xx, 408,
429, resets and timeouts are retried with exponential backoff and jitter, and a transfer that made
progress starts its retry budget afresh; what outlasts the retries is ``HubUnreachable``. A mismatch is
``IntegrityError`` (a ``CheckFailed``) naming the file, the expected and the found digest.
The token is sent only to the endpoint's host and never appears in a log line or a message.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import os
import random
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field, field_validator

from roost.errors import RoostError, StageFailed, UserError
from roost.hub.integrity import (
    ByteCounter,
    FileDigest,
    Fingerprint,
    HubFile,
    IntegrityError,
    Manifest,
    Mismatch,
    VerifiedEntry,
    check_digest,
    default_hash_workers,
    hash_file,
    load_manifest,
    selection_key,
    state_dir,
    write_manifest,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ENDPOINT = "https://huggingface.co"

DEFAULT_ALLOW_PATTERNS: tuple[str, ...] = (
    # weights
    "*.safetensors",
    "*.safetensors.index.json",
    # config, generation config, quantization / processor configs
    "*config.json",
    # tokenizer
    "tokenizer.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "*.tiktoken",
    # chat template
    "chat_template.jinja",
    "chat_template.json",
)
DEFAULT_IGNORE_PATTERNS: tuple[str, ...] = ("original/*", "*.pth", "*.pt", "*.gguf")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
FULL_SHA = re.compile(r"[0-9a-f]{40}")
STREAM_CHUNK = 1024 * 1024
_OWN_DIRS = (".roost/", ".cache/")  # roost's and huggingface_hub's bookkeeping: never taken from a repo


# ---------------------------------------------------------------------------------------- models


class DownloadSpec(BaseModel):
    """What to fetch: a repo, a revision, and the file patterns of the model profile."""

    repo_id: str
    revision: str = "main"
    allow_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOW_PATTERNS))
    ignore_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE_PATTERNS))

    @field_validator("repo_id")
    @classmethod
    def _repo_id_form(cls, v: str) -> str:
        parts = v.split("/")
        if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts):
            raise ValueError(f"repo id {v!r} is not of the form ORG/NAME (e.g. 'Qwen/Qwen3-0.6B')")
        return v

    @field_validator("revision")
    @classmethod
    def _revision_nonempty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("revision is empty; pass a branch, tag or commit sha (default 'main')")
        return v.lower() if re.fullmatch(r"[0-9a-fA-F]{40}", v) else v

    def pinned(self, commit: str) -> DownloadSpec:
        """The same spec with the revision replaced by a resolved commit sha."""
        return self.model_copy(update={"revision": commit})

    @property
    def selection(self) -> str:
        """A short digest of the allow/ignore patterns (part of the Prefect cache key)."""
        return selection_key(self.allow_patterns, self.ignore_patterns)


class DownloadProgress(BaseModel):
    """One progress report: bytes done of total in the current phase, with rate and ETA."""

    phase: Literal["download", "verify"]
    bytes_done: int
    bytes_total: int
    rate_bps: float = Field(description="Bytes per second since the phase started (this run's bytes only).")
    eta_s: float | None
    files_done: int
    files_total: int

    @property
    def fraction(self) -> float:
        return 1.0 if self.bytes_total <= 0 else min(1.0, self.bytes_done / self.bytes_total)

    def line(self) -> str:
        eta = "" if self.eta_s is None else f", ETA {format_seconds(self.eta_s)}"
        return (
            f"{self.phase}: {format_bytes(self.bytes_done)} / {format_bytes(self.bytes_total)} "
            f"({100 * self.fraction:.1f}%) at {format_bytes(self.rate_bps)}/s{eta}; "
            f"files {self.files_done}/{self.files_total}"
        )


ProgressCallback = Callable[[DownloadProgress], None]


class FileRecord(BaseModel):
    """One file of the result: where it is, what it hashes to, and how this run got it."""

    path: str
    size: int
    sha256: str
    verified: bool
    lfs: bool = False
    git_oid: str | None = Field(default=None, description="The git blob id checked, for a non-LFS file.")
    source: Literal["cache", "disk", "download"] = Field(
        description="cache: fingerprint unchanged since verified; disk: hashed in place; download: fetched now."
    )
    resumed_from: int = Field(
        default=0,
        description="Bytes already on disk (kept, not fetched again) when the transfer's final attempt started.",
    )


class DownloadResult(BaseModel):
    """What the download stage established (``roost download --json``)."""

    repo_id: str
    revision: str = Field(description="What was asked for: a branch, tag or commit.")
    commit: str
    local_dir: str
    files: list[FileRecord]
    bytes: int = Field(description="Total size of the selected files.")
    cached: bool = Field(
        description="Nothing was fetched or hashed: every file was verified before and unchanged."
    )
    downloaded_bytes: int = 0
    hashed_bytes: int = 0
    seconds: float = 0.0
    endpoint: str = ""


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter for transient faults."""

    attempts: int = Field(default=6, ge=1, description="Tries per request without progress.")
    base_s: float = 1.0
    cap_s: float = 30.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based): half fixed, half random."""
        ceiling = min(self.cap_s, self.base_s * float(2 ** (failures - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class HubUnreachable(StageFailed):
    """The Hub kept failing transiently (5xx, resets, timeouts) after every retry; worth retrying later."""

    def __init__(self, message: str) -> None:
        super().__init__("download", message)


# ---------------------------------------------------------------------------------- formatting


def format_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"  # pragma: no cover


def format_seconds(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


# ------------------------------------------------------------------------------ configuration


def resolve_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT`` read now (not at import), else huggingface.co."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_token(token: str | None = None) -> str | None:
    """``token``, else ``HF_TOKEN``, else the token ``hf auth login`` stored; None for anonymous access."""
    if token:
        return token
    env = os.environ.get("HF_TOKEN")
    if env:
        return env
    from huggingface_hub import get_token

    return get_token() or None


def default_local_dir(repo_id: str) -> Path:
    """``$ROOST_HOME/models/<org>--<name>``: one directory per repo; commits update it in place."""
    from roost.settings import roost_home

    return roost_home() / "models" / repo_id.replace("/", "--")


def is_full_sha(revision: str) -> bool:
    return FULL_SHA.fullmatch(revision) is not None


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return shutil.disk_usage("/").free  # pragma: no cover


# ----------------------------------------------------------------------------------- faults


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
        headers = response.headers
        return cls(
            status=int(response.status_code),
            code=headers.get("x-error-code", "") or "",
            message=headers.get("x-error-message", "") or "",
            url=_strip_query(str(response.url)),
        )


class TransferIncomplete(Exception):
    """The server closed a transfer before the listed size arrived (transient: resume it)."""


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]


def _as_status_error(exc: BaseException) -> HubStatusError | None:
    if isinstance(exc, HubStatusError):
        return exc
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError) and getattr(exc, "response", None) is not None:
        return HubStatusError.from_response(exc.response)
    return None


def is_transient(exc: BaseException) -> bool:
    """5xx/408/429, connection resets, timeouts, truncated transfers: worth retrying."""
    status = _as_status_error(exc)
    if status is not None:
        return status.status in TRANSIENT_STATUS or status.status >= 500
    if isinstance(exc, TransferIncomplete | httpx.TransportError | TimeoutError | ConnectionError):
        return True
    try:
        import httpx2

        if isinstance(exc, httpx2.TransportError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return False


@dataclass(frozen=True)
class FaultContext:
    """What a fault sentence needs to say which repo/revision/file and what to do."""

    repo_id: str
    revision: str
    endpoint: str
    have_token: bool
    path: str | None = None


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
    status = _as_status_error(exc)
    if status is not None and not is_transient(exc):
        return UserError(hub_fault_sentence(status, ctx))
    return None


def _short(exc: BaseException) -> str:
    status = _as_status_error(exc)
    if status is not None:
        return f"HTTP {status.status}"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


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
                raise HubUnreachable(
                    f"{what}: {policy.attempts} attempts failed, last with {_short(exc)}; "
                    f"check that {ctx.endpoint} is reachable and run again (finished files and partial "
                    "transfers are kept and resumed)"
                ) from None
            delay = policy.delay(failures)
            log.warning(
                "transient fault while %s (%s); retry %d/%d in %.1f s",
                what,
                _short(exc),
                failures,
                policy.attempts - 1,
                delay,
            )
            if stop is not None and stop.wait(delay):
                raise _Stopped() from None
            if stop is None:
                sleep(delay)


class _Stopped(Exception):
    """Another worker failed; this one stops quietly (partial files stay for resume)."""


# ------------------------------------------------------------------------------------ Hub client


class HubClient:
    """The few Hub calls the download stage makes, with the token kept out of every message."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        policy: RetryPolicy | None = None,
        timeout: float = 30.0,
    ) -> None:
        from huggingface_hub import HfApi

        self.endpoint = endpoint
        self.policy = policy or RetryPolicy()
        self._token = token
        self._api = HfApi(endpoint=endpoint, token=token if token else False, library_name="roost")
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
        return FaultContext(repo_id, revision, self.endpoint, self.has_token, path)

    def resolve(self, repo_id: str, revision: str) -> str:
        """The commit sha ``revision`` (branch, tag, or commit) points at.

        A full sha is its own answer (the listing at it proves it exists); a branch or tag is looked up
        in the repo's refs; a short sha is asked of the Hub.
        """
        if is_full_sha(revision):
            return revision
        ctx = self.context(repo_id, revision)
        refs = with_retries(
            lambda: self._api.list_repo_refs(repo_id),
            what=f"listing refs of {repo_id}",
            ctx=ctx,
            policy=self.policy,
        )
        names = {
            **{t.name: t.target_commit for t in refs.tags},
            **{b.name: b.target_commit for b in refs.branches},
        }
        name = revision
        for prefix in ("refs/heads/", "refs/tags/"):
            if revision.startswith(prefix):
                name = revision[len(prefix) :]
        if name in names:
            return str(names[name])
        not_found = UserError(
            f"revision {revision!r} does not exist in {repo_id} (branches: "
            f"{', '.join(sorted(b.name for b in refs.branches)) or 'none'}; tags: "
            f"{', '.join(sorted(t.name for t in refs.tags)) or 'none'}): "
            "pass an existing branch, tag or full commit sha with --revision"
        )
        if not re.fullmatch(r"[0-9a-fA-F]{4,39}", revision):
            raise not_found

        def lookup() -> Any:
            try:
                return self._api.model_info(repo_id, revision=revision)
            except Exception as exc:
                status = _as_status_error(exc)
                if status is not None and status.status in (401, 404) and status.code != "GatedRepo":
                    raise not_found from None  # the repo exists (its refs listed): the revision does not
                raise

        info = with_retries(lookup, what=f"resolving {repo_id}@{revision}", ctx=ctx, policy=self.policy)
        if not info.sha:
            raise UserError(
                f"{self.endpoint} did not say which commit {repo_id}@{revision} is; pass a full commit sha"
            )
        return str(info.sha)

    def list_files(self, repo_id: str, commit: str) -> list[HubFile]:
        """Every file at ``commit`` with size, git blob id and (for LFS) sha256."""
        from huggingface_hub.hf_api import RepoFile

        def listing() -> list[HubFile]:
            out = []
            for item in self._api.list_repo_tree(repo_id, revision=commit, recursive=True):
                if isinstance(item, RepoFile):
                    out.append(
                        HubFile(
                            path=item.path,
                            size=int(item.size),
                            blob_id=item.blob_id,
                            lfs_sha256=item.lfs.sha256 if item.lfs is not None else None,
                            xet_hash=item.xet_hash,
                        )
                    )
            return out

        return with_retries(
            listing,
            what=f"listing files of {repo_id}@{commit[:12]}",
            ctx=self.context(repo_id, commit),
            policy=self.policy,
        )

    def file_url(self, repo_id: str, commit: str, path: str) -> str:
        return f"{self.endpoint}/{repo_id}/resolve/{commit}/{quote(path)}"

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
                start = _content_range_start(r.headers.get("content-range", ""))
                if start != have:
                    part.unlink(missing_ok=True)
                    raise TransferIncomplete(f"server answered range from {start}, asked {have}")
            with open(part, "ab") as f:
                for chunk in r.iter_bytes(STREAM_CHUNK):
                    if stop.is_set():
                        raise _Stopped()
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
        from huggingface_hub import hf_hub_download

        hf_hub_download(
            repo_id,
            path,
            revision=commit,
            local_dir=local_dir,
            endpoint=self.endpoint,
            token=self._token if self._token else False,
            force_download=True,
            tqdm_class=_byte_counting_tqdm(on_bytes),
        )


def _content_range_start(value: str) -> int | None:
    m = re.match(r"bytes (\d+)-", value)
    return int(m.group(1)) if m else None


def _byte_counting_tqdm(sink: Callable[[int], None]) -> Any:
    """A silent tqdm class that forwards the bytes of huggingface_hub's file bar to ``sink``."""
    from tqdm.auto import tqdm

    class _Counter(tqdm):  # type: ignore[misc, type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._forward = "downloading bytes" not in str(kwargs.get("desc", ""))
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if n and self._forward:
                sink(int(n))
            return None

    return _Counter


# ------------------------------------------------------------------------------------- planning


@dataclass
class _Plan:
    cached: list[HubFile] = field(default_factory=list)
    to_hash: list[HubFile] = field(default_factory=list)
    to_fetch: list[HubFile] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)


def _partial_path(local_dir: Path, f: HubFile) -> Path:
    return state_dir(local_dir) / "partial" / (f.expected_digest.replace(":", "-") + ".part")


def _plan(local_dir: Path, listing: Sequence[HubFile], verified: dict[str, VerifiedEntry]) -> _Plan:
    plan = _Plan()
    for f in listing:
        fp = Fingerprint.maybe(local_dir / f.path)
        entry = verified.get(f.path)
        same_content = entry is not None and entry.expected == f.expected_digest
        if fp is not None and same_content and entry is not None and entry.fingerprint == fp:
            plan.cached.append(f)
        elif fp is not None and fp.size == f.size:
            plan.to_hash.append(f)
        elif fp is not None and same_content and entry is not None:
            plan.mismatches.append(
                Mismatch(
                    path=f.path,
                    field="size",
                    expected=f"{f.size} bytes",
                    found=f"{fp.size} bytes",
                    note=f"changed on disk after roost verified it at {entry.verified_at:%Y-%m-%d %H:%M:%S}Z",
                )
            )
        else:
            plan.to_fetch.append(f)
    return plan


# ----------------------------------------------------------------------------------- the stage


class _ProgressMeter:
    """Turns a byte counter into throttled DownloadProgress reports (always on the caller's thread)."""

    def __init__(
        self,
        callback: ProgressCallback | None,
        phase: Literal["download", "verify"],
        total: int,
        files_total: int,
        interval: float,
    ) -> None:
        self.callback = callback
        self.phase = phase
        self.total = total
        self.files_total = files_total
        self.files_done = 0
        self.counter = ByteCounter()
        self.interval = interval
        self.t0 = time.monotonic()
        self._base = 0
        self._last = 0.0

    def restart_clock(self) -> None:
        """Measure the rate from now on (bytes counted so far do not enter it)."""
        self.t0 = time.monotonic()
        self._base = self.counter.value

    def snapshot(self) -> DownloadProgress:
        done = self.counter.value
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        rate = (done - self._base) / elapsed
        eta = (
            (self.total - done) / rate
            if rate > 0 and done < self.total
            else (0.0 if done >= self.total else None)
        )
        return DownloadProgress(
            phase=self.phase,
            bytes_done=done,
            bytes_total=self.total,
            rate_bps=rate,
            eta_s=eta,
            files_done=self.files_done,
            files_total=self.files_total,
        )

    def tick(self, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        if force or now - self._last >= self.interval:
            self._last = now
            self.callback(self.snapshot())


class _ManifestWriter:
    """Keeps the manifest current as files verify; writes it atomically, at most every few seconds."""

    def __init__(self, local_dir: Path, manifest: Manifest, every_s: float = 2.0) -> None:
        self.local_dir = local_dir
        self.manifest = manifest
        self.every_s = every_s
        self._last = 0.0
        self._dirty = False

    def record(self, f: HubFile, digest: FileDigest, fp: Fingerprint) -> None:
        self.manifest.verified[f.path] = VerifiedEntry(
            expected=f.expected_digest,
            sha256=digest.sha256,
            git_oid=digest.git_sha1,
            fingerprint=fp,
            verified_at=dt.datetime.now(dt.UTC),
        )
        self._dirty = True
        if time.monotonic() - self._last >= self.every_s:
            self.flush()

    def forget(self, path: str) -> None:
        if self.manifest.verified.pop(path, None) is not None:
            self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            write_manifest(self.local_dir, self.manifest)
            self._dirty = False
        self._last = time.monotonic()


def _verify_one(
    local_dir: Path, f: HubFile, on_bytes: Callable[[int], None]
) -> tuple[FileDigest, Fingerprint]:
    path = local_dir / f.path
    fp = Fingerprint.of(path)  # before reading: a change while hashing shows up next run
    digest = hash_file(path, git_blob=not f.lfs, on_bytes=on_bytes)
    return digest, fp


def _record(
    f: HubFile, digest: FileDigest, source: Literal["cache", "disk", "download"], resumed: int = 0
) -> FileRecord:
    return FileRecord(
        path=f.path,
        size=f.size,
        sha256=digest.sha256,
        verified=True,
        lfs=f.lfs,
        git_oid=None if f.lfs else digest.git_sha1,
        source=source,
        resumed_from=resumed,
    )


def _cached_result(
    spec: DownloadSpec,
    manifest: Manifest,
    selected: Sequence[HubFile],
    local_dir: Path,
    endpoint: str,
    t0: float,
) -> DownloadResult:
    files = [
        FileRecord(
            path=f.path,
            size=f.size,
            sha256=manifest.verified[f.path].sha256,
            verified=True,
            lfs=f.lfs,
            git_oid=manifest.verified[f.path].git_oid,
            source="cache",
        )
        for f in selected
    ]
    total = sum(f.size for f in selected)
    log.info(
        "%s@%s already verified in %s (%d files, %s unchanged since); skipping download and hashing",
        spec.repo_id,
        manifest.commit[:12],
        local_dir,
        len(files),
        format_bytes(total),
    )
    return DownloadResult(
        repo_id=spec.repo_id,
        revision=spec.revision,
        commit=manifest.commit,
        local_dir=str(local_dir),
        files=files,
        bytes=total,
        cached=True,
        seconds=time.monotonic() - t0,
        endpoint=endpoint,
    )


def warm_selection(
    manifest: Manifest | None, spec: DownloadSpec, commit: str, local_dir: Path
) -> list[HubFile] | None:
    """The selected files when ``local_dir`` holds them verified at ``commit`` and unchanged; else None."""
    if (
        manifest is None
        or manifest.repo_id != spec.repo_id
        or manifest.commit != commit
        or not manifest.listing
    ):
        return None
    selected = select_files(manifest.listing, spec)
    if selected and manifest.unchanged(local_dir, selected):
        return selected
    return None


def select_files(listing: Sequence[HubFile], spec: DownloadSpec) -> list[HubFile]:
    """The files of ``listing`` that the spec's allow/ignore patterns select (huggingface_hub's rules)."""
    from huggingface_hub.utils._paths import filter_repo_objects

    for f in listing:
        parts = f.path.split("/")
        if f.path.startswith("/") or ".." in parts or "" in parts:
            raise UserError(
                f"{spec.repo_id} lists a file at {f.path!r}, which would land outside the download directory; "
                "refusing to download this repository"
            )
    listing = [f for f in listing if not f.path.startswith(_OWN_DIRS)]
    return sorted(
        filter_repo_objects(
            listing,
            allow_patterns=spec.allow_patterns or None,
            ignore_patterns=spec.ignore_patterns or None,
            key=lambda f: f.path,
        ),
        key=lambda f: f.path,
    )


def download_and_verify(
    spec: DownloadSpec,
    local_dir: Path,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    progress: ProgressCallback | None = None,
    progress_interval: float = 0.5,
    free_space: Callable[[Path], int] = free_bytes,
    margin_bytes: int | None = None,
    download_workers: int = 4,
    hash_workers: int | None = None,
    retry: RetryPolicy | None = None,
    transfer: Literal["auto", "http"] = "auto",
) -> DownloadResult:
    """Fetch ``spec`` into ``local_dir``, verify every file against the Hub's listing, and record it.

    ``endpoint`` defaults to ``HF_ENDPOINT`` (read at call time) else huggingface.co; ``token`` to
    ``HF_TOKEN``. ``progress`` is called on this thread at most every ``progress_interval`` seconds.
    ``free_space(path)`` returns free bytes (inject it to test the preflight); ``margin_bytes`` defaults
    to max(512 MiB, 2% of what is left to fetch). ``transfer="http"`` never uses hf_xet.
    Raises UserError (exit 2: unknown repo/revision, access, no space), IntegrityError (exit 1: a file
    does not match; named with expected and found digests), HubUnreachable (transient faults outlasted
    the retries).
    """
    t0 = time.monotonic()
    local_dir = Path(local_dir).expanduser().resolve()
    endpoint = resolve_endpoint(endpoint)
    with _local_disk_errors(local_dir):
        manifest = load_manifest(local_dir)

    if is_full_sha(spec.revision) and (warm := warm_selection(manifest, spec, spec.revision, local_dir)):
        assert manifest is not None
        return _cached_result(spec, manifest, warm, local_dir, endpoint, t0)

    client = HubClient(endpoint, resolve_token(token), policy=retry)
    try:
        commit = client.resolve(spec.repo_id, spec.revision)
        if warm := warm_selection(manifest, spec, commit, local_dir):
            assert manifest is not None
            return _cached_result(spec, manifest, warm, local_dir, endpoint, t0)
        with _local_disk_errors(local_dir):
            return _run(
                spec,
                commit,
                local_dir,
                client,
                manifest,
                progress=progress,
                progress_interval=progress_interval,
                free_space=free_space,
                margin_bytes=margin_bytes,
                download_workers=download_workers,
                hash_workers=hash_workers or default_hash_workers(),
                transfer=transfer,
                t0=t0,
            )
    finally:
        client.close()


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}


@contextlib.contextmanager
def _local_disk_errors(local_dir: Path) -> Iterator[None]:
    """Turn the local disk refusing (full, read-only, permission denied) into a UserError naming the
    path and what to do; other OS errors (network ones included) pass through."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_ERRNOS:
            raise
        where = exc.filename or local_dir
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"{where}: no space left while downloading ({format_bytes(free_bytes(local_dir))} free "
                f"in {local_dir}): free some space or choose another --local-dir; what is complete is kept"
            ) from None
        raise UserError(
            f"{where}: {exc.strerror or 'not writable'}: make {local_dir} writable for this user "
            "or choose another --local-dir"
        ) from None


def _run(
    spec: DownloadSpec,
    commit: str,
    local_dir: Path,
    client: HubClient,
    manifest: Manifest | None,
    *,
    progress: ProgressCallback | None,
    progress_interval: float,
    free_space: Callable[[Path], int],
    margin_bytes: int | None,
    download_workers: int,
    hash_workers: int,
    transfer: Literal["auto", "http"],
    t0: float,
) -> DownloadResult:
    if (
        manifest is not None
        and manifest.repo_id == spec.repo_id
        and manifest.commit == commit
        and manifest.listing
    ):
        everything = list(manifest.listing)  # a commit's listing never changes
    else:
        everything = client.list_files(spec.repo_id, commit)
    listing = select_files(everything, spec)
    if not listing:
        raise UserError(
            f"no file of {spec.repo_id}@{commit[:12]} matches the allow patterns {spec.allow_patterns} "
            f"(ignoring {spec.ignore_patterns}); it has {len(everything)} files: widen the model profile's patterns"
        )
    verified = dict(manifest.verified) if manifest is not None and manifest.repo_id == spec.repo_id else {}
    writer = _ManifestWriter(
        local_dir,
        Manifest(repo_id=spec.repo_id, commit=commit, listing=everything, verified=verified),
    )
    plan = _plan(local_dir, listing, verified)
    if plan.mismatches:
        raise IntegrityError(plan.mismatches, "delete the named files and run again to fetch them anew")
    total = sum(f.size for f in listing)
    log.info(
        "%s@%s (%s): %d files, %s; %d verified before, %d to hash in place, %d to fetch",
        spec.repo_id,
        commit[:12],
        spec.revision,
        len(listing),
        format_bytes(total),
        len(plan.cached),
        len(plan.to_hash),
        len(plan.to_fetch),
    )
    records: dict[str, FileRecord] = {
        f.path: FileRecord(
            path=f.path,
            size=f.size,
            sha256=verified[f.path].sha256,
            verified=True,
            lfs=f.lfs,
            git_oid=verified[f.path].git_oid,
            source="cache",
        )
        for f in plan.cached
    }
    hashed_bytes = 0
    downloaded = 0
    stop = threading.Event()
    hashers = ThreadPoolExecutor(max_workers=hash_workers, thread_name_prefix="roost-verify")
    fetchers = ThreadPoolExecutor(max_workers=max(1, download_workers), thread_name_prefix="roost-fetch")
    try:
        # 1. files on disk roost has not verified (or that changed since): hash them where they are.
        if plan.to_hash:
            meter = _ProgressMeter(
                progress, "verify", sum(f.size for f in plan.to_hash), len(plan.to_hash), progress_interval
            )
            futures = {hashers.submit(_verify_one, local_dir, f, meter.counter.add): f for f in plan.to_hash}
            bad: list[Mismatch] = []
            for fut, f in _as_they_finish(futures, meter):
                digest, fp = fut.result()
                hashed_bytes += digest.size
                entry = verified.get(f.path)
                mismatch = check_digest(f, digest)
                if mismatch is None:
                    writer.record(f, digest, fp)
                    records[f.path] = _record(f, digest, "disk")
                elif entry is not None and entry.expected == f.expected_digest:
                    mismatch.note = (
                        f"changed on disk after roost verified it at {entry.verified_at:%Y-%m-%d %H:%M:%S}Z"
                    )
                    bad.append(mismatch)
                else:
                    log.info(
                        "%s on disk is not the file at %s (%s); fetching it",
                        f.path,
                        commit[:12],
                        mismatch.sentence(),
                    )
                    writer.forget(f.path)
                    plan.to_fetch.append(f)
            writer.flush()
            if bad:
                raise IntegrityError(bad, "delete the named files and run again to fetch them anew")

        # 2. disk preflight for what is left to fetch.
        on_disk = {f.path: _partial_size(local_dir, f) for f in plan.to_fetch}
        need = sum(f.size - on_disk[f.path] for f in plan.to_fetch)
        if need > 0:
            margin = margin_bytes if margin_bytes is not None else max(512 * 1024**2, need // 50)
            free = free_space(local_dir)
            if free < need + margin:
                raise UserError(
                    f"not enough disk space in {local_dir}: {spec.repo_id}@{commit[:12]} needs {format_bytes(need)} "
                    f"more (+ {format_bytes(margin)} margin) but only {format_bytes(free)} is free; free some space "
                    "or pass --local-dir on a larger disk"
                )

        # 3. fetch (resuming partial transfers) and verify each file as soon as it lands.
        if plan.to_fetch:
            fetched, downloaded = _fetch_all(
                spec,
                commit,
                local_dir,
                client,
                plan.to_fetch,
                on_disk,
                fetchers,
                hashers,
                stop,
                writer,
                progress,
                progress_interval,
                transfer,
            )
            for rec in fetched:
                records[rec.path] = rec
                hashed_bytes += rec.size
        writer.flush()
    except BaseException:
        stop.set()
        raise
    finally:
        fetchers.shutdown(wait=True, cancel_futures=True)
        hashers.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(OSError):
            writer.flush()

    with contextlib.suppress(OSError):
        (state_dir(local_dir) / "partial").rmdir()  # only when empty
    seconds = time.monotonic() - t0
    log.info(
        "%s@%s verified in %s: %d files, %s (fetched %s, hashed %s) in %s",
        spec.repo_id,
        commit[:12],
        local_dir,
        len(records),
        format_bytes(total),
        format_bytes(downloaded),
        format_bytes(hashed_bytes),
        format_seconds(seconds),
    )
    return DownloadResult(
        repo_id=spec.repo_id,
        revision=spec.revision,
        commit=commit,
        local_dir=str(local_dir),
        files=[records[f.path] for f in listing],
        bytes=total,
        cached=False,
        downloaded_bytes=downloaded,
        hashed_bytes=hashed_bytes,
        seconds=seconds,
        endpoint=client.endpoint,
    )


def _partial_size(local_dir: Path, f: HubFile) -> int:
    try:
        return min(_partial_path(local_dir, f).stat().st_size, f.size)
    except FileNotFoundError:
        return 0


def _as_they_finish(
    futures: dict[Future[T], HubFile], meter: _ProgressMeter
) -> Iterator[tuple[Future[T], HubFile]]:
    pending = set(futures)
    meter.tick(force=True)
    while pending:
        done, pending = wait(pending, timeout=meter.interval, return_when=FIRST_COMPLETED)
        for fut in done:
            meter.files_done += 1
            yield fut, futures[fut]
        meter.tick()
    meter.tick(force=True)


def _fetch_all(
    spec: DownloadSpec,
    commit: str,
    local_dir: Path,
    client: HubClient,
    files: Sequence[HubFile],
    on_disk: dict[str, int],
    fetchers: ThreadPoolExecutor,
    hashers: ThreadPoolExecutor,
    stop: threading.Event,
    writer: _ManifestWriter,
    progress: ProgressCallback | None,
    progress_interval: float,
    transfer: Literal["auto", "http"],
) -> tuple[list[FileRecord], int]:
    """Fetch ``files`` in parallel, verify each as it lands; return the records and the bytes written."""
    use_xet = transfer == "auto" and _xet_available()
    total = sum(f.size - on_disk[f.path] for f in files)
    meter = _ProgressMeter(progress, "download", total, len(files), progress_interval)
    hash_meter = _ProgressMeter(progress, "verify", sum(f.size for f in files), len(files), progress_interval)

    def fetch(f: HubFile) -> int:
        dest = local_dir / f.path
        ctx = client.context(spec.repo_id, commit, f.path)
        if use_xet and f.xet_hash:
            with_retries(
                lambda: client.fetch_xet(spec.repo_id, commit, f.path, local_dir, meter.counter.add),
                what=f"fetching {f.path} (xet)",
                ctx=ctx,
                policy=client.policy,
                stop=stop,
            )
            return 0
        part = _partial_path(local_dir, f)
        part.parent.mkdir(parents=True, exist_ok=True)
        url = client.file_url(spec.repo_id, commit, f.path)
        resumed = with_retries(
            lambda: client.fetch_http(url, part, f.size, meter.counter.add, stop, f.path),
            what=f"fetching {f.path}",
            ctx=ctx,
            policy=client.policy,
            progress_marker=lambda: part.stat().st_size if part.exists() else 0,
            stop=stop,
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, dest)
        return resumed

    # biggest first: the long transfers start at once, the small ones fill the gaps
    order = sorted(files, key=lambda f: f.size, reverse=True)
    downloads: dict[Future[int], HubFile] = {fetchers.submit(fetch, f): f for f in order}
    verifies: dict[Future[tuple[FileDigest, Fingerprint]], HubFile] = {}
    resumed_from: dict[str, int] = {}
    out: list[FileRecord] = []
    bad: list[Mismatch] = []
    pending: set[Future[Any]] = set(downloads)
    fetching = len(downloads)
    meter.tick(force=True)
    while pending:
        done, pending = wait(pending, timeout=progress_interval, return_when=FIRST_COMPLETED)
        for fut in done:
            if fut in downloads:
                f = downloads[fut]
                fetching -= 1
                try:
                    resumed_from[f.path] = fut.result()
                except _Stopped:
                    continue
                meter.files_done += 1
                vf = hashers.submit(_verify_one, local_dir, f, hash_meter.counter.add)
                verifies[vf] = f
                pending.add(vf)
                if fetching == 0:
                    meter.tick(force=True)  # the download phase ends here; verification may go on
                    hash_meter.restart_clock()
            else:
                f = verifies[fut]
                digest, fp = fut.result()
                hash_meter.files_done += 1
                mismatch = check_digest(f, digest, note="as fetched")
                if mismatch is not None:
                    writer.forget(f.path)
                    bad.append(mismatch)
                    stop.set()
                    continue
                writer.record(f, digest, fp)
                out.append(_record(f, digest, "download", resumed_from.get(f.path, 0)))
        if fetching:
            meter.tick()
        else:
            hash_meter.tick()
    if bad:
        raise IntegrityError(
            bad, "the fetched bytes do not match the Hub's listing; run again to fetch the named files anew"
        )
    hash_meter.tick(force=True)
    return out, meter.counter.value


def _xet_available() -> bool:
    try:
        from huggingface_hub.utils import is_xet_available

        return bool(is_xet_available())
    except ImportError:  # pragma: no cover
        return False
