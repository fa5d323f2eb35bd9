"""What roost's metering gateway costs a streamed chat completion, side by side with direct access
to the same server and with LiteLLM's proxy in front of it.

Targets (the gateway's issue, its hop to the limit): added time to first token p50 under 0.5 ms and
p99 under 2 ms, at 1 and at 16 streams; at 64 concurrent streams, aggregate output tokens/s through
the gateway at least 98% of direct at a GPU server's pace (paced) and 95% CPU-bound.

Measured here (2 vCPUs, a slow VM shared with other work, load average 1.9-3 at the start;
synthetic server, 5 rounds, LiteLLM 1.108.7, ``--profile``; 360 s)::

    | backend | figure (median of rounds / pooled percentiles) | direct | roost gateway | gateway vs direct | LiteLLM proxy | LiteLLM vs direct | target |
    |---|---|---|---|---|---|---|---|
    | synthetic | TTFT p50 ms, concurrency 1 (n=150) | 20.70 | 21.46 | +0.75 | 43.00 | +22.30 | added < 0.5 ms |
    | synthetic | TTFT p99 ms, concurrency 1 (n=150) | 21.59 | 25.14 | +3.55 | 60.74 | +39.14 | added < 2 ms |
    | synthetic | request leg: client send -> backend read, p50 ms, concurrency 1 (server's clock) | 0.18 | 0.56 | +0.38 | 17.05 | +16.88 | |
    | synthetic | in the backend: request read -> first token written, p50 ms, concurrency 1 (server's clock) | 20.33 | 20.41 | +0.08 | 20.40 | +0.07 | |
    | synthetic | first-token leg: backend write -> client read, p50 ms, concurrency 1 (server's clock) | 0.15 | 0.39 | +0.24 | 5.30 | +5.16 | |
    | synthetic | gateway's own added-latency histogram, concurrency 1: p50 / p99 ms (n=150) | - | 0.39 / 0.94 | - | - | - | |
    | synthetic | TTFT p50 ms, concurrency 16 (n=160) | 20.99 | 21.78 | +0.79 | 101.20 | +80.22 | added < 0.5 ms |
    | synthetic | TTFT p99 ms, concurrency 16 (n=160) | 23.08 | 24.29 | +1.21 | 288.12 | +265.03 | added < 2 ms |
    | synthetic | gateway's own added-latency histogram, concurrency 16: p50 / p99 ms (n=160) | - | 0.26 / 1.60 | - | - | - | |
    | synthetic | output tok/s, 64 streams, paced 50 tok/s per stream | 3136 | 3102 | 99.0% | 849 | 27.0% | >= 98% |
    | synthetic | proxy CPU µs per token, 64 streams, paced 50 tok/s per stream | - | 53 | - | 1138 | - | |
    | synthetic | output tok/s, 64 streams, 1000 tok/s per stream (CPU-bound) | 25470 | 23275 | 89.5% | 731 | 2.9% | >= 95% |
    | synthetic | proxy CPU µs per token, 64 streams, 1000 tok/s per stream (CPU-bound) | - | 26 | - | 1355 | - | |

(This run's first two rounds at concurrency 1 overlapped a 256-stream load test on the same machine:
its per-round p50s are steady, 21.32-21.54 ms, but its p99 is not clean. The run before it, whose
only difference was the ``/tokenize`` sent a loop pass after the request rather than right behind it,
measured added TTFT p50 +1.31 / +0.77 ms and p99 +1.52 / +1.64 ms at 1 / 16 streams, the backend's
leg +0.40 ms, 64 streams 99.4% paced and 90.2% CPU-bound.)

Targets: added TTFT p99 under 2 ms: **not met** (+3.55 ms at 1 stream, +1.21 at 16); 64 paced
streams at 99.0% of direct (>= 98%): met. Added TTFT p50 under 0.5 ms: **not met**
(+0.75 ms at 1 stream, +0.79 at 16); 64 CPU-bound streams at 89.5% of direct (>= 95%): **not met**.
LiteLLM: +22.30 ms TTFT p50 at 1 stream, 27.0% of direct at 64 paced streams, 1138 µs of CPU per
token (the gateway: 53).

Where the remaining time goes. On the server's clock (concurrency 1, p50 over direct): the request
leg +0.38 ms, the backend +0.08 ms, the first-token leg +0.24 ms; the gateway's own histogram (its
first byte of the request -> written upstream, plus the upstream's first byte -> written to the
client) 0.39 / 0.94 ms (16 streams: 0.26 / 1.60). Each leg crosses one more loopback hop than direct access
(a wake-up of another process on another vCPU: on this VM about what direct's whole leg costs,
0.15-0.2 ms), so about 0.35 ms of the added p50 is the hop itself, whatever the proxy. The
gateway's share, from ``time.perf_counter`` stamps put in the hot path while developing it (p50 of a
request at concurrency 1, caches cold after 20 ms idle: the same code takes 5-10x its warm
microbenchmark time here): httptools and uvicorn's head callbacks ~50 µs, then the door
(``Proxy.admit_now``: the cached key, ``orjson.loads``, the plain reading of the body, the route, the
request's bytes) ~60-120 µs, then the upstream write (a ``send`` on loopback, which also wakes the
backend) 25-55 µs; on the way back, the upstream connection's parser, the meter and the client write
in one callback. The backend's +0.08 ms (+0.40 in the run before) is the synthetic server's own
clock: it sleeps to the first
token on asyncio's timer, which ``epoll`` rounds up to the next millisecond whenever its loop is
woken during the wait (+0.5 ms when the gateway's ``/tokenize`` arrived a loop pass after the request,
+0.03 ms with no ``/tokenize`` at all, ``--tokenize-after 60``): the gateway now writes the
``/tokenize`` right behind the request, so that the server reads both at once. CPU-bound, the
gateway spends 26 µs of CPU per token (two system calls per token, a read and a write, are most
of it); the streams' end is paced by how fast it drains 64 streams' tokens arriving in the same
millisecond, and by the 64 requests' own work at the start. ``--profile`` samples the gateway with
py-spy after the measured rounds (its busy samples: the usage writer's SQLite commit is a thread of
its own, its I/O outside the GIL)::

    py-spy on the gateway, sequential requests (concurrency 1):
      busy samples by area: roost gateway 70%, uvicorn 8%, upstream connection (roost.vllm) 8%, asyncio 6%, other 6%, usage writer (sqlite3) 1%, prometheus_client 1%
       29.1%  UsageWriter._sqlite_insert (roost/gateway/db.py)
        6.6%  Proxy.admit_now (roost/gateway/admission.py)
        4.6%  StreamMeter._event (roost/gateway/metering.py)
        4.1%  LimitedHttpToolsProtocol._feed (roost/gateway/connections.py)
        3.6%  ClientStream.write (roost/gateway/connections.py)
        3.1%  RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py)
        2.6%  Relay._notify (roost/vllm/relay.py)
        1.5%  HttpToolsProtocol.on_headers_complete (uvicorn/protocols/http/httptools_impl.py)
        1.5%  Connection._feed (roost/vllm/timed_net.py)
        1.5%  Timeout.reschedule (asyncio/timeouts.py)
        1.5%  digest (roost/gateway/keys.py)
        1.0%  Forward._metered (roost/gateway/forward.py)
    py-spy on the gateway, 64 streams, 1000 tok/s per stream (CPU-bound):
      busy samples by area: roost gateway 57%, upstream connection (roost.vllm) 11%, asyncio 11%, uvicorn 9%, other 8%, prometheus_client 2%, usage writer (sqlite3) 2%
       17.7%  UsageWriter._sqlite_insert (roost/gateway/db.py)
        5.2%  RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py)
        4.7%  ClientStream.write (roost/gateway/connections.py)
        3.6%  StreamMeter._event (roost/gateway/metering.py)
        2.6%  Connection._feed (roost/vllm/timed_net.py)
        2.6%  Proxy.admit_now (roost/gateway/admission.py)
        2.6%  LimitedHttpToolsProtocol.on_message_complete (roost/gateway/connections.py)
        2.1%  SecretForms.search (roost/gateway/metering.py)
        2.1%  StreamMeter.feed (roost/gateway/metering.py)
        2.1%  Forward._pump (roost/gateway/forward.py)
        2.1%  GatewayDB.active_keys (roost/gateway/db.py)
        2.1%  LimitedHttpToolsProtocol._arm_head_timer (roost/gateway/connections.py)

Before (this change: the gateway as of the previous commit, measured the same day with ``--rounds 3``,
LiteLLM included, load average 1.3-3.7): added TTFT p50 +1.22 ms at 1 stream and +0.72 at 16, p99
+2.64 and +2.66; request leg +0.75 ms, first-token leg +0.26, the backend +0.09; the gateway's own
histogram 0.61 / 1.35 ms p50 / p99 (16 streams: 0.49 / 1.40); 64 paced streams 98.9% (48 µs of CPU
per token), CPU-bound 78.3% (19 µs). What changed: the request is admitted and written upstream by
the HTTP protocol's callback that completed it, before uvicorn builds its request cycle and task
(``roost.gateway.app.Gateway.early``: a cached key without SHA-256, a plain body read without pydantic,
request ids cut from a block of ``os.urandom``, the route without a poll, the write on an idle
kept-alive upstream connection); a stream's blocks go from the upstream connection's callback
straight to the client's transport while it takes them (``roost.gateway.direct``: no task wake-up, no
ASGI ``send`` per block); the secret check per block is a substring search per form, not a regular
expression (2.8 µs -> 0.9 µs a block, the upstream key's four forms); completion counters move every 16 tokens; upstream connections
are kept 20 s (a burst after a pause no longer opens 64 connections first); ``/tokenize`` is written
right behind its request. The first version (httpx upstream, a task per chunk send, SQLAlchemy commits
on the event loop): added TTFT p50 +5.9 ms, p99 +11.0 ms, 77% of direct at 64 paced streams, 355 µs
of gateway CPU per token (py-spy: ~45% in httpcore's connection pool, encode/httpcore#1035).

vLLM CPU (``--vllm``, not measured again for this change; before it, 3 rounds): added TTFT p50 +9.7 ms
at 1 stream, 64 streams at vLLM's pace 95.5% of direct (the gateway and the per-request ``/tokenize``
take CPU from a vLLM that has both cores busy; ``--tokenize-after S`` leaves the prompt count to vLLM's
own usage on every chunk).

Paths, each its own process, each fed the same load by this process's client (roost's own
``VllmClient.stream_chat``: bytes stamped on arrival, one keep-alive connection per stream):

- direct: the backend itself;
- roost gateway: ``roost gateway serve --backend URL --db sqlite:///... --no-registry --quiet`` with a
  key made by ``roost gateway key add --json`` (usage rows written to SQLite, /tokenize counted, as
  deployed);
- LiteLLM: ``litellm --config ... --num_workers 1`` with a one-model config (``openai/<model>`` at the
  backend, spend and error logs off, local cost map: see ``litellm_config``); optional
  (``--litellm``, else ``/tmp/litellm-venv`` if present; "not installed" otherwise).

Backends: the synthetic server (``tests/roost/bench/synthetic_server.py``, a FAKE OpenAI-compatible
server writing tokens on an exact schedule, so any difference is the path's) and, with ``--vllm``,
vLLM CPU serving the generated demo model (as ``benchmarks/bench_vs_vllm.py`` does).

Figures, per backend (rounds alternate the paths, their order rotated each round, so that drift of
the machine hits every path alike; TTFTs are pooled over the rounds):

- TTFT (send -> first token chunk) p50 and p99 at concurrency 1 (sequential requests of 4 tokens; the
  synthetic server at 20 ms TTFT, 200 tok/s) and 16 (16 users, each sending 64-token streams one after
  the other, 50 tok/s, the users' starts spread over one request's length); "added" is the path's
  percentile minus direct's. At concurrency 1 on the synthetic server, its ``/_stats`` (write times
  on the same monotonic clock) split each TTFT into request leg, time in the server and first-token
  leg;
- the gateway's own view: ``roost_gateway_added_latency_seconds`` from its ``/metrics`` (the delta
  over the gateway's TTFT rounds; p50 and p99 interpolated in its buckets);
- 64 streams started at once: aggregate output tokens/s (tokens over first send -> last end), the
  median of the rounds, and its ratio to direct (median of the rounds' paired ratios); the proxy
  process's CPU time per streamed token (user + system of it and its children; its per-request costs
  included). On the synthetic server twice: paced (``--rate`` tok/s per stream, a GPU server's pace;
  100 tokens; each stream sends :data:`SUSTAINED` requests back to back, the steady state of 64
  concurrent users, so that the burst of 64 requests arriving in the same millisecond and the last
  usage commit are not most of the window) and at 1000 tok/s per stream (50 tokens, one request each;
  the pipeline CPU-bound: a capacity figure, judged at 95%).

The machine has 2 CPUs: by default this client and the synthetic server run on CPU 0 and the proxies
on CPU 1 (a proxy with a core of its own, as beside a GPU server); with vLLM, the client and the
proxies share the CPUs vLLM's worker is not bound to (``support.agreement.quiet_clients``).
``--free`` leaves placement to the scheduler. LiteLLM is stopped (SIGSTOP) while the other paths are
measured, so that its background work cannot weigh on them. Usage::

    .venv/bin/python benchmarks/bench_gateway.py [--quick] [--vllm [--vllm-url URL]] [--rounds 5] [--litellm PATH]
        [--free] [--json OUT]

``--vllm-url`` (with ``--vllm``) measures a vLLM already serving the demo model there (its key in
``VLLM_API_KEY``) instead of starting one. ``--json OUT``: the gateway's figures against direct access (and
LiteLLM's where it ran) as rows for ``bash scripts/bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402

from roost.vllm.client import RequestBudget, VllmClient  # noqa: E402
from roost.vllm.stream import RequestRecord  # noqa: E402

SYNTHETIC = REPO / "tests" / "roost" / "bench" / "synthetic_server.py"
ROOST = Path(sys.executable).parent / "roost"
LITELLM_VENV = Path("/tmp/litellm-venv")
LITELLM_KEY = "sk-bench"
PATHS = ("direct", "gateway", "litellm")
TITLES = {"direct": "direct", "gateway": "roost gateway", "litellm": "LiteLLM proxy"}
BUDGET = RequestBudget(first_token_s=120.0, total_s=900.0)
CLK = os.sysconf("SC_CLK_TCK")
PROMPT = " ".join(f"word{i}" for i in range(32))


# --- processes -----------------------------------------------------------------------------------


def _taskset(cpus: set[int] | None) -> list[str]:
    if not cpus or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", ",".join(str(c) for c in sorted(cpus))]


class Proc:
    """A child process logging to a file, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], log: Path, *, env: dict[str, str] | None = None,
                 cpus: set[int] | None = None) -> None:
        self.name, self.log = name, log
        with log.open("wb") as f:
            self.popen = subprocess.Popen(_taskset(cpus) + argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                          stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_for_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log.read_text(errors="replace"))
            if m:
                return m
            if self.popen.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise SystemExit(f"{self.name} did not start (log {self.log}):\n{self.log.read_text(errors='replace')[-3000:]}")

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process and its descendants (live ones)."""
        return sum(_proc_cpu(p) for p in _tree(self.pid))

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK  # utime, stime (fields 14 and 15)


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((d / "stat").read_text().rpartition(")")[2].split()[1])
                children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def start_synthetic(work: Path, key: str, cpus: set[int] | None) -> tuple[Proc, str]:
    p = Proc("synthetic server", [sys.executable, str(SYNTHETIC), "--port", "0", "--api-key", key,
                                  "--max-model-len", "100000"], work / "synthetic.log", cpus=cpus)
    m = p.wait_for_line(r"READY (\d+)", 30)
    return p, f"http://127.0.0.1:{m.group(1)}"


def start_gateway(work: Path, backend: str, upstream_key: str, cpus: set[int] | None, tag: str) -> tuple[Proc, str, str]:
    db = f"sqlite:///{work / f'gateway-{tag}.db'}"
    made = subprocess.run([str(ROOST), "gateway", "key", "add", "bench", "--db", db, "--json"], capture_output=True,
                          text=True, check=True)
    client_key = str(json.loads(made.stdout)["key"])
    p = Proc("roost gateway", [str(ROOST), "gateway", "serve", "--host", "127.0.0.1", "--port", "0", "--backend",
                               backend, "--db", db, "--no-registry", "--quiet", *GATEWAY_ARGS],
             work / f"gateway-{tag}.log",
             env=dict(os.environ, VLLM_API_KEY=upstream_key), cpus=cpus)
    m = p.wait_for_line(r"listening on (http://\S+)", 60)
    return p, m.group(1), client_key


def find_litellm(arg: str | None) -> Path | None:
    """The ``litellm`` launcher of ``arg`` (a venv, its python or the launcher), else of /tmp/litellm-venv."""
    if arg == "none":
        return None
    where = Path(arg) if arg else LITELLM_VENV
    if where.is_dir():
        where = where / "bin" / "litellm"
    elif where.name.startswith("python"):
        where = where.parent / "litellm"
    if where.is_file() and os.access(where, os.X_OK):
        return where
    if arg:
        raise SystemExit(f"--litellm {arg}: no litellm launcher there (install: uv pip install 'litellm[proxy]')")
    return None


def litellm_config(model: str) -> str:
    """One model at the backend; no telemetry, callbacks, spend or error logs, no database."""
    return f"""model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: os.environ/UPSTREAM_API_BASE
      api_key: os.environ/UPSTREAM_API_KEY
litellm_settings:
  telemetry: false
  success_callback: []
  failure_callback: []
  callbacks: []
  set_verbose: false
  json_logs: false
  turn_off_message_logging: true
  drop_params: true
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  disable_spend_logs: true
  disable_error_logs: true
  disable_adding_master_key_hash_to_db: true
"""


def start_litellm(launcher: Path, work: Path, backend: str, upstream_key: str, model: str, cpus: set[int] | None,
                  tag: str) -> tuple[Proc, str]:
    config = work / f"litellm-{tag}.yaml"
    config.write_text(litellm_config(model))
    port = _free_port()
    env = dict(os.environ, UPSTREAM_API_BASE=f"{backend}/v1", UPSTREAM_API_KEY=upstream_key,
               LITELLM_MASTER_KEY=LITELLM_KEY, LITELLM_LOCAL_MODEL_COST_MAP="True",
               LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS="True", LITELLM_LOCAL_BLOG_POSTS="True",
               LITELLM_LOCAL_AUTOROUTER_PRESETS="True", LITELLM_LOCAL_POLICY_TEMPLATES="True", LITELLM_LOG="ERROR",
               LITELLM_TELEMETRY="False", DISABLE_ADMIN_UI="True", NO_DOCS="True", NO_REDOC="True")
    env.pop("DATABASE_URL", None)
    p = Proc("LiteLLM proxy", [str(launcher), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
                               "--num_workers", "1"], work / f"litellm-{tag}.log", env=env, cpus=cpus)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200:
                return p, url
        if p.popen.poll() is not None:
            break
        time.sleep(0.25)
    p.stop()
    raise SystemExit(f"LiteLLM did not start (log {p.log}):\n{p.log.read_text(errors='replace')[-3000:]}")


def _free_port() -> int:
    from roost.net import free_port

    return int(free_port())


# --- load ----------------------------------------------------------------------------------------


@dataclass
class Path_:
    name: str
    client: VllmClient
    proc: Proc | None = None
    metrics_url: str | None = None


TTFT_TARGETS = ((0.5, 0.5e-3), (0.99, 2e-3))
"""(percentile, added TTFT under which it is met): p50 under 0.5 ms, p99 under 2 ms."""


def tok_s_goal(label: str) -> float:
    """The share of direct access's output tok/s a 64-stream row must reach: 95% CPU-bound, else 98%."""
    return 0.95 if "CPU-bound" in label else 0.98


GATEWAY_ARGS: list[str] = []
"""Extra ``roost gateway serve`` arguments (``--gateway-arg``), e.g. ``--tokenize-after=0.05``."""

SUSTAINED = 3
"""Requests each of the 64 streams sends one after the other in a paced round."""


@dataclass
class Plan:
    """What one backend is asked, per round and path."""

    model: str
    c1_requests: int  # sequential requests of ttft_tokens
    c16_per_user: int  # requests of c16_tokens per user, 16 users
    throughput: list[tuple[str, float | None, int]]  # 64-stream rows: (label, synthetic tok/s per stream or
    # None for a real server, tokens per stream)
    ttft_tokens: int = 4
    c16_tokens: int = 64


@dataclass
class Results:
    ttft: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # (path, concurrency) -> seconds
    ttft_rounds: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # per-round p50
    legs: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (path, "up"|"server"|"down") -> s
    hist: dict[int, dict[float, float]] = field(default_factory=dict)  # concurrency -> le -> count delta
    tok_s: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (path, label) -> per round
    cpu_us_tok: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    idle_cpu: dict[str, float] = field(default_factory=dict)  # proxy -> CPU share while idle
    stagger_s: float = 0.0
    short: list[str] = field(default_factory=list)  # requests that ended with fewer tokens than asked
    profile: list[str] = field(default_factory=list)  # --profile: py-spy's summary


def payload(model: str, tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def step(client: VllmClient, model: str, users: int, per_user: int, tokens: int,
               stagger_s: float = 0.0) -> tuple[list[RequestRecord], float]:
    """``users`` users, each sending ``per_user`` requests one after the other, user ``u`` starting
    ``u * stagger_s`` after the first; the records (in order of sending) and the wall time (first
    send -> last end)."""
    go = asyncio.Event()
    body = payload(model, tokens)

    async def user(u: int) -> list[RequestRecord]:
        out = []
        for j in range(per_user):
            if j == 0 and u and stagger_s:
                await go.wait()
                await asyncio.sleep(u * stagger_s)
            out.append(await client.stream_chat(body, request_id=f"bench-{uuid.uuid4().hex[:16]}", budget=BUDGET,
                                                concurrency=users, start=go if j == 0 else None))
        return out

    await client.settle()
    await client.preconnect(users)
    gc.collect()
    gc.disable()
    try:
        tasks = [asyncio.ensure_future(user(u)) for u in range(users)]
        await asyncio.sleep(0)
        go.set()
        records = [r for group in await asyncio.gather(*tasks) for r in group]
    finally:
        gc.enable()
    bad = [r for r in records if not r.ok]
    if bad:
        raise SystemExit(f"{len(bad)} of {len(records)} requests failed: {bad[0].error}")
    wall = max(r.t_end or r.t_sent for r in records) - min(r.t_sent for r in records)
    return sorted(records, key=lambda r: r.t_sent), wall


async def scrape_hist(url: str) -> dict[float, float]:
    async with httpx.AsyncClient(timeout=10) as h:
        text = (await h.get(f"{url}/metrics")).text
    out = {}
    for m in re.finditer(r'^roost_gateway_added_latency_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M):
        out[math.inf if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
    return out


def hist_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket the rank falls in."""
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank, lo, below = q * total, 0.0, 0.0
    for b in bounds:
        c = buckets[b]
        if c >= rank:
            if b == math.inf:
                return lo
            return lo + (b - lo) * (rank - below) / (c - below) if c > below else b
        lo, below = b, c
    return lo


def pct(xs: list[float], q: float) -> float:
    if len(xs) < 2:
        return xs[0] if xs else math.nan
    return statistics.quantiles(xs, n=1000, method="inclusive")[round(q * 1000) - 1]


def rotated(paths: list[Path_], r: int) -> list[Path_]:
    k = r % len(paths)
    return paths[k:] + paths[:k]


async def control(url: str | None, **body: Any) -> dict[str, Any]:
    """The synthetic server's ``/_control`` (with ``body``), then its ``/_stats``; nothing for a real server."""
    if url is None:
        return {}
    async with httpx.AsyncClient(timeout=30) as h:
        if body:
            (await h.post(f"{url}/_control", json=body)).raise_for_status()
            return {}
        stats: dict[str, Any] = (await h.get(f"{url}/_stats")).json()
        return stats


async def measure(paths: list[Path_], plan: Plan, rounds: int, ctl: str | None, label: str) -> Results:
    res = Results()

    def pause_others(active: Path_) -> None:  # an idle proxy's timers do not run while another is measured
        for p in paths:
            if p is not active and p.proc is not None and p.name == "litellm":
                os.kill(p.proc.pid, 19)  # SIGSTOP

    def resume() -> None:
        for p in paths:
            if p.proc is not None and p.name == "litellm":
                os.kill(p.proc.pid, 18)  # SIGCONT

    await control(ctl, tokens_per_s=200.0, ttft_s=0.02)
    for p in paths:  # warm-up: connections, first-request paths, LiteLLM's lazy imports
        await step(p.client, plan.model, 4, 2, 4)
    for p in paths:
        if p.proc is not None:
            c0 = p.proc.cpu_s()
            await asyncio.sleep(3.0)
            res.idle_cpu[p.name] = (p.proc.cpu_s() - c0) / 3.0
    await control(ctl, tokens_per_s=50.0, ttft_s=0.02)
    probe, _ = await step(paths[0].client, plan.model, 1, 1, plan.c16_tokens)
    res.stagger_s = ((probe[0].t_end or probe[0].t_sent) - probe[0].t_sent) / 16  # 16 users spread over a request
    phases = ((1, plan.c1_requests, plan.ttft_tokens, 200.0, 0.0), (16, plan.c16_per_user, plan.c16_tokens, 50.0,
                                                                     res.stagger_s))
    for conc, per_user, tokens, rate, stagger in phases:
        await control(ctl, tokens_per_s=rate, ttft_s=0.02)
        hist: dict[float, float] = {}
        for r in range(rounds):
            for p in rotated(paths, r):
                pause_others(p)
                before = await scrape_hist(p.metrics_url) if p.metrics_url else {}
                if conc == 1:
                    await control(ctl, reset_stats=True)
                records, _ = await step(p.client, plan.model, conc, per_user, tokens, stagger)
                if p.metrics_url:
                    after = await scrape_hist(p.metrics_url)
                    for b, c in after.items():
                        hist[b] = hist.get(b, 0.0) + c - before.get(b, 0.0)
                if conc == 1 and ctl is not None:  # sequential: the server's records are in the same order
                    truth = list((await control(ctl))["requests"].values())
                    if len(truth) == len(records):
                        for x, t in zip(records, truth, strict=True):
                            res.legs.setdefault((p.name, "up"), []).append(t["t_received"] - x.t_sent)
                            res.legs.setdefault((p.name, "down"), []).append((x.t_first or 0.0) - t["t_first"])
                            res.legs.setdefault((p.name, "server"), []).append(t["t_first"] - t["t_received"])
                resume()
                ttfts = [x.t_first - x.t_sent for x in records if x.t_first is not None]
                res.ttft.setdefault((p.name, conc), []).extend(ttfts)
                res.ttft_rounds.setdefault((p.name, conc), []).append(statistics.median(ttfts))
            print(f"  {label}: TTFT at concurrency {conc}, round {r + 1}/{rounds}", file=sys.stderr)
        res.hist[conc] = hist
    for tlabel, rate_, burst in plan.throughput:
        if rate_ is not None:
            await control(ctl, tokens_per_s=rate_, ttft_s=0.05)
        for r in range(rounds):
            for p in rotated(paths, r):
                pause_others(p)
                cpu0 = p.proc.cpu_s() if p.proc else 0.0
                # paced rows: each stream sends SUSTAINED requests back to back (the steady state a
                # gateway serves; the start burst and the last commit are paid once, not per window)
                records, wall = await step(p.client, plan.model, 64, SUSTAINED if rate_ is not None else 1, burst)
                cpu = (p.proc.cpu_s() if p.proc else 0.0) - cpu0
                resume()
                tokens = sum(x.completion_tokens or 0 for x in records)
                res.short += [f"{p.name}: {x.completion_tokens}" for x in records
                              if (x.completion_tokens or 0) < burst]
                res.tok_s.setdefault((p.name, tlabel), []).append(tokens / wall)
                res.cpu_us_tok.setdefault((p.name, tlabel), []).append(1e6 * cpu / tokens)
            print(f"  {label}: 64 streams, {tlabel}, round {r + 1}/{rounds}", file=sys.stderr)
    return res


# --- profile ---------------------------------------------------------------------------------------

PROFILED = {"roost/gateway/": "roost gateway", "roost/vllm/": "upstream connection (roost.vllm)",
            "uvicorn/": "uvicorn", "starlette/": "starlette", "asyncio/": "asyncio", "prometheus_client/": "prometheus_client",
            "sqlite3/": "usage writer (sqlite3)", "concurrent/": "usage writer (sqlite3)", "threading.py": "usage writer (sqlite3)"}
"""Where a sample's innermost frame is, by path: the area it is counted in (else "other")."""
IDLE_LEAVES = ("Runner.run (asyncio/runners.py", "run (uvloop/__init__.py", "_worker (concurrent/futures/thread.py",
               "_connection_worker_thread (aiosqlite/core.py")
"""Innermost frames of a thread waiting (the event loop in epoll, idle worker threads): not counted."""


def find_py_spy(arg: str | None) -> Path | None:
    """``--profile``'s py-spy: the path given, else ``py-spy`` on PATH or in /tmp/pyspy-venv."""
    for c in ([arg] if arg and arg != "auto" else [shutil.which("py-spy"), "/tmp/pyspy-venv/bin/py-spy"]):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    if arg and arg != "auto":
        raise SystemExit(f"--profile: no py-spy at {arg} (pip install py-spy into any venv)")
    return None


def summarize_profile(raw_text: str, top: int = 12) -> list[str]:
    """py-spy's raw stacks -> the share of busy samples per area and the functions with the most own samples."""
    areas: dict[str, int] = {}
    own: dict[str, int] = {}
    busy = 0
    for line in raw_text.splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack or not n_s.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        if leaf.startswith(IDLE_LEAVES):
            continue
        n = int(n_s)
        busy += n
        where = leaf.partition(" (")[2]
        area = next((a for k, a in PROFILED.items() if k in where), "other")
        areas[area] = areas.get(area, 0) + n
        fn = f"{leaf.partition(' (')[0]} ({where.rpartition(':')[0].split('site-packages/')[-1].split('/work/main/')[-1]})"
        own[fn] = own.get(fn, 0) + n
    if not busy:
        return ["  (no busy samples)"]
    out = ["  busy samples by area: " + ", ".join(f"{a} {100 * n / busy:.0f}%"
                                                 for a, n in sorted(areas.items(), key=lambda kv: -kv[1]))]
    out += [f"  {100 * n / busy:5.1f}%  {fn}" for fn, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]]
    return out


async def profile_gateway(py_spy: Path, gw: Path_, plan: Plan, ctl: str | None, work: Path) -> list[str]:
    """py-spy (sampling, not stopping the process) on the gateway: sequential requests, then 64 CPU-bound
    streams; after the measured rounds (a sampled process is slower: nothing measured above is)."""
    assert gw.proc is not None
    out: list[str] = []
    for what, conc, per_user, tokens, rate in (("sequential requests (concurrency 1)", 1, 60, plan.ttft_tokens, 200.0),
                                               ("64 streams, 1000 tok/s per stream (CPU-bound)", 64, 1, 50, 1000.0)):
        await control(ctl, tokens_per_s=rate, ttft_s=0.02 if conc == 1 else 0.05)
        dump = work / f"py-spy-{conc}.txt"
        spy = subprocess.Popen([str(py_spy), "record", "--nonblocking", "-r", "1000", "-f", "raw", "-o", str(dump),
                                "-p", str(gw.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.5)  # attached
        for _ in range(1 if conc == 1 else 4):
            await step(gw.client, plan.model, conc, per_user, tokens)
        spy.send_signal(2)
        await asyncio.to_thread(spy.wait, 60)
        out.append(f"py-spy on the gateway, {what}:")
        out += summarize_profile(dump.read_text(errors="replace") if dump.is_file() else "")
    return out


# --- the table -----------------------------------------------------------------------------------


def _ms(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{1e3 * x:.2f}"


def table(label: str, res: Results, have: list[str], *, judge_ttft: bool = True) -> tuple[list[str], list[str]]:
    """The markdown rows of one backend, and the verdicts on the targets (on TTFT only where the backend
    keeps an exact schedule: vLLM CPU's own TTFT varies by more than the targets)."""
    cols = [p for p in PATHS if p != "direct"]
    rows, verdicts = [], []

    def cell(path: str, text: str) -> str:
        return text if path in have else "not installed"

    for conc in (1, 16):
        d = res.ttft[("direct", conc)]
        for q, target in TTFT_TARGETS:
            base = pct(d, q)
            cells = []
            for p in cols:
                if p not in have:
                    cells += ["not installed", "-"]
                    continue
                v = pct(res.ttft[(p, conc)], q)
                cells += [_ms(v), f"{1e3 * (v - base):+.2f}"]
                if p == "gateway" and judge_ttft:
                    ok = v - base < target
                    verdicts.append(f"{label}: added TTFT p{round(q * 100)} at concurrency {conc}: "
                                    f"{1e3 * (v - base):+.2f} ms (target < {1e3 * target:g} ms): {'met' if ok else 'MISSED'}")
            rows.append(f"| {label} | TTFT p{round(q * 100)} ms, concurrency {conc} (n={len(d)}) | {_ms(base)} | "
                        + " | ".join(cells) + f" | added < {1e3 * target:g} ms |")
        if conc == 1 and ("direct", "up") in res.legs:
            for leg, what in (("up", "request leg: client send -> backend read"),
                              ("server", "in the backend: request read -> first token written"),
                              ("down", "first-token leg: backend write -> client read")):
                base = statistics.median(res.legs[("direct", leg)])
                cells = []
                for p in cols:
                    if (p, leg) not in res.legs:
                        cells += [cell(p, "-"), "-"]
                        continue
                    v = statistics.median(res.legs[(p, leg)])
                    cells += [_ms(v), f"{1e3 * (v - base):+.2f}"]
                rows.append(f"| {label} | {what}, p50 ms, concurrency 1 (server's clock) | {_ms(base)} | "
                            + " | ".join(cells) + " | |")
        h = res.hist.get(conc, {})
        rows.append(f"| {label} | gateway's own added-latency histogram, concurrency {conc}: p50 / p99 ms "
                    f"(n={h.get(math.inf, 0):.0f}) | - | {_ms(hist_quantile(h, 0.5))} / {_ms(hist_quantile(h, 0.99))} | "
                    f"- | - | - | |")
    labels = list(dict.fromkeys(t for _, t in res.tok_s))
    for t in labels:
        dt = res.tok_s[("direct", t)]
        cells = []
        for p in cols:
            if p not in have:
                cells += ["not installed", "-"]
                continue
            vt = res.tok_s[(p, t)]
            ratio = statistics.median(x / y for x, y in zip(vt, dt, strict=True))
            cells += [f"{statistics.median(vt):.0f}", f"{100 * ratio:.1f}%"]
            if p == "gateway":
                verdicts.append(f"{label}: 64 streams {t}: gateway at {100 * ratio:.1f}% of direct tok/s "
                                f"(target >= {100 * tok_s_goal(t):g}%): {'met' if ratio >= tok_s_goal(t) else 'MISSED'}")
        goal = f">= {100 * tok_s_goal(t):g}%"
        rows.append(f"| {label} | output tok/s, 64 streams, {t} | {statistics.median(dt):.0f} | " + " | ".join(cells)
                    + f" | {goal} |")
        cpu = [cell(p, f"{statistics.median(res.cpu_us_tok[(p, t)]):.0f}") if p in have else "not installed"
               for p in cols]
        rows.append(f"| {label} | proxy CPU µs per token, 64 streams, {t} | - | {cpu[0]} | - | {cpu[1]} | - | |")
    return rows, verdicts


def figures(label: str, res: Results, have: list[str], *, judge_ttft: bool = True) -> list[Row]:
    """The rows of one backend (``--json``): the gateway against direct access, and against LiteLLM where it ran."""
    out: list[Row] = []
    for conc in (1, 16):
        d = res.ttft[("direct", conc)]
        for q, target in TTFT_TARGETS:
            base, v = pct(d, q), pct(res.ttft[("gateway", conc)], q)
            added = v - base
            out.append(Row(f"TTFT p{round(q * 100)}, concurrency {conc}, through the gateway ({label}, n={len(d)})", "ms",
                           1e3 * v, 1e3 * base, "direct", f"added < {1e3 * target:g} ms",
                           judged(added < target) if judge_ttft else "not judged",
                           f"{1e3 * added:+.2f} ms" if judge_ttft else
                           f"{1e3 * added:+.2f} ms; the server's own TTFT varies by more than the target"))
            if "litellm" in have and q == 0.5:
                other = pct(res.ttft[("litellm", conc)], q) - base
                out.append(Row(f"added TTFT p50, concurrency {conc} ({label}): the gateway vs LiteLLM's proxy", "ms",
                               1e3 * added, 1e3 * other, "LiteLLM proxy"))
    for t in dict.fromkeys(t for _, t in res.tok_s):
        dt, vt = res.tok_s[("direct", t)], res.tok_s[("gateway", t)]
        ratio = statistics.median(x / y for x, y in zip(vt, dt, strict=True))
        goal = tok_s_goal(t)
        out.append(Row(f"output tok/s, 64 streams, {t}, through the gateway ({label})", "tok/s",
                       statistics.median(vt), statistics.median(dt), "direct", f">= {100 * goal:g}% of direct",
                       judged(ratio >= goal), ratio=ratio))
        if "litellm" in have:
            out.append(Row(f"proxy CPU per token, 64 streams, {t} ({label}): the gateway vs LiteLLM's proxy", "µs",
                           statistics.median(res.cpu_us_tok[("gateway", t)]),
                           statistics.median(res.cpu_us_tok[("litellm", t)]), "LiteLLM proxy"))
    return out


HEADER = ("| backend | figure (median of rounds / pooled percentiles) | direct | roost gateway | gateway vs direct | "
          "LiteLLM proxy | LiteLLM vs direct | target |\n|---|---|---|---|---|---|---|---|")


def raw(label: str, res: Results) -> list[str]:
    out = [f"{label}:"]
    for (p, c), xs in sorted(res.ttft_rounds.items()):
        out.append(f"  TTFT p50 per round, {p}, concurrency {c}: " + ", ".join(f"{1e3 * x:.2f}" for x in xs) + " ms")
    for (p, t), xs in sorted(res.tok_s.items()):
        cpu = res.cpu_us_tok[(p, t)]
        out.append(f"  tok/s per round, {p}, {t}: " + ", ".join(f"{x:.0f}" for x in xs)
                   + "; CPU µs/token: " + ", ".join(f"{x:.0f}" for x in cpu))
    for conc, h in sorted(res.hist.items()):
        out.append(f"  gateway histogram delta, concurrency {conc}: "
                   + " ".join(f"le={b:g}:{c:.0f}" for b, c in sorted(h.items())))
    out.append(f"  16-user stagger {1e3 * res.stagger_s:.0f} ms; proxies' idle CPU: "
               + ", ".join(f"{p} {100 * c:.1f}%" for p, c in res.idle_cpu.items()))
    if res.short:
        out.append(f"  requests with fewer tokens than asked: {len(res.short)} (e.g. {res.short[:3]})")
    out += res.profile
    return out


# --- main ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def pinned_self(cpus: set[int] | None) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


async def run_backend(label: str, backend: str, upstream_key: str, plan: Plan, litellm: Path | None, work: Path,
                      rounds: int, proxy_cpus: set[int] | None, control: str | None,
                      placement: Callable[[list[int]], contextlib.AbstractContextManager[Any]] | None = None,
                      py_spy: Path | None = None) -> tuple[Results, list[str]]:
    procs: list[Proc] = []
    clients: list[VllmClient] = []
    try:
        print(f"{label}: starting the roost gateway{' and LiteLLM' if litellm else ''} ...", file=sys.stderr)
        gw, gw_url, gw_key = start_gateway(work, backend, upstream_key, proxy_cpus, label.split()[0])
        procs.append(gw)
        paths = [Path_("direct", VllmClient(backend, plan.model, api_key=upstream_key)),
                 Path_("gateway", VllmClient(gw_url, plan.model, api_key=gw_key), gw, gw_url)]
        if litellm is not None:
            ll, ll_url = start_litellm(litellm, work, backend, upstream_key, plan.model, proxy_cpus, label.split()[0])
            procs.append(ll)
            paths.append(Path_("litellm", VllmClient(ll_url, plan.model, api_key=LITELLM_KEY), ll))
        clients = [p.client for p in paths]
        with contextlib.ExitStack() as stack:
            if placement is not None:
                cpus = stack.enter_context(placement([0, *(p.pid for p in procs)]))
                print(f"{label}: client and proxies pinned to CPUs {sorted(cpus) if cpus else 'none'}", file=sys.stderr)
            res = await measure(paths, plan, rounds, control, label)
            if py_spy is not None:
                for other in paths:
                    if other.name == "litellm" and other.proc is not None:
                        os.kill(other.proc.pid, 19)  # SIGSTOP: the gateway alone
                res.profile = await profile_gateway(py_spy, paths[1], plan, control, work)
        return res, [p.name for p in paths]
    finally:
        for c in clients:
            await c.aclose()
        for p in procs:
            with contextlib.suppress(OSError):
                os.kill(p.pid, 18)  # SIGCONT, in case
            p.stop()


def start_vllm(work: Path, key: str) -> tuple[Any, str]:
    """vLLM CPU serving the demo model (``tiny``); the server and its URL."""
    from roost.demo.model import generate_tiny_model
    from roost.net import free_port
    from roost.serve.base import ServeSpec
    from roost.serve.health import wait_until_ready
    from roost.serve.process import start_process_server

    model = generate_tiny_model(work / "tiny", seed=0)
    spec = ServeSpec(model_dir=model, served_model_name="tiny", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048"], log_path=work / "vllm.log")
    print(f"serving the demo model with vLLM CPU (log: {spec.log_path}) ...", file=sys.stderr)
    server = start_process_server(spec, api_key=key, host_name="bench")
    try:
        wait_until_ready(server, api_key=key, timeout_s=900)
    except BaseException:
        server.stop()
        raise
    return server, str(server.base_url)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and requests (a smoke run, ~2 min)")
    ap.add_argument("--rounds", type=int, help="rounds per figure (default 5; --quick 2)")
    ap.add_argument("--gateway-arg", action="append", default=[],
                    help="an extra `roost gateway serve` argument (repeatable), e.g. --gateway-arg=--tokenize-after=0.05")
    ap.add_argument("--rate", type=float, default=50.0, help="synthetic tok/s per stream of the paced 64-stream rows")
    ap.add_argument("--vllm", action="store_true", help="also the real vLLM CPU server on the demo model")
    ap.add_argument("--litellm", help="LiteLLM's venv, its python or its `litellm` launcher (default: "
                    f"{LITELLM_VENV} if present; `none`: leave LiteLLM out)")
    ap.add_argument("--free", action="store_true", help="no CPU pinning")
    ap.add_argument("--profile", nargs="?", const="auto", help="after the measured rounds, sample the gateway with "
                    "py-spy (this path, else on PATH or /tmp/pyspy-venv) and print where its time goes")
    ap.add_argument("--vllm-url", help="with --vllm: a vLLM serving the demo model (key: VLLM_API_KEY) instead of "
                    "starting one")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.vllm_url and not args.vllm:
        raise SystemExit("--vllm-url is for --vllm")
    GATEWAY_ARGS.extend(args.gateway_arg)
    rounds = args.rounds or (2 if args.quick else 5)
    vrounds = args.rounds or (2 if args.quick else 3)  # vLLM CPU is slow: fewer rounds
    litellm = find_litellm(args.litellm)
    py_spy = find_py_spy(args.profile) if args.profile else None
    if args.profile and py_spy is None:
        raise SystemExit("--profile: py-spy not found (uv pip install --python /tmp/pyspy-venv/bin/python py-spy)")
    ncpu = len(os.sched_getaffinity(0))
    pin = not args.free and ncpu >= 2
    client_cpus = set(sorted(os.sched_getaffinity(0))[:-1]) if pin else None
    proxy_cpus = {sorted(os.sched_getaffinity(0))[-1]} if pin else None
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    key = "bench-up-" + os.urandom(6).hex()
    q = args.quick
    t_start = time.monotonic()
    tables: list[str] = []
    verdicts: list[str] = []
    raws: list[str] = []

    syn_plan = Plan(model="synthetic", c1_requests=15 if q else 30, c16_per_user=1 if q else 2,
                    throughput=[(f"paced {args.rate:g} tok/s per stream", args.rate, 50 if q else 100),
                                ("1000 tok/s per stream (CPU-bound)", 1000.0, 50)])
    with pinned_self(client_cpus):
        syn, syn_url = start_synthetic(work, key, client_cpus)
        try:
            res, have = asyncio.run(run_backend("synthetic", syn_url, key, syn_plan, litellm, work, rounds, proxy_cpus,
                                                syn_url, py_spy=py_spy))
        finally:
            syn.stop()
    rows, v = table("synthetic", res, have)
    tables += rows
    verdicts += v
    raws += raw("synthetic", res)
    out = figures("synthetic", res, have)

    if args.vllm:
        from support.agreement import quiet_clients

        if args.vllm_url:
            server, url, vkey = None, args.vllm_url.rstrip("/"), os.environ.get("VLLM_API_KEY", "")
        else:
            server, url = start_vllm(work, key)
            vkey = key
        try:
            vplan = Plan(model="tiny", c1_requests=10 if q else 15, c16_per_user=1,
                         throughput=[("vLLM's pace", None, 32)])

            def placement(pids: list[int]) -> contextlib.AbstractContextManager[Any]:
                cm: contextlib.AbstractContextManager[Any] = quiet_clients(url, pids)
                return cm

            res, have = asyncio.run(run_backend("vLLM CPU tiny", url, vkey, vplan, litellm, work, vrounds,
                                                None, None, None if args.free else placement))
        finally:
            if server is not None:
                server.stop()
        rows, v = table("vLLM CPU tiny", res, have, judge_ttft=False)
        tables += rows
        verdicts += v
        raws += raw("vLLM CPU tiny", res)
        out += figures("vLLM CPU tiny", res, have, judge_ttft=False)

    placement_note = (f"client and synthetic server on CPU {sorted(client_cpus)}, proxies on CPU {sorted(proxy_cpus)}"
                      if pin and client_cpus and proxy_cpus else "no pinning")
    print(f"\nroost gateway vs direct vs LiteLLM: {rounds} rounds"
          f"{f' (vLLM: {vrounds})' if args.vllm else ''}, paths alternated; "
          f"{placement_note}; "
          f"{ncpu} CPUs; {time.monotonic() - t_start:.0f} s\n")
    print(HEADER)
    print("\n".join(tables))
    print()
    print("\n".join(verdicts))
    print("\nraw numbers:")
    print("\n".join(raws))
    print(f"\nlogs and databases: {work}")
    write_rows(args.json_out, "bench_gateway", out)


if __name__ == "__main__":
    main()
