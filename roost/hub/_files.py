"""A file's bytes from the Hub: a small file whole, the first bytes of one, or all of it to a partial file.

- :meth:`FileTransfers.read_small`: a metadata file, refused beyond a size;
- :meth:`FileTransfers.read_prefix`: a file's first bytes, never more than needed (ranged requests
  where the server honours ``Range``, the start of the whole answer where it does not);
- :meth:`FileTransfers.fetch_http`: append to a partial file from where it ends (HTTP ``Range``)
  until it holds the listed size, checking every size the server states against the listing;
- :meth:`FileTransfers.fetch_range`: one slice of a file (a part of ``roost.hub._parts``), a 200
  (a server that ignores ``Range``) handed back to the caller;
- :meth:`FileTransfers.fetch_xet`: a Xet-stored file through ``hf_xet`` (when it is installed).

Each is one attempt; the caller wraps it in :meth:`~roost.hub._session.HubSession.retry`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from roost._compat import xet_available as _xet_available
from roost.errors import CheckFailed, UserError
from roost.hub._endpoint import READ_TIMEOUT_S
from roost.hub._session import _URL_PREFIX, HubSession
from roost.hub.errors import Stopped, TransferIncomplete
from roost.hub.progress import byte_counting_tqdm
from roost.inputs.text import shown

log = logging.getLogger(__name__)

SINK_BYTES = 1024 * 1024
"""Bytes of a ranged answer's reads handed on together (about 1 MiB: written with one ``pwritev``, one
lock taken for them; the network's 64 KiB reads one at a time cost more in Python than in the kernel)."""
STREAM_CHUNK = 1024 * 1024
"""Bytes per read of a streamed transfer, at most (1 MiB): each network read is written as it arrives,
so a transfer that stalls keeps what it received."""


class FileTransfers(HubSession):
    """The file transfers of a :class:`~roost.hub._session.HubSession` (the API calls build on them)."""

    def read_small(self, repo_id: str, commit: str, path: str, *, limit: int) -> bytes:
        """The whole of a small file at ``commit`` (a config, an index), refused beyond ``limit`` bytes."""
        with self._http.stream("GET", self.file_url(repo_id, commit, path)) as r:
            return self._read_bounded(r, limit, lambda: UserError(
                f"hf://{repo_id}@{commit}/{path}: larger than {limit:,} bytes; not a metadata file roost can audit"))

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
            f"GET /{_URL_PREFIX[self.repo_type]}{repo_id}/resolve/{commit[:12]}/{path}",
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
        on_chunk: Callable[[bytes], None] | None = None,
    ) -> int:
        """One attempt: append to ``part`` from where it ends (HTTP Range) until it holds ``size`` bytes.
        ``on_chunk`` is given each run of bytes as it is appended (the digest computed as they arrive).

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
            whole_slice = self._fetch_answer(url, part, size, have, on_bytes, stop, label or part.name, on_chunk)
            got = part.stat().st_size
            if got >= size:
                return started
            if not whole_slice or got <= have:
                raise TransferIncomplete(f"connection closed at {got} of {size} bytes")
            have = got

    def _fetch_answer(self, url: str, part: Path, size: int, have: int, on_bytes: Callable[[int], None],
                      stop: threading.Event, name: str, on_chunk: Callable[[bytes], None] | None = None) -> bool:
        """One request of :meth:`fetch_http`, appending its body to ``part`` (which holds ``have`` bytes).
        True when it was a 206 slice received whole (its Content-Range's last byte arrived)."""
        headers = {"range": f"bytes={have}-"} if have else {}
        with self._http.stream("GET", url, headers=headers) as r:
            return self.take_answer(r, part, size, have, on_bytes, stop, name, on_chunk)

    def _check_sizes(self, r: httpx.Response, size: int, name: str) -> None:
        """Every size the answer states for the file must be the listing's (a CheckFailed otherwise)."""
        for header, claimed in size_claims(r):
            if claimed != size:
                raise CheckFailed(
                    f"{self.endpoint} serves {name} with {header} {claimed:,} bytes but its listing says "
                    f"{size:,}: the server or the repository is inconsistent (nothing of this answer was "
                    "kept); try again later or report it to the repository's owner"
                )

    def take_answer(self, r: httpx.Response, part: Path, size: int, have: int, on_bytes: Callable[[int], None],
                    stop: threading.Event, name: str, on_chunk: Callable[[bytes], None] | None = None) -> bool:
        """Append the body of the open answer ``r`` to ``part`` (which holds ``have`` bytes): a 206 from
        ``have``, or a 200 whose first ``have`` bytes are skipped. True when it was a 206 slice received
        whole."""
        if r.status_code == 416:  # the partial file does not fit this object: start over
            part.unlink(missing_ok=True)
            raise TransferIncomplete(f"server refused range {have}- (416)")
        if r.status_code >= 400:
            raise self._refuse(r)
        self._check_sizes(r, size, name)
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
                if on_chunk is not None:
                    on_chunk(chunk)
        return r.status_code == 206 and pos == last + 1

    def fetch_range(self, url: str, start: int, end: int, size: int, sink: Callable[[list[bytes]], None],
                    stop: threading.Event, name: str, *,
                    on_ranged: Callable[[], None] | None = None,
                    whole: Callable[[httpx.Response], None] | None = None) -> int:
        """One request for bytes ``[start, end)`` of a file of ``size`` bytes; the reads of the body go to
        ``sink`` in order, in batches of about :data:`SINK_BYTES`. Returns the bytes received (a server may send a shorter slice: ask again).

        The answer must be a 206 whose Content-Range starts at ``start`` and ends before ``end``
        (``on_ranged`` is told once it is), stating no other size than the listing's. A server that
        ignores Range answers 200 with the whole file: ``whole(r)`` takes that answer when given (and
        -1 is returned), else it is ``TransferIncomplete``."""
        with self._http.stream("GET", url, headers={"range": f"bytes={start}-{end - 1}"}) as r:
            if r.status_code >= 400:
                raise self._refuse(r)
            self._check_sizes(r, size, name)
            if r.status_code != 206:
                if whole is None:
                    raise TransferIncomplete(f"server answered range {start}-{end - 1} of {name} with HTTP "
                                             f"{r.status_code}")
                whole(r)
                return -1
            span = content_range(r.headers.get("content-range", ""))
            if span is None or span[0] != start or span[1] >= end:
                raise TransferIncomplete(f"server answered range {start}-{end - 1} of {name} with Content-Range "
                                         f"{shown(r.headers.get('content-range', 'none'), 60)}")
            if on_ranged is not None:
                on_ranged()
            got, limit = 0, span[1] + 1 - start
            batch: list[bytes] = []
            batched = 0
            try:
                for data in r.iter_bytes():
                    if stop.is_set():
                        raise Stopped()
                    if got + batched + len(data) > limit:
                        raise TransferIncomplete(f"server sent more than the range {start}-{span[1]} of {name}")
                    batch.append(data)
                    batched += len(data)
                    if batched >= SINK_BYTES:
                        sink(batch)
                        got, batch, batched = got + batched, [], 0
            finally:  # what arrived is kept, even when the answer broke off (a retry asks for the rest)
                if batch:
                    sink(batch)
                    got += batched
            return got

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
            repo_type=self.repo_type,
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

