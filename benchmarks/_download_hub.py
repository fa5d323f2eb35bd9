"""A Hub-compatible file server on loopback, written for ``bench_download.py`` (test-only code).

    python benchmarks/_download_hub.py DATA_DIR [--cap BYTES_PER_S]   # prints its port, serves until killed

``DATA_DIR`` holds one repository per subdirectory, each with the ``listing.json`` that
``bench_download.make_repo`` writes (path, size, sha256, git blob id, LFS or not) beside its files.
It answers what roost and huggingface_hub's ``hf download`` ask of the Hub:

- ``GET /api/models/<org>/<name>/refs`` (roost resolves a branch), ``.../revision/<rev>``
  (huggingface_hub's ``repo_info``), ``.../tree/<rev>`` (both list the files; one page);
- ``HEAD``/``GET /<org>/<name>/resolve/<rev>/<path>`` with ``X-Repo-Commit``, ``ETag``,
  ``X-Linked-Etag``/``X-Linked-Size`` (LFS files) and ``Accept-Ranges``; a ``Range: bytes=a-b``
  is answered ``206`` with ``Content-Range``;
- ``GET /_bench/stats`` (JSON: body bytes sent, the wall-clock time the last body byte was written,
  requests, ranged requests, connections at most at once) and ``/_bench/reset``.

Bodies go out with ``os.sendfile``; ``--cap`` paces each connection to that many bytes/s (as a CDN
caps a single connection) in 256 KiB writes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

PACE_BLOCK = 256 * 1024


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.sent = 0
        self.last_byte = 0.0
        self.requests = 0
        self.ranged = 0
        self.open = 0
        self.most_open = 0

    def as_json(self) -> dict[str, Any]:
        with self.lock:
            return {"sent": self.sent, "last_byte": self.last_byte, "requests": self.requests,
                    "ranged": self.ranged, "most_open": self.most_open}


class Hub(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, data: Path, cap: float) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.cap = cap
        self.stats = Stats()
        self.repos: dict[str, dict[str, Any]] = {}
        for listing in sorted(data.glob("*/*/listing.json")):
            doc = json.loads(listing.read_text())
            doc["dir"] = listing.parent
            doc["by_path"] = {f["path"]: f for f in doc["files"]}
            self.repos[doc["repo_id"]] = doc

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Hub

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        st = self.server.stats
        with st.lock:
            st.open += 1
            st.most_open = max(st.most_open, st.open)

    def finish(self) -> None:
        st = self.server.stats
        with st.lock:
            st.open -= 1
        super().finish()

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _json(self, doc: Any, status: int = 200) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _answer(self, *, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        if path.startswith("/_bench/"):
            doc = self.server.stats.as_json()
            if path == "/_bench/reset":
                with self.server.stats.lock:
                    self.server.stats.reset()
            return self._json(doc)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(refs|revision|tree)(?:/([^/]+))?(/.*)?", path)
        if m:
            return self._api(m.group(1), m.group(2))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        repo = self.server.repos.get(m.group(1)) if m else None
        f = repo["by_path"].get(m.group(3)) if m and repo else None
        if m is None or repo is None or f is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound" if repo else "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return self._file(repo, f, body=body)

    def _api(self, repo_id: str, what: str) -> None:
        repo = self.server.repos.get(repo_id)
        if repo is None:
            return self._json({"error": "Repository not found"}, 404)
        commit = repo["commit"]
        if what == "refs":
            return self._json({"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": commit}],
                               "tags": [], "converts": []})
        if what == "revision":
            return self._json({"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                               "siblings": [{"rfilename": f["path"]} for f in repo["files"]]})
        entries = []
        for f in repo["files"]:
            e: dict[str, Any] = {"type": "file", "path": f["path"], "size": f["size"], "oid": f["blob_id"]}
            if f["lfs"]:
                e["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": f["pointer_size"]}
            entries.append(e)
        return self._json(entries)

    def _file(self, repo: dict[str, Any], f: dict[str, Any], *, body: bool) -> None:
        size = f["size"]
        start, end, status = 0, size - 1, 200
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("range") or "")
        if asked and int(asked.group(1)) < size:
            start = int(asked.group(1))
            end = min(size - 1, int(asked.group(2))) if asked.group(2) else size - 1
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("X-Repo-Commit", repo["commit"])
        etag = f["sha256"] if f["lfs"] else f["blob_id"]
        self.send_header("ETag", f'"{etag}"')
        if f["lfs"]:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1 if size else 0))
        self.end_headers()
        st = self.server.stats
        with st.lock:
            st.requests += 1
            st.ranged += status == 206
        if not body or size == 0:
            return
        self.wfile.flush()
        with open(repo["dir"] / f["path"], "rb") as src:
            self._send(src.fileno(), start, end + 1 - start)

    def _send(self, fd: int, offset: int, count: int) -> None:
        sock: socket.socket = self.connection
        cap = self.server.cap
        t0 = time.monotonic()
        done = 0
        while done < count:
            n = min(count - done, PACE_BLOCK) if cap else count - done
            sent = os.sendfile(sock.fileno(), fd, offset + done, n)
            if sent == 0:
                break
            done += sent
            st = self.server.stats
            with st.lock:
                st.sent += sent
                st.last_byte = max(st.last_byte, time.time())
            if cap:
                ahead = done / cap - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--cap", type=float, default=0.0, help="bytes/s per connection (0: none)")
    args = ap.parse_args()
    hub = Hub(args.data, args.cap)
    print(hub.server_address[1], flush=True)
    hub.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
