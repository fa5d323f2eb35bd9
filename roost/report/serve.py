"""``roost results serve``: a read-only HTTP server over the reports directory, for the Prefect UI.

It serves the report files only (``.html``, ``.md``, ``.png``, ``.json``) under the root (by default
``<results>/reports``), with GET and HEAD; no directory listing, no ``..``, no hidden files, and no
file reached through a symlink that leads out of the root. Everything else is a 404 (a 405 for
another method). The URL it prints is the one to set as ``ROOST_RESULTS_URL`` on the worker.
"""

from __future__ import annotations

import errno
import logging
import shutil
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from roost.errors import UserError
from roost.inputs.text import shown

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".png": "image/png",
    ".json": "application/json",
}
"""The only files served, by suffix, and their content types."""

DEFAULT_PORT = 8765
WILDCARDS = ("", "0.0.0.0", "::")

log = logging.getLogger("roost.report.serve")


def resolve_request(root: Path, request_path: str) -> Path | None:
    """The file a request path names under ``root`` (already resolved), or None when it must not be served."""
    path = unquote(urlsplit(request_path).path)
    segments = path.split("/")[1:] if path.startswith("/") else []
    if not segments or any(s in ("", ".", "..") or s.startswith(".") or "\\" in s or "\x00" in s for s in segments):
        return None
    candidate = root.joinpath(*segments)
    if candidate.suffix.lower() not in CONTENT_TYPES:
        return None
    try:
        real = candidate.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        return None
    if not real.is_relative_to(root) or not real.is_file() or real.suffix.lower() not in CONTENT_TYPES:
        return None
    return real


class ReportHandler(BaseHTTPRequestHandler):
    """GET/HEAD of report files under ``root``; anything else is refused."""

    root: ClassVar[Path]
    server_version = "roost-results"
    sys_version = ""

    def _send_file(self, head_only: bool) -> None:
        target = resolve_request(self.root, self.path)
        if target is None:
            self._error(HTTPStatus.NOT_FOUND, "not found")
            return
        try:
            f = target.open("rb")
        except OSError:
            self._error(HTTPStatus.NOT_FOUND, "not found")
            return
        with f:
            size = target.stat().st_size
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", CONTENT_TYPES[target.suffix.lower()])
            self.send_header("Content-Length", str(size))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if not head_only:
                shutil.copyfileobj(f, self.wfile)

    def _error(self, status: HTTPStatus, text: str, allow: bool = False) -> None:
        body = f"{status.value} {text}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if allow:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._send_file(head_only=False)

    def do_HEAD(self) -> None:
        self._send_file(head_only=True)

    def _refuse(self) -> None:
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only: GET and HEAD only", allow=True)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(root: Path, bind: str = "127.0.0.1", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """A server (not yet serving) for the report files under ``root``; a UserError for a root that is
    not a directory, an address that cannot be bound or a port in use."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise UserError(f"--root {root}: not a directory; point it at the reports directory of a roost "
                        "results store (<results>/reports), or run a flow first")
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: must be between 0 and 65535")
    handler = type("BoundReportHandler", (ReportHandler,), {"root": root.resolve()})
    cls = _Server6 if ":" in bind else _Server
    try:
        return cls((bind, port), handler)
    except (UnicodeError, OverflowError, ValueError) as exc:  # a name no resolver takes (a label over 63 characters...)
        raise UserError(f"--bind {shown(bind, 80)}: not an address ({exc})") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"--port {port}: already in use on {bind}; choose another port") from None
        if isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise UserError(f"--bind {shown(bind, 80)}: not an address of this machine ({exc.strerror or exc})") from None
        raise UserError(f"--bind {shown(bind, 80)} --port {port}: cannot listen ({exc.strerror or exc})") from None


def server_url(server: ThreadingHTTPServer, bind: str) -> str:
    """The base URL to set as ROOST_RESULTS_URL: the bound address, or this machine's name for a wildcard."""
    port = server.server_address[1]
    host = socket.gethostname() if bind in WILDCARDS else bind
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"
