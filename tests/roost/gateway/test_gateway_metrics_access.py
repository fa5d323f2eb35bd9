"""Who may read the gateway's ``/metrics`` and ``/health`` details (``roost/gateway/access.py``):

- the decision itself (pure): loopback addresses, bearer tokens, the token's sources;
- the real ASGI app (``Gateway(...).app``, SQLite in ``tmp_path``, no backend) driven by
  ``httpx.ASGITransport`` from a tailnet address (100.101.102.103) and from loopback, with and
  without a token: status codes and bodies of ``/metrics`` and ``/health``;
- ``roost gateway serve`` as a process with ``ROOST_GATEWAY_METRICS_TOKEN`` (and with
  ``--metrics-token-file``) in front of the synthetic server: 401 without the token, 200 with it,
  ``/health`` minimal without it, and the token in no line the gateway printed nor its arguments.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from bench_synthetic import Synthetic
from pydantic import SecretStr
from support.cli import run_roost
from support.errors import assert_one_line_error
from support.gateway import GatewayProcess, add_key
from support.secret_scan import SecretScan

from roost.errors import UserError
from roost.gateway.access import TOKEN_ENV, is_loopback, load_token, metrics_access
from roost.gateway.app import Gateway
from roost.gateway.config import GatewayConfig
from roost.gateway.db import GatewayDB
from roost.gateway.routing import Router

TAILNET = ("100.101.102.103", 5555)
LOOPBACK = ("127.0.0.1", 5556)
TOKEN = "mt-" + secrets.token_hex(24)
DETAILS = {"status", "backends", "backends_up", "models", "keys", "usage_pending"}


# --- the decision --------------------------------------------------------------------------------


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("100.101.102.103", False), ("10.0.0.2", False), ("192.168.1.5", False), ("0.0.0.0", False),
    ("::ffff:100.101.102.103", False), ("fd7a:115c:a1e0::1", False), ("::", False),
    ("localhost", False), ("testclient", False), ("", False), (None, False),
])
def test_loopback_addresses(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_a_token_only_loopback_is_served() -> None:
    assert metrics_access("127.0.0.1", None, None) == "allow"
    assert metrics_access("::1", None, None) == "allow"
    assert metrics_access("100.101.102.103", None, None) == "forbidden"
    assert metrics_access("100.101.102.103", f"Bearer {TOKEN}", None) == "forbidden"  # no token to match
    assert metrics_access(None, None, None) == "forbidden"


def test_with_a_token_every_client_must_send_it() -> None:
    token = SecretStr(TOKEN)
    assert metrics_access("100.101.102.103", f"Bearer {TOKEN}", token) == "allow"
    assert metrics_access("100.101.102.103", f"bearer  {TOKEN} ", token) == "allow"
    assert metrics_access("127.0.0.1", None, token) == "unauthorized"  # loopback too
    for header in (None, "", "Bearer", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN,
                   "Bearer \u00e9\u00e8-not-ascii", f"Bearer {TOKEN.upper()}"):
        assert metrics_access("100.101.102.103", header, token) == "unauthorized", header


def test_token_sources(tmp_path: Path) -> None:
    assert load_token(None, None) is None
    assert load_token("", None) is None
    env = load_token(TOKEN, None)
    assert env is not None and env.get_secret_value() == TOKEN
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    got = load_token(None, f)
    assert got is not None and got.get_secret_value() == TOKEN
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    short = tmp_path / "short"
    short.write_text("qzq\n")
    spaced = tmp_path / "spaced"
    spaced.write_text("xyzzy token with blanks in it\n")
    for bad in (tmp_path / "missing", tmp_path, fifo, short, spaced):
        with pytest.raises(UserError) as err:
            load_token(None, bad)
        message = str(err.value)
        assert message.startswith("--metrics-token-file") and "\n" not in message, message
        assert "qzq" not in message and "xyzzy" not in message
    with pytest.raises(UserError, match=TOKEN_ENV) as err:
        load_token("short-one", None)
    assert "short-one" not in str(err.value)
    with pytest.raises(UserError, match="both set"):
        load_token(TOKEN, f)


# --- the ASGI app in-process ---------------------------------------------------------------------


@asynccontextmanager
async def running(tmp_path: Path, token: str | None) -> AsyncIterator[Gateway]:
    gw = Gateway(GatewayDB(f"sqlite:///{tmp_path / 'usage.db'}"), Router([], None, use_registry=False),
                 GatewayConfig(metrics_token=SecretStr(token) if token else None))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


def client(gw: Gateway, peer: tuple[str, int]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=gw.app, client=peer), base_url="http://gateway")


def _error(r: httpx.Response, status: int, code: str, kind: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["type"] == kind, body
    assert "roost_gateway" not in r.text
    return str(body["error"]["message"])


def test_without_a_token_the_tailnet_gets_403_and_a_bare_health(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path, None) as gw:
            async with client(gw, TAILNET) as remote:
                message = _error(await remote.get("/metrics"), 403, "metrics_local_only", "permission_error")
                assert "this host only" in message and TOKEN_ENV in message
                health = await remote.get("/health")
                assert health.status_code == 200 and health.json() == {"status": "ok"}
                # a token sent where none is configured changes nothing
                sent = await remote.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
                assert sent.status_code == 403
            for peer in (LOOPBACK, ("::1", 5557), ("::ffff:127.0.0.1", 5558), ("127.0.0.53", 5559)):
                async with client(gw, peer) as local:
                    metrics = await local.get("/metrics")
                    assert metrics.status_code == 200 and "roost_gateway_usage_pending_rows" in metrics.text, peer
                    detail = (await local.get("/health")).json()
                    assert set(detail) == DETAILS and detail["status"] == "ok" and detail["backends"] == 0, detail

    asyncio.run(go())


def test_with_a_token_every_client_needs_it(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(tmp_path, TOKEN) as gw:
            for peer in (TAILNET, LOOPBACK):
                async with client(gw, peer) as c:
                    refused = await c.get("/metrics")
                    message = _error(refused, 401, "invalid_metrics_token", "authentication_error")
                    assert "Bearer" in message and refused.headers["www-authenticate"] == "Bearer"
                    wrong = await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN[:-2]}xx"})
                    _error(wrong, 401, "invalid_metrics_token", "authentication_error")
                    assert (await c.get("/health")).json() == {"status": "ok"}
                    auth = {"Authorization": f"Bearer {TOKEN}"}
                    ok = await c.get("/metrics", headers=auth)
                    assert ok.status_code == 200 and "roost_gateway_usage_pending_rows" in ok.text
                    assert TOKEN not in ok.text
                    assert set((await c.get("/health", headers=auth)).json()) == DETAILS

    asyncio.run(go())


def test_a_request_without_a_known_client_address_is_not_loopback(tmp_path: Path) -> None:
    """A server that gives no client address (a Unix socket) is treated as remote."""
    async def go() -> None:
        async with running(tmp_path, None) as gw:
            sent: list[dict[str, object]] = []

            async def receive() -> dict[str, object]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: dict[str, object]) -> None:
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                     "scheme": "http", "path": "/metrics", "raw_path": b"/metrics", "query_string": b"",
                     "root_path": "", "headers": [(b"host", b"gateway")], "client": None, "server": None}
            await gw.app(scope, receive, send)  # type: ignore[arg-type]
            assert sent[0]["status"] == 403

    asyncio.run(go())


# --- roost gateway serve -------------------------------------------------------------------------


def _arguments(gw: GatewayProcess) -> bytes:
    assert gw.proc is not None
    return Path(f"/proc/{gw.proc.pid}/cmdline").read_bytes()


def _scan(gw: GatewayProcess, arguments: bytes) -> None:
    """The token (as it is, URL-, JSON- or base64-encoded) in no line the stopped gateway printed,
    nor in its arguments."""
    scan = SecretScan({"metrics token": TOKEN})
    scan.text("gateway log", str(gw.log_path), gw.log())
    scan.blob("process arguments", "cmdline", arguments)
    assert "listening on" in gw.log() and not scan.hits, scan.report()


def test_serve_with_the_token_in_the_environment(backend: Synthetic, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'usage.db'}"
    key = add_key(db, "metrics-reader", "user")
    gw = GatewayProcess(db, [backend.base_url], log_path=tmp_path / "gw.log", env={TOKEN_ENV: TOKEN}).start()
    try:
        # some traffic, so the exposition names a key
        r = httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                       json={"model": "synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                       timeout=30)
        assert r.status_code == 200, r.text
        refused = httpx.get(f"{gw.url}/metrics", timeout=10)  # from 127.0.0.1: the token is needed all the same
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_metrics_token"
        assert "metrics-reader" not in refused.text
        wrong = httpx.get(f"{gw.url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert wrong.status_code == 401  # a gateway key is not the metrics token
        ok = httpx.get(f"{gw.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert ok.status_code == 200 and 'key="metrics-reader"' in ok.text
        assert httpx.get(f"{gw.url}/health", timeout=10).json() == {"status": "ok"}
        detail = httpx.get(f"{gw.url}/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
        assert set(detail) == DETAILS and detail["models"] == ["synthetic"] and detail["keys"] >= 1, detail
        arguments = _arguments(gw)
    finally:
        gw.stop()
    _scan(gw, arguments)


def test_serve_with_a_token_file(backend: Synthetic, tmp_path: Path) -> None:
    token_file = tmp_path / "metrics-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    gw = GatewayProcess(f"sqlite:///{tmp_path / 'usage.db'}", [backend.base_url], log_path=tmp_path / "gw.log",
                        extra=["--metrics-token-file", str(token_file)]).start()
    try:
        assert httpx.get(f"{gw.url}/metrics", timeout=10).status_code == 401
        assert httpx.get(f"{gw.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200
        assert httpx.get(f"{gw.url}/health", timeout=10).json() == {"status": "ok"}
        arguments = _arguments(gw)
    finally:
        gw.stop()
    _scan(gw, arguments)


def test_serve_without_a_token_serves_its_own_host(backend: Synthetic, tmp_path: Path) -> None:
    gw = GatewayProcess(f"sqlite:///{tmp_path / 'usage.db'}", [backend.base_url], log_path=tmp_path / "gw.log").start()
    try:
        assert httpx.get(f"{gw.url}/metrics", timeout=10).status_code == 200  # 127.0.0.1: what Prometheus does
        assert set(httpx.get(f"{gw.url}/health", timeout=10).json()) == DETAILS
    finally:
        gw.stop()


def test_serve_refuses_a_bad_token_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'usage.db'}", "--no-registry", "--backend", "http://127.0.0.1:9"]
    good = tmp_path / "token"
    good.write_text(TOKEN)
    cases: list[tuple[list[str], str | None, str]] = [
        (["--metrics-token-file", str(tmp_path / "nope")], None, "--metrics-token-file"),
        (["--metrics-token-file", str(tmp_path)], None, "--metrics-token-file"),
        (["--metrics-token-file", str(good)], TOKEN, "both set"),
        ([], "too-short-a", TOKEN_ENV),
    ]
    for extra, env, needle in cases:
        if env is None:
            monkeypatch.delenv(TOKEN_ENV, raising=False)
        else:
            monkeypatch.setenv(TOKEN_ENV, env)
        code, out, err = run_roost(capsys, monkeypatch, "gateway", "serve", *db, *extra)
        assert_one_line_error(code, err, needle)
        assert TOKEN not in err + out and "too-short-a" not in err + out
