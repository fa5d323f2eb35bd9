"""Faults with the real parts: the gateway killed with ``kill -9`` under load (every completed request's
usage is in the database after the restart), and two gateways sharing one SQLite database."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from pathlib import Path

import httpx
from bench_synthetic import Synthetic
from support.gateway import ROOST, GatewayProcess, add_key, usage_rows
from support.wait import poll


async def _load(url: str, key: str, stop: threading.Event, completed: list[str], streams: int) -> None:
    """``streams`` clients sending requests back to back (streamed and not) until ``stop``; the request
    id of every response that arrived whole goes to ``completed``."""
    headers = {"Authorization": f"Bearer {key}"}

    async def client(i: int, http: httpx.AsyncClient) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            stream = (i + n) % 2 == 0
            body = {"model": "synthetic", "messages": [{"role": "user", "content": f"q {i} {n}"}], "max_tokens": 8,
                    "stream": stream}
            try:
                async with http.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
                    text = (await resp.aread()).decode()
                    if resp.status_code == 200 and (not stream or text.rstrip().endswith("data: [DONE]")):
                        completed.append(resp.headers["x-request-id"])
            except httpx.HTTPError:
                await asyncio.sleep(0.05)

    async with httpx.AsyncClient(timeout=30) as http:
        await asyncio.gather(*(client(i, http) for i in range(streams)))


def test_kill_9_under_load_loses_no_completed_request(backend: Synthetic, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'usage.db'}"
    key = add_key(db, "loadgen", "app")
    backend.control(tokens_per_s=200)
    gw = GatewayProcess(db, [backend.base_url], log_path=tmp_path / "gw.log", extra=["--quiet"]).start()
    completed: list[str] = []
    stop = threading.Event()
    loader = threading.Thread(target=lambda: asyncio.run(_load(gw.url, key, stop, completed, 16)))
    try:
        loader.start()
        poll(lambda: len(completed), lambda n: n >= 60, timeout_s=30, every_s=0.05)
        gw.kill9()  # mid-load: requests in flight die with it
        stop.set()
        loader.join(timeout=60)
        assert len(completed) >= 60
        gw.start()  # the same database, after the crash
        stored = {r["request_id"] for r in usage_rows(db)}
        lost = [rid for rid in completed if rid not in stored]
        assert lost == [], f"{len(lost)} of {len(completed)} completed requests have no usage row"
        assert httpx.get(f"{gw.url}/health", timeout=10).json()["status"] == "ok"
    finally:
        stop.set()
        gw.stop()
        backend.control(tokens_per_s=25)


def test_two_gateways_share_one_database(backend: Synthetic, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    key = add_key(db, "team", "user")
    a = GatewayProcess(db, [backend.base_url], log_path=tmp_path / "a.log", extra=["--quiet"]).start()
    b = GatewayProcess(db, [backend.base_url], log_path=tmp_path / "b.log", extra=["--quiet"]).start()
    try:
        async def burst() -> list[int]:
            async with httpx.AsyncClient(timeout=30) as http:
                async def one(gw: GatewayProcess, i: int) -> int:
                    resp = await http.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                           json={"model": "synthetic", "max_tokens": 3 + i % 4,
                                                 "messages": [{"role": "user", "content": "w " * (i % 5)}]})
                    assert resp.status_code == 200, resp.text
                    return int(resp.json()["usage"]["completion_tokens"])

                return await asyncio.gather(*(one(a if i % 2 else b, i) for i in range(40)))

        completions = asyncio.run(burst())
        # a key made after both started works on both without a restart
        later = add_key(db, "later", "device")
        for gw in (a, b):
            resp = httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {later}"},
                              json={"model": "synthetic", "messages": [{"role": "user", "content": "x"}],
                                    "max_tokens": 2}, timeout=30)
            assert resp.status_code == 200
        rows = usage_rows(db)
        assert len(rows) == 42
        assert len({r["gateway"] for r in rows}) == 2
        out = subprocess.run([str(ROOST), "gateway", "usage", "--json", "--db", db], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        import json

        report = {r["key"]: r for r in json.loads(out.stdout)}
        assert report["team"]["requests"] == 40 and report["team"]["completion_tokens"] == sum(completions)
        assert set(report["team"]) == {"key", "kind", "model", "requests", "prompt_tokens", "completion_tokens"}
        assert report["later"]["requests"] == 2 and report["later"]["kind"] == "device"
    finally:
        a.stop()
        b.stop()
