"""How long after /health turns 200 does the health wait notice? (target: under 0.5 s)

A local HTTP server (a stand-in for vLLM's /health, FAKE by design: only it knows the exact instant
the endpoint flips) answers 503 until a scheduled moment, then 200. ``wait_healthy`` polls it as
it polls a real container; the detection delay is (moment noticed) - (moment of the flip). The
``docker`` rows add what the container-aware wait really does between polls: ask the Docker engine
for the state of a real (sleeping) roost container every ``container_check_every`` polls.

Real vLLM containers in the test suite measure the same delay from the container log's
"Application startup complete." timestamp (see tests/roost/serve/docker/test_docker_backend.py).

    python benchmarks/bench_health_detect.py [--trials 20] [--docker]
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.server
import random
import statistics
import threading
import time
from typing import Any

from roost.serve.docker_backend import wait_healthy

TARGET_S = 0.5


class FlipServer:
    """/health: 503 before ``flip_at`` (time.monotonic), 200 after."""

    def __init__(self) -> None:
        self.flip_at = float("inf")
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ok = time.monotonic() >= outer.flip_at
                self.send_response(200 if ok else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class LocalHandle:
    """A ServerHandle over the flip server (always 'running')."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.served_model_name = "bench"

    def is_running(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def logs(self) -> str:
        return ""

    def stop(self) -> None:
        return None


class ContainerBackedHandle(LocalHandle):
    """Same endpoint, but liveness comes from a real container through the Docker API."""

    def __init__(self, base_url: str, container: Any) -> None:
        super().__init__(base_url)
        self.container = container

    def is_running(self) -> bool:
        self.container.reload()
        return bool(self.container.attrs["State"]["Running"])


def measure(handle: LocalHandle, server: FlipServer, poll_s: float, trials: int) -> list[float]:
    delays: list[float] = []
    for _ in range(trials):
        server.flip_at = time.monotonic() + 0.3 + random.random() * 0.5  # flips mid-poll at a random phase
        start = time.monotonic()
        w = wait_healthy(handle, timeout_s=30, poll_s=poll_s)  # type: ignore[arg-type]
        noticed = time.monotonic()
        assert w.healthy, "the flip server never answered 200"
        delays.append(noticed - server.flip_at)
        assert noticed - start < 30
        server.flip_at = float("inf")
    return delays


def row(label: str, poll_s: float, delays: list[float]) -> str:
    med = statistics.median(delays)
    p90 = statistics.quantiles(delays, n=10)[-1] if len(delays) >= 2 else delays[0]
    worst = max(delays)
    return (f"{label:<10} {poll_s * 1000:>7.0f} {len(delays):>6} {med * 1000:>9.1f} {p90 * 1000:>8.1f} "
            f"{worst * 1000:>8.1f} {worst / TARGET_S:>11.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--docker", action="store_true", help="also measure with real container state checks")
    ap.add_argument("--image", default="roost/debian-bookworm:minbase", help="image for the sleeping container")
    args = ap.parse_args()

    server = FlipServer()
    base = f"http://127.0.0.1:{server.port}"
    print(f"health-wait detection delay, {args.trials} trials per row, target < {TARGET_S * 1000:.0f} ms "
          f"({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)")
    print(f"{'liveness':<10} {'poll ms':>7} {'trials':>6} {'median ms':>9} {'p90 ms':>8} {'max ms':>8} "
          f"{'max/target':>11}")
    container = None
    try:
        for poll_s in (0.05, 0.1, 0.25):
            print(row("local", poll_s, measure(LocalHandle(base), server, poll_s, args.trials)))
        if args.docker:
            import docker

            client = docker.from_env(version="auto")
            container = client.containers.run(args.image, ["sleep", "600"], detach=True,
                                              labels={"ai.roost.managed": "true", "ai.roost.host": "bench"},
                                              name=f"roost-bench-health-{random.randrange(1 << 30):x}")
            for poll_s in (0.05, 0.1, 0.25):
                handle = ContainerBackedHandle(base, container)
                print(row("docker", poll_s, measure(handle, server, poll_s, args.trials)))
    finally:
        server.close()
        if container is not None:
            container.remove(force=True)


if __name__ == "__main__":
    main()
