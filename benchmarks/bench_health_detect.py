"""How long after /health turns 200 does the health wait notice? (target: under 0.5 s)

This measures THE health wait (``roost.serve.health.wait_until_ready``) on both backends' real
server objects: a ``ProcessServer`` (a child process, its log file read by the process backend)
and a ``DockerServer`` (a container whose port Docker publishes, its log followed by the docker
backend). What runs inside is a stand-in for vLLM's API, FAKE by design: only it knows the exact
instant /health flips. It answers /health 503 until a scheduled moment (host clock; a container
shares it), then 200, lists the served model and answers one-token completions, and logs a vLLM-like
line every 0.2 s so the wait has new log text to read on its polls, as during a real cold load.

The delay is (roost saw /health 200: ``Readiness.health_ok_at``) - (scheduled flip). Each trial
flips at a random phase of the poll, 0.3-0.8 s after the wait starts.

    python benchmarks/bench_health_detect.py [--trials 20] [--polls 0.05,0.1,0.25] [--no-docker] [--json OUT]

Rows (``--json``): per backend, the median delay at a 0.1 s poll (the first of ``--polls`` without it)
and the worst delay over every poll interval, judged against the target.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402

from roost.net import free_port  # noqa: E402
from roost.serve.base import Server, ServeSpec  # noqa: E402
from roost.serve.docker.containers import LABEL_HOST, LABEL_MODEL, DockerServer  # noqa: E402
from roost.serve.docker.images import docker_client  # noqa: E402
from roost.serve.dockerfile import LABEL_MANAGED  # noqa: E402
from roost.serve.health import wait_until_ready  # noqa: E402
from roost.serve.process import start_process_server  # noqa: E402

TARGET_S = 0.5
ROOTFS_IMAGE = "roost/debian-bookworm:minbase"
POLLS_S = (0.05, 0.1, 0.25)

# The stand-in: `<python> FLIP --port N` (the process backend passes vLLM's argv; only --port matters).
FLIP = r'''
import http.server, json, sys, threading, time
port = int(sys.argv[sys.argv.index("--port") + 1])
state = {"flip_at": float("inf")}

class H(http.server.BaseHTTPRequestHandler):
    def _send(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200 if time.time() >= state["flip_at"] else 503)
        if self.path == "/v1/models":
            return self._send(200, json.dumps({"data": [{"id": "bench"}]}).encode())
        return self._send(404)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/flip":
            state["flip_at"] = float(body)
            return self._send(204)
        return self._send(200, json.dumps({"choices": [{"text": "x"}]}).encode())

    def log_message(self, *a):
        pass

def chatter():
    n = 0
    while True:
        n += 1
        print(f"(EngineCore pid=1) INFO [gpu_model_runner.py:1] warming up model: step {n}", flush=True)
        time.sleep(0.2)

threading.Thread(target=chatter, daemon=True).start()
print("INFO:     Application startup complete.", flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", port), H).serve_forever()
'''


@contextmanager
def process_server(tmp: Path) -> Iterator[Server]:
    python = tmp / "python"
    python.write_text(f"#!{sys.executable}\n{FLIP}")
    python.chmod(0o755)
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    spec = ServeSpec(model_dir=model, served_model_name="bench", port=free_port(), log_path=tmp / "flip.log")
    server = start_process_server(spec, python=python, host_name="bench-health")
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def docker_server() -> Iterator[Server]:
    client = docker_client()
    port = free_port()
    container = client.containers.run(
        ROOTFS_IMAGE, ["python3", "-c", FLIP, "--port", str(port)], detach=True, init=True,
        name=f"roost-bench-health-{random.randrange(1 << 30):x}", ports={f"{port}/tcp": ("127.0.0.1", port)},
        labels={LABEL_MANAGED: "true", LABEL_HOST: "bench-health", LABEL_MODEL: "bench"},
    )
    server = DockerServer(client, container, base_url=f"http://127.0.0.1:{port}", served_model_name="bench",
                          host_name="bench-health", port=port, image=ROOTFS_IMAGE)
    try:
        yield server
    finally:
        server.stop()
        client.close()


def measure(server: Server, poll_s: float, trials: int) -> tuple[list[float], list[float]]:
    """(detection delays, the wait's own upper bounds ``detect_delay_s``) over ``trials`` waits."""
    deadline = time.monotonic() + 30
    while True:  # the stand-in is up when /health answers at all
        try:
            httpx.get(f"{server.base_url}/health", timeout=1)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stand-in never answered: {server.logs()[-2000:]}") from None
            time.sleep(0.1)
    delays, bounds = [], []
    for _ in range(trials):
        flip_at = time.time() + 0.3 + random.random() * 0.5  # flips at a random phase of the poll
        httpx.post(f"{server.base_url}/flip", content=repr(flip_at), timeout=5).raise_for_status()
        ready = wait_until_ready(server, api_key=None, timeout_s=30, poll_interval_s=poll_s)
        delays.append(ready.health_ok_at - flip_at)
        bounds.append(ready.detect_delay_s)
        httpx.post(f"{server.base_url}/flip", content="inf", timeout=5).raise_for_status()
    return delays, bounds


def row(label: str, poll_s: float, delays: list[float], bounds: list[float]) -> str:
    med = statistics.median(delays)
    p90 = statistics.quantiles(delays, n=10)[-1] if len(delays) >= 2 else delays[0]
    worst = max(delays)
    return (f"{label:<8} {poll_s * 1000:>7.0f} {len(delays):>6} {med * 1000:>9.1f} {p90 * 1000:>8.1f} "
            f"{worst * 1000:>8.1f} {max(bounds) * 1000:>12.1f} {worst / TARGET_S:>11.2f}")


def backend_rows(backend: str, by_poll: dict[float, list[float]]) -> list[Row]:
    poll = 0.1 if 0.1 in by_poll else next(iter(by_poll))
    worst = max(max(d) for d in by_poll.values())
    polls = ", ".join(f"{p * 1000:g}" for p in by_poll)
    return [
        Row(f"health wait's detection delay, {backend} backend, {poll * 1000:g} ms poll: median", "ms",
            1000 * statistics.median(by_poll[poll])),
        Row(f"health wait's detection delay, {backend} backend: worst of {sum(map(len, by_poll.values()))} "
            f"({polls} ms polls)", "ms", 1000 * worst, target=f"< {TARGET_S * 1000:.0f} ms",
            verdict=judged(worst < TARGET_S)),
    ]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--polls", default=",".join(f"{p:g}" for p in POLLS_S),
                    help="the wait's poll intervals to measure, seconds, comma-separated")
    ap.add_argument("--no-docker", action="store_true", help="measure the process backend only")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    polls = [float(x) for x in args.polls.split(",")]
    rows: list[Row] = []

    print(f"health-wait detection delay (wait_until_ready), {args.trials} trials per row, target < "
          f"{TARGET_S * 1000:.0f} ms ({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)")
    print(f"{'backend':<8} {'poll ms':>7} {'trials':>6} {'median ms':>9} {'p90 ms':>8} {'max ms':>8} "
          f"{'bound max ms':>12} {'max/target':>11}")
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp, process_server(Path(tmp)) as server:
        delays: dict[float, list[float]] = {}
        for poll_s in polls:
            delays[poll_s], bounds = measure(server, poll_s, args.trials)
            print(row("process", poll_s, delays[poll_s], bounds), flush=True)
        rows += backend_rows("process", delays)
    if not args.no_docker:
        with docker_server() as server:
            delays = {}
            for poll_s in polls:
                delays[poll_s], bounds = measure(server, poll_s, args.trials)
                print(row("docker", poll_s, delays[poll_s], bounds), flush=True)
            rows += backend_rows("docker", delays)
    write_rows(args.json_out, "bench_health_detect", rows)


if __name__ == "__main__":
    main()
