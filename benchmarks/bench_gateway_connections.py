"""What a peer without a key can take from roost's metering gateway under its connection limits
(``roost/gateway/connections.py``): memory, time, and other clients' latency.

``roost gateway serve`` with its default limits (64 KiB request heads, 10 s to send one, 30 s of
keep-alive, 4,096 connections, 512 per client address) in front of the synthetic server
(``tests/roost/bench/synthetic_server.py``, FAKE backend: 50 ms to the first token). The attacker
connects from 127.0.0.2 (the keyed client from 127.0.0.1), over raw sockets. Measured:

- the gateway's RSS (``/proc/<pid>/status`` VmRSS) before, while one peer holds a maximal request head
  (64 KiB less one byte, never completed), while the peer holds its cap of them (512 x 64 KiB: +35.9 MiB
  measured with ``--quick``; the table below is of the earlier default, 256), and while
  and after a peer sends a 64 MiB header (the bytes the gateway took before its 431, the
  answer, when it came);
- keyed chat completions (``max_tokens`` 1), p50 and max, on a new connection each and on one kept-alive
  connection: with no attacker, with a peer holding its cap of idle connections, and with a peer
  holding its cap of maximal heads (each cap held afresh for the measurement: the head deadline runs
  from the accept); on the kept-alive connection, also while a peer sends 64 MiB headers back to back;
- how long a silent connection and a slowloris (a byte every 0.2 s) stay open, and what they get.

Measured here (2 vCPUs, the slow VM of ``bench_gateway.py``; ~40 s; "before": the gateway of the commit
before the limits, ``--roost-tree``, the same attacks, with no limit to meet)::

    | figure                                                          | with the limits         | before                  |
    |-----------------------------------------------------------------|-------------------------|-------------------------|
    | RSS idle                                                        | 144.1 MiB               | 144.6 MiB               |
    | RSS, one peer holding one maximal head (64 KiB - 1)             | +0.0 MiB                | +0.0 MiB                |
    | RSS, one peer holding 256 maximal heads                         | +12.4 MiB               | +12.4 MiB               |
    | connection 257 from that peer                                   | 503                     | accepted                |
    | 64 MiB header: taken, answer                                    | ~2 MiB (buffers), 431 in 1 ms | all 64 MiB in 14.6 s, no answer |
    | 64 MiB header: RSS at the peak                                  | +0.0 MiB                | +64.0 MiB (+118 in another run) |
    | keyed, new connection each, p50 / max ms: no attacker           | 53.7 / 55.1             | 54.1 / 55.2             |
    | ... a peer holding 256 idle connections                         | 53.8 / 55.4             | 54.3 / 86.1             |
    | ... a peer holding 256 maximal heads                            | 53.5 / 54.7             | 53.9 / 55.6             |
    | keyed, kept-alive, p50 / max ms: no attacker                    | 53.8 / 117.8            | 54.0 / 55.4             |
    | ... a peer holding 256 idle connections                         | 53.7 / 54.7             | 54.2 / 56.5             |
    | ... a peer holding 256 maximal heads                            | 53.2 / 54.8             | 53.8 / 55.5             |
    | ... a peer sending 64 MiB headers back to back                  | 54.8 / 64.0 (7,300 refused) | 49 of 50 failed: 503 backend "not reachable", one 4.1 s |
    | a silent connection open for                                    | 10.00 s, closed         | > 60 s (gave up)        |
    | a slowloris (a byte per 0.2 s) open for                         | 10.00 s, 408            | > 60 s (gave up)        |
    | warning lines over the run                                      | 4                       | 0                       |

The synthetic server's 50 ms to the first token is most of each keyed request. Before, a 64 MiB header
held the event loop long enough for the backend's polls and connects to time out: the keyed requests
failed with "backend not reachable". With the limits, a peer's cap of connections and heads costs
keyed clients nothing measurable; the bound on memory is the caps times the head limit (512 x 64 KiB
per address, 4,096 x 64 KiB = 256 MiB over all addresses).

Usage::

    .venv/bin/python benchmarks/bench_gateway_connections.py [--requests 50] [--header-mib 64] [--quick]
        [--roost-tree DIR] [--json OUT]

Rows (``--json``): the memory figures; keyed latency under each attack against no attacker (target: every
keyed request answered); the oversized header refused (431); the silent connection and the slowloris closed
at the head deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402
from bench_synthetic import start_synthetic  # noqa: E402
from support.gateway import UPSTREAM_KEY, GatewayProcess, add_key  # noqa: E402

from roost.gateway.connections import ConnectionLimits  # noqa: E402

LIMITS = ConnectionLimits()
ATTACKER = "127.0.0.2"
LIFETIME_LIMIT_S = 60.0
BODY = {"model": "synthetic", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 1}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def connect(port: int, source: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def first_line(s: socket.socket, timeout_s: float) -> str:
    """The status line of what the gateway answers on ``s`` before closing it ("" for nothing)."""
    s.settimeout(timeout_s)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n")[0].decode("latin-1")


def until_closed(s: socket.socket, timeout_s: float) -> bool:
    """Whether the gateway closed ``s`` within ``timeout_s``."""
    if timeout_s <= 0:
        return select.select([s], [], [], 0)[0] != [] and s.recv(1) == b""
    s.settimeout(timeout_s)
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def maximal_head() -> bytes:
    """A request head one byte short of the limit, its last header line unfinished."""
    start = b"GET /health HTTP/1.1\r\nHost: gateway\r\nX-Pad: "
    return start + b"a" * (LIMITS.max_header_bytes - 1 - len(start))


@contextlib.contextmanager
def holding(port: int, n: int, payload: bytes) -> Iterator[list[socket.socket]]:
    """``n`` connections from the attacker's address, each having sent ``payload``; closed on exit."""
    socks = [connect(port, ATTACKER) for _ in range(n)]
    try:
        for s in socks:
            if payload:
                s.sendall(payload)
        yield socks
    finally:
        for s in socks:
            s.close()


def open_count(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the gateway has not closed (nothing readable on them)."""
    readable = select.select(socks, [], [], 0)[0]
    return len(socks) - len(readable)


Latencies = tuple[list[float], list[str]]
"""Seconds per request, and what each request that failed got instead of a 200."""


def keyed_latencies(url: str, key: str, n: int, *, kept_alive: bool) -> Latencies:
    """``n`` keyed requests one after the other, on one kept-alive connection or a new one each."""
    out, failed = [], []
    pool = httpx.Limits() if kept_alive else httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30, limits=pool) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                resp = client.post("/v1/chat/completions", json=BODY)
                if resp.status_code != 200:
                    failed.append(f"{resp.status_code} {resp.text[:80]}")
            except httpx.HTTPError as exc:
                failed.append(type(exc).__name__)
            out.append(time.perf_counter() - t0)
    return out, failed


def big_header(port: int, pid: int, mib: int, stop: threading.Event | None = None) -> tuple[int, str, float, float]:
    """Send a ``mib`` MiB header in 1 MiB chunks until the gateway stops taking it (or ``stop`` is set):
    (bytes sent before the close, its answer, seconds to it, peak RSS sampled while sending)."""
    s = connect(port, ATTACKER)
    chunk = b"a" * (1024 * 1024)
    sent, peak = 0, rss_mib(pid)
    t0 = time.monotonic()
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nX-Pad: ")
        for _ in range(mib):
            if stop is not None and stop.is_set():
                break
            s.sendall(chunk)
            sent += len(chunk)
            peak = max(peak, rss_mib(pid))
    except OSError:
        pass
    answer = first_line(s, 0.5 if stop is not None and stop.is_set() else 10)
    took = time.monotonic() - t0
    s.close()
    return sent, answer, took, max(peak, rss_mib(pid))


def big_headers_during(port: int, pid: int, mib: int, work: Callable[[], Latencies]) -> tuple[Latencies, int]:
    """``work``'s result while a peer sends ``mib`` MiB headers one after the other (a new one as soon as
    the last is refused); and how many it started."""
    done = threading.Event()
    attempts = [0]

    def attack() -> None:
        while not done.is_set():
            attempts[0] += 1
            big_header(port, pid, mib, stop=done)

    t = threading.Thread(target=attack)
    t.start()
    try:
        return work(), attempts[0]
    finally:
        done.set()
        t.join()


def lifetime(port: int, trickle: bool, out: dict[str, tuple[float, str]], name: str) -> None:
    s = connect(port, "127.0.0.3")
    t0 = time.monotonic()
    if trickle:
        request = b"GET /health HTTP/1.1\r\nHost: gateway\r\nX-Pad: " + b"a" * 1000
        for i in range(len(request)):
            if time.monotonic() - t0 > LIFETIME_LIMIT_S:
                break
            try:
                s.send(request[i:i + 1])
            except OSError:
                break
            if select.select([s], [], [], 0.2)[0]:
                break
    answer = first_line(s, max(0.1, t0 + LIFETIME_LIMIT_S - time.monotonic()))
    closed = until_closed(s, max(0.0, t0 + LIFETIME_LIMIT_S - time.monotonic()))
    took = time.monotonic() - t0
    s.close()
    out[name] = (took, (answer or "nothing written") + ("" if closed else ", still open: gave up"))


def pct(lat: Latencies) -> str:
    xs, failed = lat
    text = f"{statistics.median(xs) * 1000:.1f} / {max(xs) * 1000:.1f}"
    if failed:
        text += f"; {len(failed)} of {len(xs)} failed (e.g. {failed[0]!r})"
    return text


def keyed_row(what: str, lat: Latencies, alone: Latencies) -> Row:
    xs, failed = lat
    return Row(f"keyed request p50, {what}", "ms", 1e3 * statistics.median(xs), 1e3 * statistics.median(alone[0]),
               "no attacker", "every keyed request answered", judged(not failed),
               f"{len(failed)} of {len(xs)} failed (e.g. {failed[0]!r})" if failed else f"max {1e3 * max(xs):.1f} ms")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=50, help="keyed requests per figure (default 50; --quick 15)")
    ap.add_argument("--header-mib", type=int, default=64, help="size of the oversized header attempt (MiB)")
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--roost-tree", type=Path, help="run the gateway from this checkout instead (PYTHONPATH), "
                    "e.g. `git archive HEAD~1 roost | tar -x -C /tmp/before` to measure the code before a change")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    n = 15 if args.quick else args.requests
    cap = LIMITS.max_connections_per_client
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-connections-"))
    syn = start_synthetic(api_key=UPSTREAM_KEY)
    gw = GatewayProcess(f"sqlite:///{work / 'usage.db'}", [syn.base_url], log_path=work / "gateway.log",
                        extra=["--quiet"], env={"PYTHONPATH": str(args.roost_tree)} if args.roost_tree else None)
    rows: list[tuple[str, str]] = []
    out: list[Row] = []
    try:
        gw.start()
        assert gw.proc is not None
        pid = gw.proc.pid
        key = add_key(gw.db_url, "bench")
        lifetimes: dict[str, tuple[float, str]] = {}
        timers = [threading.Thread(target=lifetime, args=(gw.port, trickle, lifetimes, name))
                  for name, trickle in (("silent", False), ("slowloris", True))]
        for t in timers:
            t.start()
        keyed_latencies(gw.url, key, 20, kept_alive=True)  # warm-up
        base = rss_mib(pid)
        rows.append(("gateway RSS, idle (after 20 requests)", f"{base:.1f} MiB"))

        with holding(gw.port, 1, maximal_head()) as socks:
            time.sleep(0.5)  # the gateway reads and parses what was sent
            rows.append(("RSS, a peer holding one maximal head (64 KiB - 1)",
                         f"{rss_mib(pid):.1f} MiB ({rss_mib(pid) - base:+.1f}); open {open_count(socks)}/1"))
        with holding(gw.port, cap, maximal_head()) as socks:
            time.sleep(1.0)
            grown = rss_mib(pid)
            over = connect(gw.port, ATTACKER)
            refused = first_line(over, 5)
            over.close()
            rows.append((f"RSS, a peer holding its cap of maximal heads ({cap} x 64 KiB)",
                         f"{grown:.1f} MiB ({grown - base:+.1f}); open {open_count(socks)}/{cap}"))
            out.append(Row(f"gateway RSS growth, a peer holding its cap of maximal heads ({cap} x 64 KiB)", "MiB",
                           grown - base, detail=f"{base:.1f} MiB idle"))
            rows.append((f"connection {cap + 1} from that peer", refused or "no answer within 5 s (not refused)"))
            lat_heads_new = keyed_latencies(gw.url, key, n, kept_alive=False)
            heads_open = [open_count(socks)]
        with holding(gw.port, cap, maximal_head()) as socks:  # afresh: the deadline runs from the accept
            lat_heads_kept = keyed_latencies(gw.url, key, n, kept_alive=True)
            heads_open.append(open_count(socks))

        time.sleep(1.0)  # the closed heads' memory handed back
        before = rss_mib(pid)
        sent, answer, took, peak = big_header(gw.port, pid, args.header_mib)
        time.sleep(0.5)
        rows.append((f"a {args.header_mib} MiB header: sent before the gateway closed", f"{sent / 2**20:.1f} MiB "
                     "(socket buffers included)"))
        rows.append((f"a {args.header_mib} MiB header: answer, time to it",
                     f"{answer or 'none (waited 10 s after the last byte)'} after {took * 1000:.0f} ms"))
        rows.append((f"a {args.header_mib} MiB header: RSS before / peak sampled / after",
                     f"{before:.1f} / {peak:.1f} / {rss_mib(pid):.1f} MiB ({peak - before:+.1f} at the peak)"))
        out.append(Row(f"a {args.header_mib} MiB header: bytes the gateway took before its answer", "MiB",
                       sent / 2**20, target=f"refused (431) at the {LIMITS.max_header_bytes // 1024} KiB head limit",
                       verdict=judged(" 431 " in f"{answer} "), detail=f"{answer or 'no answer'} after "
                       f"{took * 1000:.0f} ms; socket buffers included"))
        out.append(Row(f"a {args.header_mib} MiB header: gateway RSS growth at the peak", "MiB", peak - before))

        lat_big, big_attempts = big_headers_during(gw.port, pid, args.header_mib,
                                                   lambda: keyed_latencies(gw.url, key, n, kept_alive=True))
        lat_none_new = keyed_latencies(gw.url, key, n, kept_alive=False)
        lat_none_kept = keyed_latencies(gw.url, key, n, kept_alive=True)
        idle_open = []
        with holding(gw.port, cap, b"") as socks:
            lat_idle_new = keyed_latencies(gw.url, key, n, kept_alive=False)
            idle_open.append(open_count(socks))
        with holding(gw.port, cap, b"") as socks:
            lat_idle_kept = keyed_latencies(gw.url, key, n, kept_alive=True)
            idle_open.append(open_count(socks))
        # "held" is how many of the peer's connections were still open when the requests were done (the
        # head deadline, 10 s from their accept, closes the rest)
        for i, (way, none, idle, heads) in enumerate([("new connection each", lat_none_new, lat_idle_new, lat_heads_new),
                                                      ("one kept-alive connection", lat_none_kept, lat_idle_kept,
                                                       lat_heads_kept)]):
            rows.append((f"keyed requests, {way}, p50 / max ms (n={n}): no attacker", pct(none)))
            rows.append((f"  ... a peer holding its cap of idle connections (held {idle_open[i]}/{cap})", pct(idle)))
            rows.append((f"  ... a peer holding its cap of maximal heads (held {heads_open[i]}/{cap})", pct(heads)))
        rows.append((f"  ... a peer sending {args.header_mib} MiB headers back to back ({big_attempts} started)",
                     pct(lat_big)))
        out += [keyed_row("new connection each, a peer holding its cap of idle connections", lat_idle_new, lat_none_new),
                keyed_row("new connection each, a peer holding its cap of maximal heads", lat_heads_new, lat_none_new),
                keyed_row(f"kept alive, a peer sending {args.header_mib} MiB headers back to back", lat_big,
                          lat_none_kept)]

        for t in timers:
            t.join()
        for name in ("silent", "slowloris"):
            secs, got = lifetimes[name]
            what = "a silent connection" if name == "silent" else "a slowloris (1 byte / 0.2 s)"
            rows.append((f"{what}: open for, answer", f"{secs:.2f} s, {got}"))
            closed = "still open" not in got
            out.append(Row(f"{what}: open for", "s", secs,
                           target=f"closed at the {LIMITS.header_timeout_s:g} s head deadline",
                           verdict=judged(closed and secs <= LIMITS.header_timeout_s + 1), detail=got))
        log = gw.log()
        rows.append(("gateway log lines (warnings) over the run", str(sum(" WARNING " in ln for ln in log.splitlines()))))
    finally:
        gw.stop()
        syn.stop()

    width = max(len(r[0]) for r in rows)
    print(f"\nroost gateway{f' from {args.roost_tree}' if args.roost_tree else ''} connection limits: defaults ({LIMITS.max_header_bytes // 1024} KiB heads, "
          f"{LIMITS.header_timeout_s:g} s head deadline, {LIMITS.keep_alive_s:g} s keep-alive, "
          f"{LIMITS.max_connections} connections, {cap} per address); synthetic backend, max_tokens 1\n")
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    print(f"\nlogs: {work}")
    write_rows(args.json_out, "bench_gateway_connections", out)


if __name__ == "__main__":
    main()
