"""Preflight from the Hub: read what the audit needs of a checkpoint over HTTP, before downloading it.

``preflight(HubRef("acme/m", "main"))``:

1. resolves the revision to its commit (a full sha needs no network);
2. answers from the cache when this commit was read before (``$ROOST_HOME/preflight/``): no network
   at all for a full sha, one refs call for a branch or tag;
3. else lists the repository's top level at that commit, keeps what the profile's allow/ignore
   patterns select (the files a download would fetch), fetches the small metadata files
   (``config.json``, the index, ``hf_quant_config.json``) and, for every ``*.safetensors`` file, its
   8-byte header length and then its header — concurrently, with HTTP range requests where the
   server honours them and by reading the start of the response and closing it where it does not
   (the local mirror ignores ``Range``);
4. stores what it read under the commit (written to a temporary directory and renamed into place).

The result's :class:`~roost.checkpoint.files.FetchedFiles` is what the audit reads
(:func:`roost.plan.report.audit_for_host` takes it as it takes a directory), so findings, figures
and the plan are those of the local audit of the same files. ``bytes_fetched`` counts every body
byte read from the network (API answers, metadata files, headers, whatever a server that ignores
``Range`` sent before the connection closed).

The endpoint, the token, the retries and the sentences for refusals are the download stage's
(:class:`~roost.hub._http.HubClient`): ``HF_ENDPOINT``, ``HF_TOKEN`` or the profile's Secret block,
gated, private and missing repositories all read the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from roost.checkpoint.files import METADATA_NAMES, FetchedFiles, RemoteShard
from roost.checkpoint.model import header_digest
from roost.checkpoint.safetensors_header import HeaderError, header_length
from roost.errors import UserError
from roost.hub._endpoint import resolve_endpoint, resolve_token
from roost.hub._http import HubClient, is_full_sha
from roost.hub._retries import RetryPolicy
from roost.hub.integrity import HubFile
from roost.hub.patterns import DEFAULT_ALLOW_PATTERNS, DEFAULT_IGNORE_PATTERNS
from roost.hub.snapshot import DownloadSpec, select_files
from roost.hub.spec import is_ref_name
from roost.inputs.text import redact_url
from roost.settings import hub_offline, repo_dir_name, roost_home

SCHEME = "hf://"
FIRST_READ = 1 << 16
"""Bytes asked for first: the length prefix and most headers (a larger header takes one more range)."""
METADATA_LIMIT = 64 * 1024 * 1024
"""Largest metadata file read whole (the index of a 31k-tensor checkpoint is ~3 MB)."""
WORKERS = 8
"""Shard headers fetched at once."""
PREFLIGHT_RETRY = RetryPolicy(attempts=4, base_s=0.5, cap_s=4.0)
"""The preflight is the fast answer: a few quick retries (the download keeps its patient policy)."""

_REF = re.compile(r"hf://([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(?:@([^@\s]+))?")


class HubRef(BaseModel):
    """A repository and revision on the Hub: ``hf://OWNER/NAME[@REVISION]``."""

    repo_id: str
    revision: str = "main"

    def __str__(self) -> str:
        return f"{SCHEME}{self.repo_id}@{self.revision}"


def is_hub_url(text: str) -> bool:
    """Whether ``text`` names a Hub repository (``hf://...``) rather than a local path."""
    return text.startswith(SCHEME)


def parse_hub_url(text: str) -> HubRef:
    """``hf://OWNER/NAME[@REVISION]`` -> :class:`HubRef`; a bad shape is one UserError saying the form."""
    m = _REF.fullmatch(text.strip())
    if (m is None or m.group(1).endswith((".", "-")) or ".." in m.group(1)
            or not is_ref_name(m.group(2) or "main")):
        raise UserError(
            f"{text!r} is not a Hub repository URL: write hf://OWNER/NAME or hf://OWNER/NAME@REVISION "
            "(a branch, tag or commit), e.g. hf://Qwen/Qwen3-0.6B@main"
        )
    return HubRef(repo_id=m.group(1), revision=m.group(2) or "main")


class PreflightStats(BaseModel):
    """What one preflight cost."""

    bytes_fetched: int = Field(description="Every body byte read from the network by this call (0 from the cache).")
    cached: bool = Field(description="Answered from the preflight cache of this commit.")
    seconds: float
    shards: int
    weight_bytes: int = Field(description="Size of the shards as listed: what a download would fetch for them.")


@dataclass(frozen=True)
class Preflight:
    """What a preflight read of one commit: the files the audit reads, and what reading them cost."""

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    files: FetchedFiles
    stats: PreflightStats

    @property
    def bytes_fetched(self) -> int:
        return self.stats.bytes_fetched

    def header_digests(self) -> dict[str, str]:
        """Shard -> sha256 of its header: what the downloaded files' headers must equal."""
        return {name: header_digest(s.header) for name, s in self.files.shards.items()}


def preflight(
    ref: HubRef,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    allow_patterns: list[str] | None = None,
    ignore_patterns: list[str] | None = None,
    cache_root: Path | None = None,
    retry: RetryPolicy | None = None,
) -> Preflight:
    """Read ``ref``'s config, index and shard headers over HTTP (or from the cache of its commit)."""
    t0 = time.perf_counter()
    endpoint = resolve_endpoint(endpoint)
    spec = DownloadSpec(
        repo_id=ref.repo_id,
        revision=ref.revision,
        allow_patterns=list(DEFAULT_ALLOW_PATTERNS if allow_patterns is None else allow_patterns),
        ignore_patterns=list(DEFAULT_IGNORE_PATTERNS if ignore_patterns is None else ignore_patterns),
    )
    cache = PreflightCache(cache_root or roost_home() / "preflight", spec.repo_id)
    if is_full_sha(spec.revision) and (hit := cache.load(spec.revision)) is not None:
        return _answer(spec, spec.revision, redact_url(endpoint), hit, 0, True, t0)
    client = HubClient(endpoint, resolve_token(token), policy=retry or PREFLIGHT_RETRY, stage="preflight")
    endpoint = client.endpoint  # as messages and the answer show it (a password in it is ***)
    try:
        if hub_offline() and not is_full_sha(spec.revision):
            commit = cache.offline_ref(spec.revision)
        else:
            commit = client.resolve(spec.repo_id, spec.revision)
            cache.remember_ref(spec.revision, commit)
        hit = cache.load(commit)
        if hit is not None:
            return _answer(spec, commit, endpoint, hit, client.bytes_read, True, t0)
        read = _read(client, spec.repo_id, commit)
        cache.store(commit, read)
        return _answer(spec, commit, endpoint, read, client.bytes_read, False, t0)
    finally:
        client.close()


@dataclass(frozen=True)
class _Read:
    """What was read of one commit: the top-level listing, the metadata files, the shard headers."""

    listing: dict[str, int]
    small: dict[str, bytes]
    shards: dict[str, RemoteShard]


def _answer(spec: DownloadSpec, commit: str, endpoint: str, read: _Read, fetched: int, cached: bool,
            t0: float) -> Preflight:
    """The selection's view of what was read (the files a download with these patterns would fetch)."""
    listing = [HubFile(path=p, size=n, blob_id="") for p, n in read.listing.items()]
    selected = {f.path: f.size for f in select_files(listing, spec)}
    shards = {n: s for n, s in read.shards.items() if n in selected}
    files = FetchedFiles(
        location=f"{SCHEME}{spec.repo_id}@{commit}",
        name=repo_dir_name(spec.repo_id),  # the served name land gives the downloaded directory
        files=selected,
        small={n: b for n, b in read.small.items() if n in selected},
        shards=shards,
    )
    stats = PreflightStats(bytes_fetched=fetched, cached=cached, seconds=time.perf_counter() - t0,
                           shards=len(shards), weight_bytes=sum(s.size for s in shards.values()))
    return Preflight(spec.repo_id, spec.revision, commit, endpoint, files, stats)


def _read(client: HubClient, repo_id: str, commit: str) -> _Read:
    """List the top level at ``commit``, fetch its metadata files and every shard's header, concurrently."""
    top = client.list_files(repo_id, commit, recursive=False)
    listing = {f.path: f.size for f in top}
    small_names = [n for n in METADATA_NAMES if n in listing]
    shard_names = sorted(n for n in listing if n.endswith(".safetensors"))

    def small(name: str) -> bytes:
        return client.retry(lambda: client.read_small(repo_id, commit, name, limit=METADATA_LIMIT),
                            what=f"reading {name} of {repo_id}@{commit[:12]}",
                            ctx=client.context(repo_id, commit, name))

    def header(name: str) -> RemoteShard:
        return client.retry(lambda: _read_header(client, repo_id, commit, name, listing[name]),
                            what=f"reading the header of {name} in {repo_id}@{commit[:12]}",
                            ctx=client.context(repo_id, commit, name))

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="roost-preflight") as pool:
        small_futures = {n: pool.submit(small, n) for n in small_names}
        header_futures = {n: pool.submit(header, n) for n in shard_names}
        try:
            return _Read(listing, {n: f.result() for n, f in small_futures.items()},
                         {n: f.result() for n, f in header_futures.items()})
        except BaseException:
            for fut in small_futures.values():
                fut.cancel()
            for hfut in header_futures.values():
                hfut.cancel()
            raise


def _read_header(client: HubClient, repo_id: str, commit: str, name: str, listed: int) -> RemoteShard:
    """The raw JSON header of one shard: its 8-byte length, then that many bytes; never its data."""
    where = f"{SCHEME}{repo_id}@{commit}/{name}"

    def want(prefix: bytes, stated: int) -> int:
        """The length prefix checked against the file's size: the listing's, or the server's when smaller
        (its Content-Length or Content-Range; a mismatch is refused below, once the header is read)."""
        size = listed if stated < 0 else min(listed, stated)
        return 8 + header_length(where, prefix, size, "report it to the repository's owner")

    prefix, claims = client.read_prefix(repo_id, commit, name, want, FIRST_READ)
    for header, stated in claims:
        if stated != listed:
            raise HeaderError(
                f"{where}: the server says the file holds {stated:,} bytes ({header}) but the listing says {listed:,}; "
                "the repository or the server is inconsistent — try again later or report it"
            )
    return RemoteShard(size=listed, header=prefix[8:])


# ------------------------------------------------------------------------------------------ the cache


class PreflightCache:
    """What preflights read, per endpoint, repository and commit (a commit's files never change).

    A commit names its content, so the endpoint it was read from is not part of the key (a mirror and
    huggingface.co serve the same bytes at the same commit).

    ``<root>/<org>--<name>/<commit>/``: ``listing.json``, the metadata files under
    ``small/``, each shard's header under ``headers/<shard>.json`` (with its size in the listing);
    ``refs.json`` remembers the commit each branch or tag last resolved to (used with ``HF_HUB_OFFLINE``).
    A commit's directory is written whole in a temporary directory and renamed into place.
    """

    def __init__(self, root: Path, repo_id: str) -> None:
        self.dir = root / repo_id.replace("/", "--")

    def load(self, commit: str) -> _Read | None:
        d = self.dir / commit
        try:
            listing = json.loads((d / "listing.json").read_bytes())
            small = {n: (d / "small" / n).read_bytes() for n in listing["small"]}
            shards = {n: RemoteShard(size=listing["files"][n], header=(d / "headers" / f"{n}.json").read_bytes())
                      for n in listing["shards"]}
            return _Read(dict(listing["files"]), small, shards)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or written by another version: read the Hub again

    def store(self, commit: str, read: _Read) -> None:
        with contextlib.suppress(OSError):
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=self.dir))
            try:
                (tmp / "small").mkdir()
                (tmp / "headers").mkdir()
                for n, b in read.small.items():
                    (tmp / "small" / n).write_bytes(b)
                for n, s in read.shards.items():
                    (tmp / "headers" / f"{n}.json").write_bytes(s.header)
                doc = {"files": read.listing, "small": sorted(read.small), "shards": sorted(read.shards)}
                (tmp / "listing.json").write_text(json.dumps(doc))
                os.rename(tmp, self.dir / commit)
            except OSError:  # another preflight stored it first, or the disk refused: not worth failing for
                shutil.rmtree(tmp, ignore_errors=True)

    def remember_ref(self, revision: str, commit: str) -> None:
        if is_full_sha(revision):
            return
        with contextlib.suppress(OSError, ValueError):
            path = self.dir / "refs.json"
            refs = json.loads(path.read_bytes()) if path.is_file() else {}
            if refs.get(revision) == commit:
                return
            refs[revision] = commit
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(refs))
            os.replace(tmp, path)

    def offline_ref(self, revision: str) -> str:
        """The commit ``revision`` last resolved to (HF_HUB_OFFLINE), or the UserError saying there is none."""
        try:
            commit = json.loads((self.dir / "refs.json").read_bytes())[revision]
            if isinstance(commit, str) and is_full_sha(commit):
                return commit
        except (OSError, ValueError, KeyError, TypeError):
            pass
        raise UserError(
            f"HF_HUB_OFFLINE is set and {self.dir.name.replace('--', '/')}@{revision} was never preflighted "
            "on this machine: unset HF_HUB_OFFLINE, or pass a commit sha read before"
        )
