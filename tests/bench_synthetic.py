"""The synthetic streaming server (``tests/roost/bench/synthetic_server.py``) as a subprocess, its
control calls, and the comparison of what roost's client recorded with what the server did.

The server records, for every request, when it read it and when it wrote each token, on the
clock the client stamps arrivals with (``time.perf_counter``: CLOCK_MONOTONIC, shared by the
processes of one Linux machine). :func:`disagreements` sets a client's records against that
record of the same streams: what must hold exactly (token counts; no token stamped before it was
written; no request read before it was sent) and what holds within a tolerance that reflects the
loopback and one event-loop pass, not the machine's load: a stream's typical token is stamped
within :data:`LATE_S` of its write, and a request's TTFT and first-to-last span differ from the
server's by less than :data:`SPAN_S` (a scheduler stall of the shared machine can hold one
token; a client that stamped at parse time, at the end of the response, or against the wrong
request would be off by far more). The accuracy figure itself (decode tok/s within 1% of the
server's record at 1 to 256 streams) is a benchmark: ``benchmarks/bench_client_overhead.py``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.vllm.stream import RequestRecord

LATE_S = 0.05
"""Median lateness of a stream's token stamps after their writes (loopback ~0.1 ms; one event-loop
pass over 256 streams ~5 ms)."""

SPAN_S = 0.25
"""Largest difference between a request's client and server first-to-last span, or TTFT."""

SYNTHETIC = Path(__file__).resolve().parent / "roost" / "bench" / "synthetic_server.py"


class Synthetic:
    """A running synthetic server and its control endpoints."""

    def __init__(self, proc: subprocess.Popen[str], port: int, api_key: str, model: str, *, tls: bool = False) -> None:
        self.proc, self.port, self.api_key, self.model = proc, port, api_key, model
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"

    def control(self, **values: Any) -> None:
        httpx.post(f"{self.base_url}/_control", json=values, timeout=10, verify=False).raise_for_status()

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(f"{self.base_url}/_stats", timeout=10, verify=False).json()
        return data

    def record(self) -> dict[str, dict[str, Any]]:
        """The server's record per request id (see the module docstring)."""
        requests: dict[str, dict[str, Any]] = self.stats()["requests"]
        return requests

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_synthetic(*args: str, api_key: str = "synthetic-key", model: str = "synthetic") -> Synthetic:
    proc = subprocess.Popen(
        [sys.executable, str(SYNTHETIC), "--port", "0", "--model", model, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, SYNTHETIC_API_KEY=api_key),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"synthetic server did not start: {line!r}")
    return Synthetic(proc, int(line.split()[1]), api_key, model, tls="--tls-cert" in args)


@pytest.fixture(scope="module")
def synthetic() -> Iterator[Synthetic]:
    """A synthetic server shared by a test module (tests set its timing and faults with ``control``)."""
    server = start_synthetic()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_synthetic() -> Iterator[Synthetic]:
    """A server of its own, for a test that kills it."""
    server = start_synthetic()
    try:
        yield server
    finally:
        server.stop()


def disagreements(records: Iterable[RequestRecord], truth: dict[str, dict[str, Any]]) -> list[str]:
    """Where the client's completed ``records`` contradict the server's record of the same requests
    (empty when they agree; see the module docstring for what is exact and what has a tolerance)."""
    out: list[str] = []
    for r in records:
        if not r.ok:
            continue
        t = truth.get(r.request_id)
        if t is None:
            out.append(f"{r.request_id}: the server has no record of it")
            continue
        sent: list[float] = t["sent"]
        if len(r.token_times) != len(sent) or r.completion_tokens != t["tokens"]:
            out.append(f"{r.request_id}: {len(r.token_times)} chunks, {r.completion_tokens} tokens; "
                       f"the server wrote {len(sent)}")
            continue
        if r.t_sent > t["t_received"]:
            out.append(f"{r.request_id}: sent {r.t_sent - t['t_received']:.6f} s after the server read it")
        late = [c - w for c, w in zip(r.token_times, sent, strict=True)]
        if min(late) < 0:
            out.append(f"{r.request_id}: a token stamped {-min(late):.6f} s before the server wrote it")
        if statistics.median(late) >= LATE_S:
            out.append(f"{r.request_id}: tokens stamped {statistics.median(late):.3f} s after their writes (median)")
        assert r.t_first is not None and r.t_last is not None
        span_error = (r.t_last - r.t_first) - (sent[-1] - sent[0])
        ttft_error = (r.t_first - r.t_sent) - (sent[0] - t["t_received"])
        if abs(span_error) >= SPAN_S or not 0 <= ttft_error < SPAN_S:
            out.append(f"{r.request_id}: span off by {span_error:+.3f} s, TTFT by {ttft_error:+.3f} s")
    return out
