"""Hub repositories for tests and benchmarks: checkpoint-shaped files, a local Hub serving them, a
recording proxy in front of it, and a stand-in for the Hub's access gate (olah has no authentication).

    src = write_checkpoint_files(tmp / "src", shard_sizes=[4_000_000, 1_000_000])
    with local_hub(tmp / "mirrors", {"acme/tiny": src}) as (mirror, commits):
        result = download_and_verify(DownloadSpec(repo_id="acme/tiny"), tmp / "dl", endpoint=mirror.endpoint)

    with GatedHub(mirror.endpoint, "acme/tiny", token="hf_test_...") as gated:
        download_and_verify(DownloadSpec(repo_id="acme/tiny"), tmp / "dl", endpoint=gated.endpoint)
        # -> UserError: "acme/tiny is a gated repository and no token was given (HTTP 401): ..."

The shards hold random bytes (they are not valid safetensors): the download stage moves and verifies
bytes, it does not parse them. ``original/consolidated.pth`` is there so pattern selection has
something to leave out (``roost.hub.patterns`` ignores ``original/*`` and ``*.pth``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import unquote, urlsplit

import httpx

from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo

__all__ = ["GatedHub", "HubProxy", "RangeHub", "local_hub", "shard_name", "write_checkpoint_files"]


def shard_name(i: int, n: int) -> str:
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def write_checkpoint_files(
    dest: Path,
    *,
    shard_sizes: Sequence[int] = (3_000_000, 1_000_000),
    seed: int = 0,
    config: dict[str, object] | None = None,
) -> Path:
    """Write a checkpoint-shaped directory of random shards plus config/tokenizer files; return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    n = len(shard_sizes)
    weight_map: dict[str, str] = {}
    for i, size in enumerate(shard_sizes, start=1):
        name = shard_name(i, n)
        _write_random(dest / name, size, rng)
        weight_map[f"layers.{i}.weight"] = name
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(shard_sizes)}, "weight_map": weight_map}, indent=1) + "\n"
    )
    cfg = config if config is not None else {"architectures": ["RoostTestModel"], "seed": seed}
    (dest / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (dest / "generation_config.json").write_text(json.dumps({"max_new_tokens": 16}) + "\n")
    (dest / "tokenizer.json").write_text(json.dumps({"version": "1.0", "seed": seed}) + "\n")
    (dest / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}) + "\n")
    (dest / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}\n")
    (dest / "README.md").write_text("# roost test checkpoint\n")
    (dest / "original").mkdir(exist_ok=True)
    _write_random(dest / "original" / "consolidated.pth", 4096, rng)
    return dest


def _write_random(path: Path, size: int, rng: random.Random) -> None:
    block = 1 << 20
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(block, left)
            f.write(rng.randbytes(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def local_hub(
    mirrors_root: Path,
    repos: Mapping[str, Path] | None = None,
    *,
    private: Sequence[str] = (),
) -> Iterator[tuple[HubMirror, dict[str, str]]]:
    """Publish ``repos`` (repo id -> source directory) under ``mirrors_root`` and serve them.

    Yields ``(mirror, commits)`` where ``commits`` maps each repo id to the commit just published.
    """
    commits = {repo_id: publish_repo(src, mirrors_root, repo_id) for repo_id, src in (repos or {}).items()}
    with HubMirror(mirrors_root, private=private) as mirror:
        yield mirror, commits


# ------------------------------------------------------------------------------------- gated repos

_NOT_FORWARDED = frozenset(
    {
        # hop-by-hop headers (RFC 9110 7.6.1) and what the proxy sets itself
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        # the gate's business, not the mirror's
        "authorization",
    }
)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client closing its connection early (a header read) is not an error worth printing."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class HubProxy:
    """A reverse proxy on loopback in front of a local Hub mirror that records every request.

    Each request is forwarded to the mirror (method, body, headers minus ``Authorization``) and its
    answer streamed back unchanged (status, headers, body; redirects to the mirror rewritten to point
    here). ``requests`` lists them as ``"GET /path?query 200"``, appended before the answer is sent,
    so a test that counts them after a call returns needs no wait (olah's own access log is
    written asynchronously). Use as a context manager, or ``start()`` / ``stop()``; ``endpoint`` is
    the URL to give ``download_and_verify`` or ``HF_ENDPOINT``.
    """

    def __init__(self, mirror_endpoint: str, *, host: str = "127.0.0.1") -> None:
        self.mirror_endpoint = mirror_endpoint.rstrip("/")
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(base_url=self.mirror_endpoint, follow_redirects=False, timeout=60.0)
        self._server = _QuietServer((host, 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        if self._thread is None:
            # a short poll: stop() waits for the loop's next poll (0.5 s by default, per proxy a test starts)
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                            name="hub-proxy", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()
        self._client.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def refusal(self, path: str, authorization: str | None) -> tuple[int, str] | None:
        """The status and message to answer instead of forwarding, or None to forward (always, here)."""
        return None

    def serve(self, handler: BaseHTTPRequestHandler) -> bool:
        """Answer ``handler``'s request here instead of forwarding it; False to forward (always, here)."""
        return False

    def record(self, method: str, target: str, status: int) -> None:
        with self._lock:
            self.requests.append(f"{method} {target} {status}")


class GatedHub(HubProxy):
    """A stand-in for huggingface.co's gate on one repository, in front of a local Hub mirror.

    olah serves repositories without any authentication, so it cannot serve a gated repository by
    itself. For ``repo_id`` (its ``/api/models/`` routes and its ``/resolve/`` downloads alike) a
    request without ``Authorization: Bearer <token>`` gets ``401`` and one with another token
    ``403``, both with ``X-Error-Code: GatedRepo``, an ``X-Error-Message`` and a JSON ``error``
    body, as huggingface.co answers for a gated repository the caller has not been granted (a wrong
    token stands for a valid token of an account without access). A request with the right token,
    and every request for another repository, goes to the mirror (see :class:`HubProxy`).
    """

    def __init__(self, mirror_endpoint: str, repo_id: str, token: str, *, host: str = "127.0.0.1") -> None:
        super().__init__(mirror_endpoint, host=host)
        self.repo_id = repo_id
        self.token = token

    def is_gated(self, path: str) -> bool:
        """``path`` (without query) names the gated repository: an API route or a file URL."""
        path = unquote(path)
        repo = self.repo_id
        return any(
            path == prefix or path.startswith(prefix + "/")
            for prefix in (f"/api/models/{repo}", f"/api/resolve-cache/models/{repo}", f"/{repo}")
        )

    def refusal(self, path: str, authorization: str | None) -> tuple[int, str] | None:
        if not self.is_gated(path) or authorization == f"Bearer {self.token}":
            return None
        if not authorization:
            return 401, (
                f"Access to model {self.repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in."
            )
        return 403, (
            f"Access to model {self.repo_id} is restricted and you are not in the authorized list. "
            f"Visit {self.endpoint}/{self.repo_id} to ask for access."
        )


def _handler_for(hub: HubProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._answer()

        def do_HEAD(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the requests are in hub.requests

        def _answer(self) -> None:
            refused = hub.refusal(urlsplit(self.path).path, self.headers.get("authorization"))
            if refused is not None:
                status, message = refused
                body = json.dumps({"error": message}).encode()
                hub.record(self.command, self.path, status)
                self.send_response(status)
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            if hub.serve(self):
                return
            self._forward()

        def _forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
            answered = False
            try:
                with hub._client.stream(self.command, self.path, headers=headers, content=body) as r:
                    answered = True
                    hub.record(self.command, self.path, r.status_code)
                    self.send_response(r.status_code)
                    for name, value in r.headers.multi_items():
                        if name.lower() in _NOT_FORWARDED - {"content-length"}:
                            continue
                        if name.lower() == "location" and value.startswith(hub.mirror_endpoint):
                            value = hub.endpoint + value[len(hub.mirror_endpoint) :]
                        self.send_header(name, value)
                    chunked = "content-length" not in r.headers and self.command != "HEAD"
                    if chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    if self.command == "HEAD":
                        return
                    for chunk in r.iter_raw():
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
            except httpx.HTTPError as exc:
                if not answered:  # the mirror is down: say so, as a gateway does
                    hub.record(self.command, self.path, 502)
                    self.send_error(502, f"mirror unreachable: {type(exc).__name__}")
                # the mirror went away mid-answer: cut the connection as it did (the client sees a
                # short body, as from the real Hub when a transfer breaks)
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


# ------------------------------------------------------------------------- a Hub that honours Range


class RangeHub(HubProxy):
    """A Hub that honours ``Range``, as huggingface.co's CDN does: olah (behind it) answers the API, and
    this proxy serves ``/<repo>/resolve/<commit>/<path>`` itself from the mirror's git objects and LFS
    store — ``206`` with ``Content-Range`` for a ``bytes=a-b`` request, ``200`` with ``Content-Length``
    otherwise. It also stands in for a fast file server: olah's local-mirror route reads a file for a
    while (seconds per GB) before its first byte, which a benchmark of header reads must not time.

    ``served`` counts the body bytes written per file path (a client that closes early is counted up
    to what the socket accepted); ``gets`` lists each file request as ``(path, Range header or None,
    status)``. ``delay_s`` sleeps that long after each ``chunk`` bytes of a body (a slow link, so a
    test can stop a client midway through a file); ``slice_bytes`` answers a ranged request with at
    most that many bytes (a shorter ``206`` slice, which HTTP allows a server to send and a CDN may).
    """

    def __init__(self, mirror_endpoint: str, mirrors_root: Path, *, host: str = "127.0.0.1",
                 delay_s: float = 0.0, chunk: int = 1 << 20, slice_bytes: int | None = None) -> None:
        super().__init__(mirror_endpoint, host=host)
        self.mirrors_root = mirrors_root
        self.served: dict[str, int] = {}
        self.gets: list[tuple[str, str | None, int]] = []
        self.sent: list[int] = []  # body bytes written for each of ``gets``, by index
        self.delay_s = delay_s
        self.chunk = chunk
        self.slice_bytes = slice_bytes

    def _blob(self, repo_id: str, commit: str, path: str) -> Path | bytes | None:
        """The LFS object file of ``path`` at ``commit``, its bytes for a small file, or None when absent."""
        import subprocess

        from roost.hub.publish import lfs_object_path, mirror_repo_path

        repo = mirror_repo_path(self.mirrors_root, repo_id)
        r = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", f"{commit}:{path}"], capture_output=True)
        if r.returncode != 0:
            return None
        head = r.stdout[:200]
        if head.startswith(b"version https://git-lfs.github.com/spec/v1"):
            oid = head.split(b"oid sha256:", 1)[1].split(b"\n", 1)[0].decode()
            return lfs_object_path(repo, oid)
        return r.stdout

    def serve(self, handler: BaseHTTPRequestHandler) -> bool:
        parts = unquote(urlsplit(handler.path).path).lstrip("/").split("/")
        if handler.command != "GET" or len(parts) < 5 or parts[2] != "resolve":
            return False
        repo_id, commit, path = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
        blob = self._blob(repo_id, commit, path)
        if blob is None:
            return False  # olah says what is missing, as the Hub would
        if isinstance(blob, bytes) and "gzip" in (handler.headers.get("accept-encoding") or ""):
            # small (non-LFS) files compressed, as huggingface.co's front end serves text files
            import gzip

            body = gzip.compress(blob)
            self.record("GET", handler.path, 200)
            with self._lock:
                self.gets.append((path, handler.headers.get("range"), 200))
                self.sent.append(len(body))
            handler.send_response(200)
            handler.send_header("Content-Encoding", "gzip")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            self._count(path, len(body))
            return True
        size = blob.stat().st_size if isinstance(blob, Path) else len(blob)
        start, end = 0, size - 1
        asked = handler.headers.get("range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", asked or "")
        if m:
            start, end = int(m.group(1)), min(size - 1, int(m.group(2)) if m.group(2) else size - 1)
            if self.slice_bytes is not None:
                end = min(end, start + self.slice_bytes - 1)
            if start >= size:
                handler.send_response(416)
                handler.send_header("Content-Range", f"bytes */{size}")
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                self.record("GET", handler.path, 416)
                with self._lock:
                    self.gets.append((path, asked, 416))
                    self.sent.append(0)
                return True
        self.record("GET", handler.path, 206 if m else 200)
        with self._lock:
            self.gets.append((path, asked, 206 if m else 200))
            self.sent.append(0)
            index = len(self.sent) - 1
        handler.send_response(206 if m else 200)
        if m:
            handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        handler.send_header("Content-Length", str(end - start + 1))
        handler.send_header("Accept-Ranges", "bytes")
        handler.end_headers()
        try:
            if isinstance(blob, bytes):
                handler.wfile.write(blob[start : end + 1])
                self._count(path, end - start + 1, index)
                return True
            with open(blob, "rb") as f:
                f.seek(start)
                left = end - start + 1
                while left > 0:
                    chunk = f.read(min(left, self.chunk))
                    if not chunk:
                        break
                    handler.wfile.write(chunk)
                    handler.wfile.flush()
                    self._count(path, len(chunk), index)
                    left -= len(chunk)
                    if self.delay_s:
                        time.sleep(self.delay_s)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        return True

    def _count(self, path: str, n: int, index: int | None = None) -> None:
        with self._lock:
            self.served[path] = self.served.get(path, 0) + n
            if index is not None:
                self.sent[index] += n
