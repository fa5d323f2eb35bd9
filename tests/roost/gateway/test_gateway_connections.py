"""The gateway's connection limits (``roost/gateway/connections.py``) against ``roost gateway serve``
in front of the synthetic server, attacked over raw sockets by a peer without a key: oversized heads
(431, the gateway's memory bounded), a silent connection and a slowloris (closed at the head
deadline, 408), idle kept-alive connections, a body trickled after its answer, connections over the
per-client and overall caps (503) while keyed clients are served, the counts back at zero after
every kind of close, one log line per kind of refusal, and a prompt shutdown with connections held.
Attackers connect from other loopback addresses (127.0.0.2, ...) than the keyed clients (127.0.0.1).

The arithmetic of the open-files budget and the log rate limit are tested as functions."""

from __future__ import annotations

import logging
import re
import resource
import select
import signal
import socket
import statistics
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from bench_synthetic import Synthetic
from support.gateway import GatewayProcess, add_key

from roost.gateway.connections import (
    FD_RESERVE,
    NOFILE_CEILING,
    ConnectionBook,
    ConnectionLimits,
    Warnings,
    fd_budget,
)

HEADER_TIMEOUT = 1.0
KEEP_ALIVE = 2.0
CAP = 20
MARGIN = 5.0
"""How late a close may come after its deadline and still count as that deadline's. The lower bound of
each deadline test (never before it) tells which timer fired; the upper bound tells that one fired at
all, where the defect kept connections open past 60 s. 5 s covers a deadline's timer, one event-loop
pass and this process's polling on a machine whose threads stall for a second under load."""
MARKER = "ZQXJ-attacker-bytes"  # sent by attackers; never in the gateway's log


# --- the gateways ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateways(backend: Synthetic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, GatewayProcess]]:
    """Two gateways, started side by side: ``tight`` (1 s for a head, 2 s of keep-alive, 20 connections
    per address) and ``capped`` (heads may take 30 s; 20 connections per address, 45 in all)."""
    flags = {"tight": ["--header-timeout", str(HEADER_TIMEOUT), "--keep-alive-timeout", str(KEEP_ALIVE),
                       "--max-connections-per-client", str(CAP), "--max-header-kb", "64"],
             "capped": ["--header-timeout", "30", "--max-connections-per-client", str(CAP), "--max-connections", "45"]}
    gws = {}
    for name, extra in flags.items():
        work = tmp_path_factory.mktemp(name)
        gws[name] = GatewayProcess(f"sqlite:///{work / 'usage.db'}", [backend.base_url],
                                   log_path=work / "gateway.log", extra=[*extra, "--quiet"])
    try:
        with ThreadPoolExecutor(len(gws)) as pool:
            list(pool.map(GatewayProcess.start, gws.values()))
        yield gws
    finally:
        for gw in gws.values():
            gw.stop()


@pytest.fixture(scope="module")
def tight(gateways: dict[str, GatewayProcess]) -> GatewayProcess:
    return gateways["tight"]


@pytest.fixture(scope="module")
def capped(gateways: dict[str, GatewayProcess]) -> GatewayProcess:
    return gateways["capped"]


# --- raw sockets -----------------------------------------------------------------------------------


def connect(gw: GatewayProcess, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", gw.port))
    return s


def head(path: str = "/health", *, method: str = "GET", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: gateway\r\n{extra}\r\n".encode()


def read_response(s: socket.socket, timeout_s: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response (content-length framed, as the gateway's refusals and /health are)."""
    s.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} bytes of a response")
        data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_after(s: socket.socket, timeout_s: float) -> tuple[bytes, float]:
    """What arrives until the gateway closes ``s`` (a reset counts as a close), and when (monotonic)."""
    s.settimeout(timeout_s)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return data, time.monotonic()
        if not chunk:
            return data, time.monotonic()
        data += chunk


def still_open(s: socket.socket) -> bool:
    """``s`` has not been closed by the gateway (nothing to read, no EOF)."""
    return not select.select([s], [], [], 0)[0]


def reset(s: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a client that vanishes."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def served(s: socket.socket) -> bool:
    """A GET /health on ``s`` is answered 200 (False: 503, refused at accept)."""
    s.sendall(head())
    status, _, _ = read_response(s)
    assert status in (200, 503), status
    return status == 200


def hold(gw: GatewayProcess, source: str, n: int, timeout_s: float = 10.0) -> list[socket.socket]:
    """``n`` connections from ``source``, each of them served (so each was counted); retried until the
    connections closed before have left the gateway's count (their close is seen asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        socks: list[socket.socket] = []
        try:
            for _ in range(n):
                socks.append(connect(gw, source))
                if not served(socks[-1]):
                    raise ConnectionRefusedError
            return socks
        except ConnectionRefusedError:
            for s in socks:
                s.close()
            if time.monotonic() > deadline:
                raise AssertionError(f"{source} could not hold {n} connections within {timeout_s:g} s") from None
            time.sleep(0.05)


def refused_503(gw: GatewayProcess, source: str) -> dict[str, str]:
    """A new connection from ``source`` is answered 503 too_many_connections before sending anything."""
    s = connect(gw, source)
    try:
        status, headers, body = read_response(s)
        assert status == 503, (status, body)
        assert httpx.Response(503, content=body).json()["error"]["code"] == "too_many_connections"
        assert headers["retry-after"] == "1" and headers["connection"] == "close"
        assert closed_after(s, 5)[0] == b""
        return headers
    finally:
        s.close()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def refused_count(gw: GatewayProcess, reason: str) -> float:
    m = re.search(rf'^roost_gateway_refused_total\{{reason="{reason}"\}} (\S+)$', gw.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


# --- request heads -----------------------------------------------------------------------------------


def test_a_head_over_the_limit_is_431_and_one_at_the_limit_is_served(tight: GatewayProcess) -> None:
    limit = 64 * 1024
    base = head(extra="X-Pad: \r\n")
    at_limit = head(extra=f"X-Pad: {'a' * (limit - len(base))}\r\n")
    assert len(at_limit) == limit
    s = connect(tight)
    s.sendall(at_limit)
    assert read_response(s)[0] == 200  # exactly the limit: served, and kept alive
    assert served(s)
    s.close()
    for size in (limit + 1, 70 * 1024):
        s = connect(tight)
        s.sendall(head(extra=f"X-{MARKER}: {'a' * (size - len(base))}\r\n"))
        status, headers, body = read_response(s)
        assert status == 431 and headers["connection"] == "close" and headers["content-type"] == "application/json"
        assert httpx.Response(431, content=body).json() == {"error": {
            "message": "request line and headers over the gateway's limit of 65536 bytes",
            "type": "invalid_request_error", "param": None, "code": "headers_too_large"}}
        assert closed_after(s, 5)[0] == b""
        s.close()


def test_a_megabyte_header_sent_in_chunks_is_refused_with_memory_bounded(tight: GatewayProcess) -> None:
    assert tight.proc is not None
    before = rss_kib(tight.proc.pid)
    peak = before
    answers = []
    for _ in range(5):
        s = connect(tight, "127.0.0.4")
        s.sendall(b"GET /health HTTP/1.1\r\nX-" + MARKER.encode() + b": ")
        try:
            for _ in range(16):  # 1 MiB in 64 KiB chunks
                s.sendall(b"a" * 65536)
                peak = max(peak, rss_kib(tight.proc.pid))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway closed after its answer: the rest was never taken
        try:
            answers.append(read_response(s)[0])
        except ConnectionResetError:
            answers.append(0)  # the gateway's close of a socket holding unread bytes: an RST, possibly first
        s.close()
    after = rss_kib(tight.proc.pid)
    print(f"gateway RSS: {before} KiB before, peak sampled {peak} KiB, {after} KiB after five 1 MiB headers")
    assert 431 in answers and set(answers) <= {431, 0}, answers
    assert (peak - before) < 20 * 1024 and (after - before) < 20 * 1024


# --- deadlines ---------------------------------------------------------------------------------------


def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(tight: GatewayProcess) -> None:
    t0 = time.monotonic()
    s = connect(tight, "127.0.0.5")
    data, t_closed = closed_after(s, 30)
    s.close()
    print(f"a silent connection stayed open {t_closed - t0:.2f} s (--header-timeout {HEADER_TIMEOUT:g})")
    assert data == b""  # nothing was asked: nothing answered
    assert HEADER_TIMEOUT - 0.05 <= t_closed - t0 <= HEADER_TIMEOUT + MARGIN


def test_a_slowloris_is_answered_408_at_the_head_deadline(tight: GatewayProcess) -> None:
    t0 = time.monotonic()
    s = connect(tight, "127.0.0.5")
    request = head(extra=f"X-{MARKER}: " + "b" * 1000 + "\r\n")
    answer = b""
    for i in range(len(request)):  # one byte per 0.2 s until the gateway answers
        try:
            s.send(request[i:i + 1])
        except (BrokenPipeError, ConnectionResetError):
            break
        if select.select([s], [], [], 0.2)[0]:
            break
    answer, t_closed = closed_after(s, 10)
    s.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert b"connection: close" in answer and b'"code":"request_timeout"' in answer
    assert HEADER_TIMEOUT - 0.05 <= t_closed - t0 <= HEADER_TIMEOUT + MARGIN


def test_an_idle_kept_alive_connection_is_closed_after_keep_alive(tight: GatewayProcess) -> None:
    s = connect(tight)
    assert served(s)
    t_answered = time.monotonic()
    data, t_closed = closed_after(s, 30)
    s.close()
    assert data == b""
    assert KEEP_ALIVE - 0.05 <= t_closed - t_answered <= KEEP_ALIVE + MARGIN


def test_a_kept_alive_connections_head_deadline_runs_from_its_first_byte(tight: GatewayProcess) -> None:
    """Idle for longer than the head deadline (within keep-alive), then half a request: 408 one head
    deadline after that first byte, not at once."""
    s = connect(tight)
    assert served(s)
    time.sleep(HEADER_TIMEOUT + 0.3)  # the idle time under test (under --keep-alive-timeout)
    assert still_open(s)
    t_first = time.monotonic()
    s.sendall(b"GET /health HTT")
    answer, t_closed = closed_after(s, 10)
    s.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert HEADER_TIMEOUT - 0.05 <= t_closed - t_first <= HEADER_TIMEOUT + MARGIN


def test_a_body_trickled_after_its_answer_is_cut_at_the_head_deadline(tight: GatewayProcess) -> None:
    """A POST without a key is answered 401 at once (kept alive, its body unread); its body trickled one
    byte per 0.2 s would hold the connection forever: it is closed one head deadline in."""
    s = connect(tight, "127.0.0.6")
    s.sendall(head("/v1/chat/completions", method="POST", extra="Content-Length: 1000000\r\n"))
    assert read_response(s)[0] == 401
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < HEADER_TIMEOUT + MARGIN + 1:
        try:
            s.send(b"x")
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        if select.select([s], [], [], 0.2)[0]:
            closed = closed_after(s, 1)[0] == b""
            break
    t_closed = time.monotonic()
    s.close()
    assert closed and t_closed - t0 <= HEADER_TIMEOUT + MARGIN


# --- caps --------------------------------------------------------------------------------------------


def test_a_peer_holding_its_cap_gets_503_while_keyed_clients_are_served(capped: GatewayProcess) -> None:
    key = add_key(capped.db_url, "ana")
    attacker = [connect(capped, "127.0.0.2") for _ in range(CAP)]  # idle, never a byte
    try:
        refused_503(capped, "127.0.0.2")  # accepted in order: the 20 before it were counted
        latencies = []
        body = {"model": "synthetic", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 1}
        with httpx.Client(base_url=capped.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            for _ in range(20):
                t0 = time.perf_counter()
                resp = client.post("/v1/chat/completions", json=body)
                latencies.append(time.perf_counter() - t0)
                assert resp.status_code == 200, resp.text
                assert resp.json()["usage"]["completion_tokens"] == 1
        print(f"20 keyed chat completions while a peer holds {CAP} connections: "
              f"p50 {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
        assert max(latencies) < 5.0
        assert all(still_open(s) for s in attacker)  # the cap was held throughout
        refused_503(capped, "127.0.0.2")
    finally:
        for s in attacker:
            s.close()
    again = hold(capped, "127.0.0.2", CAP)  # its count back to zero: the whole cap again, each served
    try:
        refused_503(capped, "127.0.0.2")
    finally:
        for s in again:
            s.close()


def test_connections_over_the_overall_cap_get_503(capped: GatewayProcess) -> None:
    held = hold(capped, "127.0.0.7", CAP) + hold(capped, "127.0.0.8", CAP) + hold(capped, "127.0.0.9", 5)
    try:
        refused_503(capped, "127.0.0.10")  # an address holding nothing: the gateway is full
        assert "(--max-connections 45)" in capped.log()
    finally:
        for s in held:
            s.close()
    for s in hold(capped, "127.0.0.10", 1):
        s.close()


def test_shutdown_is_prompt_with_connections_held(capped: GatewayProcess) -> None:
    """SIGTERM while peers hold kept-alive connections, silent ones and half a head: they are closed
    and the gateway exits at once (its drain waits for no idle connection). The last test on ``capped``
    (it stops it; xdist runs a worker's tests in file order)."""
    assert capped.proc is not None
    kept = hold(capped, "127.0.0.12", CAP)  # answered, idle
    silent = [connect(capped, "127.0.0.13") for _ in range(5)]
    half = connect(capped, "127.0.0.14")
    half.sendall(b"GET /health HTTP/1.1\r\nHo")
    t0 = time.monotonic()
    capped.proc.send_signal(signal.SIGTERM)
    code = capped.proc.wait(timeout=15)
    took = time.monotonic() - t0
    # uvicorn re-raises the signal once it has shut down: killed by SIGTERM, after a clean stop
    assert code in (0, -signal.SIGTERM) and took < 5, (code, took, capped.log()[-2000:])
    assert "Traceback" not in capped.log()
    for s in [*kept, *silent, half]:
        assert closed_after(s, 5)[0] == b""
        s.close()


def test_counts_return_to_zero_after_every_kind_of_close(tight: GatewayProcess) -> None:
    """From one address: 431s, 408s, silent connections closed, resets mid-head and mid-body, 503s over
    its cap, clean closes; then it holds exactly its cap again."""
    src = "127.0.0.3"
    for _ in range(5):
        s = connect(tight, src)
        s.sendall(head(extra="X-Pad: " + "a" * 70 * 1024 + "\r\n"))
        assert read_response(s)[0] == 431
        s.close()
    for _ in range(5):
        s = connect(tight, src)
        s.sendall(b"GET /he")
        reset(s)
        s = connect(tight, src)
        s.sendall(head("/v1/chat/completions", method="POST", extra="Content-Length: 100\r\n") + b"{")
        reset(s)
        s = connect(tight, src)
        assert served(s)
        s.close()
    slow = [connect(tight, src) for _ in range(5)]
    silent = [connect(tight, src) for _ in range(5)]
    for s in slow:
        s.sendall(b"GET /health HTTP/1.1\r\nHost")
    over = [connect(tight, src) for _ in range(CAP)]  # with the 10 above open: over its cap
    answers = [closed_after(s, 10)[0][:12] for s in over]  # 503, or admitted and closed silent
    assert b"HTTP/1.1 503" in answers and set(answers) <= {b"HTTP/1.1 503", b""}, answers
    for s in slow:
        assert closed_after(s, 10)[0].startswith(b"HTTP/1.1 408 ")
    for s in slow + silent + over:
        closed_after(s, 10)
        s.close()
    socks = hold(tight, src, CAP)
    try:
        refused_503(tight, src)
    finally:
        for s in socks:
            s.close()


def test_refusals_are_logged_once_per_kind_and_counted_each_time(tight: GatewayProcess) -> None:
    before = {r: refused_count(tight, r) for r in ("headers_too_large", "request_timeout", "too_many_connections")}
    src = "127.0.0.11"
    for _ in range(10):
        s = connect(tight, src)
        s.sendall(head(extra=f"X-{MARKER}: " + "a" * 70 * 1024 + "\r\n"))
        assert read_response(s)[0] == 431
        s.close()
    slow = [connect(tight, src) for _ in range(5)]
    for s in slow:
        s.sendall(f"GET /{MARKER} HTTP/1.1\r\n".encode())
    held = [connect(tight, src) for _ in range(CAP - 5)]
    for _ in range(5):
        refused_503(tight, src)
    for s in slow:
        assert closed_after(s, 10)[0].startswith(b"HTTP/1.1 408 ")
        s.close()
    for s in held:
        s.close()
    after = {r: refused_count(tight, r) for r in before}
    assert after["headers_too_large"] - before["headers_too_large"] == 10
    assert after["request_timeout"] - before["request_timeout"] == 5
    assert after["too_many_connections"] - before["too_many_connections"] == 5
    log = tight.log()
    assert MARKER not in log
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    for kind in ("431 to a request", "408 to a request", "503 to new connections from",
                 "closed a connection that sent nothing"):
        assert sum(kind in line for line in warnings) <= 1, warnings  # the module runs within one interval
    assert sum("431 to a request" in line for line in warnings) == 1


# --- functions ---------------------------------------------------------------------------------------


def test_fd_budget_raises_the_soft_limit_and_fits_the_connections() -> None:
    inf = resource.RLIM_INFINITY
    assert fd_budget(4096, 1024, 524288) == (NOFILE_CEILING, 4096)  # systemd's default: raised, fits
    assert fd_budget(4096, 1024, 1024) == (1024, (1024 - FD_RESERVE) // 2)  # cannot be raised: 480 fit
    assert fd_budget(4096, 1024, 4096) == (4096, (4096 - FD_RESERVE) // 2)
    assert fd_budget(4096, 1024, inf) == (NOFILE_CEILING, 4096)
    assert fd_budget(40000, 1024, inf) == (NOFILE_CEILING, (NOFILE_CEILING - FD_RESERVE) // 2)
    assert fd_budget(4096, 200000, 400000) == (200000, 4096)  # never lowered
    assert fd_budget(4096, inf, inf) == (inf, 4096)
    assert fd_budget(10, 20, 20) == (20, 1)  # at least one


def test_warnings_are_one_line_per_kind_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    logger = logging.getLogger("test.connections")
    warnings = Warnings(logger, interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.connections"):
        assert warnings.warn("a", "first a")
        assert not warnings.warn("a", "second a")
        assert warnings.warn("b", "first b")
        now[0] = 59.9
        assert not warnings.warn("a", "third a")
        now[0] = 60.0
        assert warnings.warn("a", "fourth a")
    assert [r.getMessage() for r in caplog.records] == [
        "first a", "first b", "fourth a (2 more since the last such line)"]


def test_the_book_counts_per_address_and_overall() -> None:
    refusals: list[str] = []
    book = ConnectionBook(ConnectionLimits(max_connections=3, max_connections_per_client=2),
                          on_refused=refusals.append, warnings=Warnings(logging.getLogger("test.book")))
    assert book.admit("a") and book.admit("a") and not book.admit("a")
    assert book.admit("b") and not book.admit("c")  # 3 in all
    book.release("a")
    assert book.admit("c") and book.per_client == {"a": 1, "b": 1, "c": 1} and book.total == 3
    for addr in ("a", "b", "c"):
        book.release(addr)
    assert book.per_client == {} and book.total == 0
    assert refusals == ["too_many_connections"] * 2
