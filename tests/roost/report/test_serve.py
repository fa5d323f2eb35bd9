"""``roost results serve``: a real read-only HTTP server on loopback over a reports directory."""

from __future__ import annotations

import http.client
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import ROOST
from support.errors import assert_one_line_error

from roost.errors import UserError
from roost.report.serve import make_server, resolve_request, server_url

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
RUN = "model=org--tiny/host=cpu/20260301T020000Z-0001"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """<tmp>/reports/<run>/{report.html, report.md, run.json, charts/decode.png, notes.txt, .hidden.html},
    a secret beside the root, and symlinks into and out of the root."""
    root = tmp_path / "reports"
    run = root / RUN
    (run / "charts").mkdir(parents=True)
    (run / "report.html").write_text("<!DOCTYPE html><title>roost report</title>")
    (run / "report.md").write_text("# roost report\n")
    (run / "run.json").write_text('{"a": 1}')
    (run / "charts" / "decode.png").write_bytes(PNG)
    (run / "notes.txt").write_text("not a report file")
    (run / ".hidden.html").write_text("hidden")
    (tmp_path / "secret.html").write_text("outside the root")
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "run.json").write_text('{"secret": true}')
    (root / "escape.html").symlink_to(tmp_path / "secret.html")
    (root / "records").symlink_to(tmp_path / "records")
    (root / "latest.html").symlink_to(run / "report.html")
    return root


@pytest.fixture
def server(tree: Path) -> Iterator[tuple[str, int]]:
    srv = make_server(tree, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def request(server: tuple[str, int], method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(*server, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        conn.endheaders()
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        conn.close()


@pytest.mark.parametrize(("name", "ctype", "body"), [
    ("report.html", "text/html; charset=utf-8", b"<!DOCTYPE html><title>roost report</title>"),
    ("report.md", "text/markdown; charset=utf-8", b"# roost report\n"),
    ("run.json", "application/json", b'{"a": 1}'),
    ("charts/decode.png", "image/png", PNG),
])
def test_serves_report_files_with_their_content_type(server: tuple[str, int], name: str, ctype: str,
                                                      body: bytes) -> None:
    status, headers, data = request(server, "GET", f"/{RUN}/{name}")
    assert (status, headers["content-type"], data) == (200, ctype, body)
    assert headers["content-length"] == str(len(body)) and headers["x-content-type-options"] == "nosniff"
    status, headers, data = request(server, "HEAD", f"/{RUN}/{name}")
    assert (status, headers["content-length"], data) == (200, str(len(body)), b"")


def test_percent_encoded_paths_are_decoded(server: tuple[str, int]) -> None:
    assert request(server, "GET", "/model%3Dorg--tiny/host%3Dcpu/20260301T020000Z-0001/report.md?x=1")[0] == 200


@pytest.mark.parametrize("path", [
    "/", f"/{RUN}", f"/{RUN}/", f"/{RUN}/charts/",            # directories: no listing
    f"/{RUN}/notes.txt", f"/{RUN}/.hidden.html",              # not a report file, hidden
    f"/{RUN}/missing.html",
    f"/{RUN}/../../../secret.html", "/../secret.html",         # traversal, raw and encoded
    "/%2e%2e/secret.html", "/..%2fsecret.html", f"/{RUN}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/secret.html",
    "/escape.html", "/records/run.json",                       # symlinks that lead out of the root
    "//etc/passwd.json", "/%00.html", "/a\\..\\secret.html",
])
def test_everything_else_is_not_found(server: tuple[str, int], path: str) -> None:
    status, _, body = request(server, "GET", path)
    assert status == 404, path
    assert b"outside" not in body and b"secret" not in body


def test_a_symlink_within_the_root_is_served(server: tuple[str, int]) -> None:
    assert request(server, "GET", "/latest.html")[0] == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head(server: tuple[str, int], method: str) -> None:
    status, headers, _ = request(server, method, f"/{RUN}/report.html")
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_resolve_request_stays_in_the_root(tree: Path) -> None:
    root = tree.resolve()
    assert resolve_request(root, f"/{RUN}/report.html") == root / RUN / "report.html"
    assert resolve_request(root, "/escape.html") is None
    assert resolve_request(root, "") is None


def test_bad_root_port_in_use_and_urls(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--root .*not a directory"):
        make_server(tmp_path / "missing", "127.0.0.1", 0)
    srv = make_server(tree, "127.0.0.1", 0)
    try:
        port = srv.server_address[1]
        assert server_url(srv, "127.0.0.1") == f"http://127.0.0.1:{port}/"
        with pytest.raises(UserError, match=f"--port {port}: already in use"):
            make_server(tree, "127.0.0.1", port)
    finally:
        srv.server_close()
    with pytest.raises(UserError, match=r"--bind 203\.0\.113\.9: not an address of this machine"):
        make_server(tree, "203.0.113.9", 0)




def test_the_command_prints_the_url_and_serves(tree: Path) -> None:
    proc = subprocess.Popen([ROOST, "results", "serve", "--port", "0", "--root", str(tree)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("ROOST_RESULTS_URL=http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1].rstrip("/"))
        status, headers, _ = request(("127.0.0.1", port), "GET", f"/{RUN}/report.html")
        assert status == 200 and headers["content-type"].startswith("text/html")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("args", "message"), [
    (["--port", "nope"], "Invalid value for '--port'"),
    (["--bogus"], "No such option: --bogus"),
    (["--root", "/nonexistent/reports"], "--root /nonexistent/reports: not a directory"),
])
def test_bad_flags_are_one_line_exit_2(args: list[str], message: str) -> None:
    res = subprocess.run([ROOST, "results", "serve", *args], capture_output=True, text=True, timeout=60)
    assert_one_line_error(res.returncode, res.stderr, message, exact=True)
    assert res.stdout == ""
