"""The gateway as the tests run it: ``roost gateway serve`` as its own process (the executable a user
runs), keys made and usage rows read straight from its database."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from roost.net import free_port
from support.cli import ROOST
from support.wait import poll, wait_started

UPSTREAM_KEY = "upstream-secret-" + os.urandom(6).hex()


class GatewayProcess:
    """A running ``roost gateway serve``."""

    def __init__(self, db_url: str, backends: list[str], *, log_path: Path, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, registry: bool = False) -> None:
        self.db_url, self.backends, self.log_path = db_url, backends, log_path
        self.extra = list(extra or [])
        self.env = {**os.environ, "VLLM_API_KEY": UPSTREAM_KEY, **(env or {})}
        self.registry = registry
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> GatewayProcess:
        args = [ROOST, "gateway", "serve", "--host", "127.0.0.1", "--port", str(self.port), "--db", self.db_url,
                *[a for b in self.backends for a in ("--backend", b)], *self.extra]
        if not self.registry:
            args.append("--no-registry")
        log = self.log_path.open("ab")
        offset = log.tell()  # a restart waits for its own line
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        wait_started("gateway", self.proc, lambda: b"listening on" in self.log_path.read_bytes()[offset:],
                     log=self.log_path, timeout_s=timeout_s, every_s=0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text


def add_key(db_url: str, name: str, kind: str = "user", *, trusted: bool = False) -> str:
    from roost.gateway.db import GatewayDB

    async def go() -> str:
        db = await GatewayDB(db_url).connect()
        try:
            return await db.add_key(name, kind, trusted=trusted)
        finally:
            await db.close()

    return asyncio.run(go())


def usage_rows(db_url: str) -> list[dict[str, Any]]:
    from roost.gateway.db import GatewayDB

    async def go() -> list[dict[str, Any]]:
        db = await GatewayDB(db_url).connect()
        try:
            return await db.usage_rows()
        finally:
            await db.close()

    return asyncio.run(go())


def _poll_rows(db_url: str, done: Callable[[list[dict[str, Any]]], bool], timeout_s: float) -> list[dict[str, Any]]:
    """The usage rows once ``done`` accepts them, or as they are after ``timeout_s``."""
    return poll(lambda: usage_rows(db_url), done, timeout_s=timeout_s, every_s=0.05)


def wait_rows(db_url: str, n: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The usage rows once there are at least ``n`` (rows of requests that did not complete are not
    awaited by the gateway before it answers)."""
    return _poll_rows(db_url, lambda rows: len(rows) >= n, timeout_s)


def wait_row(db_url: str, match: Callable[[dict[str, Any]], bool], timeout_s: float = 10.0) -> dict[str, Any]:
    """The first usage row ``match`` accepts, once it is written (a refused or failed request's row is
    written after the gateway has answered); AssertionError naming ``timeout_s`` if none comes."""
    rows = _poll_rows(db_url, lambda rows: any(match(r) for r in rows), timeout_s)
    found = next((r for r in rows if match(r)), None)
    if found is None:
        raise AssertionError(f"no matching usage row within {timeout_s:g} s")
    return found


def until_closed(sock: socket.socket) -> bytes:
    """What the peer sends on ``sock`` until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
