"""``roost gateway``: the metering gateway in front of every landed vLLM server (``roost/gateway/``).

- ``roost gateway serve [--host ADDR] [--port 8080] [--backend URL ...] [--db URL]
  [--metrics-token-file PATH]``: the OpenAI-compatible proxy (``/v1/chat/completions``,
  ``/v1/completions``, ``/v1/embeddings``, ``/v1/models``, ``/health``, ``/metrics``). The upstream
  key is ``VLLM_API_KEY``, else roost's Secret block ``roost-vllm-api-key`` (read when
  ``PREFECT_API_URL`` is set). ``/metrics`` and ``/health``'s details are served to this host's
  loopback only, or, with a token (``ROOST_GATEWAY_METRICS_TOKEN``, or ``--metrics-token-file PATH``;
  the token itself never goes on a command line), to any client sending ``Authorization: Bearer
  <token>`` (``roost/gateway/access.py``); ``install`` carries the variable into its environment file.
  Connection limits (``roost/gateway/connections.py``): ``--max-header-kb`` (64; 431),
  ``--header-timeout`` (10 s; 408), ``--keep-alive-timeout`` (30 s), ``--max-connections`` (4096) and
  ``--max-connections-per-client`` (512; 503). ``--metrics-users N`` (or ``ROOST_GATEWAY_METRICS_USERS``;
  50): forwarded users labelled by name in ``/metrics``' per-user series, later ones as ``other``; 0: none.
- ``roost gateway key add NAME [--kind user|device|app] [--trusted] [--json]``: prints the key once
  (JSON: ``name``, ``kind``, ``key``, ``trusted``); ``key list [--json]`` (never the keys: ``name``,
  ``kind``, ``trusted``, ``created_at``, ``revoked``, ``revoked_at``, ``note``); ``key revoke NAME``;
  ``key sync-tailscale [--status-json FILE] [--csv OUT] [--json]``: a device key per tailnet node.
- ``roost gateway usage [--since T] [--by key|kind|model|day|user] [--json]``: rows ``{key, kind,
  model, requests, prompt_tokens, completion_tokens}`` for ``--by key`` (the grouping column(s)
  otherwise).
- ``roost gateway install``: the systemd user unit ``roost-gateway.service``.

Every command takes ``--db URL`` (default ``ROOST_GATEWAY_DB`` or SQLite under roost's home).
Exit 0 success, 2 unusable input (one line), 1 a failure at run time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from roost.commands._common import echo_json, user_errors
from roost.errors import UserError
from roost.settings import (
    PREFECT_API_KEY,
    PREFECT_API_URL,
    ROOST_GATEWAY_BACKENDS_DIR,
    ROOST_GATEWAY_DB,
    ROOST_GATEWAY_METRICS_TOKEN,
    ROOST_GATEWAY_METRICS_USERS,
    ROOST_HOME,
    VLLM_API_KEY,
    environment,
    values_of,
)

if TYPE_CHECKING:
    from roost.gateway.db import GatewayDB

T = TypeVar("T")

DbOpt = Annotated[str | None, typer.Option("--db", help="sqlite:///PATH or postgresql://USER@HOST/DB "
                                           "(default: ROOST_GATEWAY_DB, else SQLite under roost's home).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _with_db(url: str | None, work: Callable[[GatewayDB], Awaitable[T]]) -> T:
    """Run ``work`` on the gateway database at ``url`` (default: ``default_db_url()``), then close it."""
    from roost.gateway.db import GatewayDB, default_db_url

    async def go() -> T:
        store = await GatewayDB(url or default_db_url()).connect()
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(go())


def upstream_key() -> str | None:
    """The key the gateway sends vLLM: ``VLLM_API_KEY``, else the Secret block (with a Prefect API)."""
    env = environment()
    if env.vllm_api_key:
        return env.vllm_api_key
    if not env.prefect_api_url:
        return None
    from blocks.resolve import load_vllm_api_key

    key = load_vllm_api_key()
    return key.get_secret_value() if key is not None else None


# --- serve -------------------------------------------------------------------------------------


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on (0.0.0.0: the tailnet and LAN).")] = "0.0.0.0",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8080,
    backend: Annotated[list[str] | None, typer.Option("--backend", help="A server's base URL (repeatable), "
                                                      "e.g. http://127.0.0.1:8004, with or without /v1.")] = None,
    db: DbOpt = None,
    registry: Annotated[bool, typer.Option("--registry/--no-registry", help="Also route to the servers landings keep "
                                           "serving on this host.")] = True,
    poll_interval: Annotated[float, typer.Option("--poll-interval", min=0.1, max=3600,
                                                 help="Seconds between /v1/models polls.")] = 5.0,
    max_body_mb: Annotated[float, typer.Option("--max-body-mb", min=0.001, max=4096,
                                               help="Largest request body (MiB).")] = 32.0,
    client_timeout: Annotated[float, typer.Option("--client-timeout", min=0.1, max=86400,
                                                  help="Cut a client that reads nothing for this many seconds.")] = 60.0,
    body_timeout: Annotated[float, typer.Option("--body-timeout", min=0.1, max=86400,
                                                help="Seconds a client has to send its request body.")] = 30.0,
    trusted_header: Annotated[str, typer.Option("--trusted-header", help="Header a trusted key's front end forwards "
                                                "its user's e-mail in (Open WebUI).")] = "X-OpenWebUI-User-Email",
    tokenize_after: Annotated[float, typer.Option("--tokenize-after", min=0, max=3600, help="Count the prompt "
                                                  "with /tokenize at request start (0), or only when vLLM's own count "
                                                  "has not come this many seconds after the send.")] = 0.0,
    max_header_kb: Annotated[int, typer.Option("--max-header-kb", min=1, max=1024, help="Largest request line "
                                               "and headers of one request (KiB); 431 above.")] = 64,
    header_timeout: Annotated[float, typer.Option("--header-timeout", min=0.1, max=3600, help="Seconds a "
                                                  "connection has to send a complete request head (from its "
                                                  "accept, or the first byte of its next request); 408 or close "
                                                  "after.")] = 10.0,
    keep_alive_timeout: Annotated[float, typer.Option("--keep-alive-timeout", min=0.1, max=3600,
                                                      help="Close a kept-alive connection idle this many "
                                                      "seconds.")] = 30.0,
    max_connections: Annotated[int, typer.Option("--max-connections", min=1, max=1_000_000, help="Open client "
                                                 "connections in all; 503 above (fewer when the open-files "
                                                 "limit cannot hold them).")] = 4096,
    max_connections_per_client: Annotated[int, typer.Option("--max-connections-per-client", min=1, max=1_000_000,
                                                            help="Open connections per client IP address; 503 "
                                                            "above.")] = 512,
    quiet: Annotated[bool, typer.Option("--quiet", help="No line per request on stderr.")] = False,
    metrics_token_file: Annotated[Path | None, typer.Option(
        "--metrics-token-file", help="A file holding the bearer token /metrics (and /health's details) require "
        "from every client; or ROOST_GATEWAY_METRICS_TOKEN. Neither: served to this host's loopback only.")] = None,
    metrics_users: Annotated[int | None, typer.Option(
        "--metrics-users", min=0, max=100_000, help="Distinct forwarded users (a trusted front end's e-mails) "
        "labelled by name in /metrics' per-user series, the first seen; later ones are counted as `other`, and 0 "
        "labels none (no e-mail in /metrics). Default: ROOST_GATEWAY_METRICS_USERS, else 50.")] = None,
) -> None:
    """Run the metering gateway in the foreground (Ctrl-C or SIGTERM stops it)."""
    from roost.gateway.access import load_token
    from roost.gateway.config import GatewayConfig
    from roost.gateway.connections import ConnectionLimits
    from roost.gateway.db import default_db_url
    from roost.gateway.server import build
    from roost.gateway.server import serve as run_server
    from roost.vllm.client import normalize_base_url

    urls = [normalize_base_url(u) for u in backend or []]
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", trusted_header):
        raise UserError(f"--trusted-header {trusted_header[:40]!r}: a header name (letters, digits, -)")
    config = GatewayConfig(max_body_bytes=int(max_body_mb * 1024 * 1024), client_timeout_s=client_timeout,
                           body_timeout_s=body_timeout, trusted_user_header=trusted_header.lower(),
                           tokenize_after_s=tokenize_after, metrics_users=_metrics_users(metrics_users),
                           metrics_token=load_token(environment().roost_gateway_metrics_token, metrics_token_file))
    gw = build(urls, db or default_db_url(), upstream_key(), config, poll_interval_s=poll_interval,
               use_registry=registry)
    if not urls and not registry:
        raise UserError("no backends: pass --backend URL or leave --registry on")
    limits = ConnectionLimits(max_header_bytes=max_header_kb * 1024, header_timeout_s=header_timeout,
                              keep_alive_s=keep_alive_timeout, max_connections=max_connections,
                              max_connections_per_client=max_connections_per_client)
    run_server(gw, host, port, access_log=not quiet, limits=limits)


def _metrics_users(flag: int | None) -> int:
    """``--metrics-users``, else ``ROOST_GATEWAY_METRICS_USERS``, else the default (50)."""
    from roost.gateway.metrics import DEFAULT_METRICS_USERS

    if flag is not None:
        return flag
    value = environment().roost_gateway_metrics_users
    if value is None or not value.strip():
        return DEFAULT_METRICS_USERS
    if not re.fullmatch(r"[0-9]{1,6}", value.strip()) or int(value) > 100_000:
        raise UserError(f"{ROOST_GATEWAY_METRICS_USERS}={value[:20]!r}: a number of users, 0 to 100000")
    return int(value)


# --- keys --------------------------------------------------------------------------------------


def key_add(
    name: Annotated[str, typer.Argument(help="Who the key is for: a user, a device or an app.")],
    kind: Annotated[str, typer.Option("--kind", help="user, device or app.")] = "user",
    trusted: Annotated[bool, typer.Option("--trusted", help="Its front end may forward its user's e-mail "
                                          "(Open WebUI) for per-user attribution.")] = False,
    note: Annotated[str, typer.Option("--note", help="A note shown by `key list`.")] = "",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a key and print it (the only time it is shown)."""
    from roost.gateway.keys import check_kind, check_name

    check_name(name)
    check_kind(kind)
    key = _with_db(db, lambda store: store.add_key(name, kind, trusted=trusted, note=note))
    if as_json:
        echo_json({"name": name, "kind": kind, "key": key, "trusted": trusted})
    else:
        typer.echo(key)
        typer.echo(f"key for {kind} {name!r} created{' (trusted)' if trusted else ''}: it is shown only now", err=True)


def key_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The keys (names, kinds, when made and revoked; never the keys)."""
    rows = _with_db(db, lambda store: store.list_keys())
    if as_json:
        echo_json(rows)
        return
    if not rows:
        typer.echo("no keys yet: roost gateway key add NAME", err=True)
        return
    for r in rows:
        made = dt.datetime.fromtimestamp(r["created_at"], dt.UTC).strftime("%Y-%m-%d %H:%M")
        state = "revoked" if r["revoked"] else "active"
        typer.echo(f"{r['name']:<32} {r['kind']:<7} {state:<8} {'trusted' if r['trusted'] else '':<8} {made}  {r['note']}")


def key_revoke(name: Annotated[str, typer.Argument(help="The key's name.")], db: DbOpt = None) -> None:
    """Revoke a key (running gateways refuse it within a second)."""
    done = _with_db(db, lambda store: store.revoke_key(name))
    typer.echo(f"revoked {name}" if done else f"{name} was already revoked", err=True)


def key_sync_tailscale(
    status_json: Annotated[Path | None, typer.Option("--status-json", help="A saved `tailscale status --json` "
                                                     "(default: run tailscale here).")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write the new keys here (mode 600) to hand out.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A device key for every tailnet node that has none yet."""
    from roost.gateway import tailscale

    status, source = tailscale.read_status(status_json)
    nodes = tailscale.nodes(status, source)

    async def sync(store: GatewayDB) -> list[dict[str, str]]:
        existing = await store.key_names()
        made = []
        for n in nodes:
            if n.name in existing:
                continue
            key = await store.add_key(n.name, "device", note=f"tailscale {n.dns_name or n.hostname}")
            made.append({"name": n.name, "kind": "device", "key": key, "hostname": n.hostname,
                         "tailscale_ip": n.ip, "dns_name": n.dns_name, "os": n.os})
        return made

    made = _with_db(db, sync)
    skipped = [n.name for n in nodes if n.name not in {m["name"] for m in made}]
    if csv_out is not None:
        tailscale.write_csv(csv_out, made)
    if as_json:
        echo_json({"created": [{k: v for k, v in m.items() if csv_out is None or k != "key"} for m in made],
                   "existing": skipped, "csv": str(csv_out) if csv_out else None})
        return
    for m in made:
        typer.echo(f"{m['name']},{m['key']}" if csv_out is None else m["name"])
    typer.echo(f"{len(made)} device key(s) created, {len(skipped)} node(s) already had one"
               + (f"; keys in {csv_out}" if csv_out else ""), err=True)


# --- usage -------------------------------------------------------------------------------------


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a duration back from now (``30m``, ``24h``, ``7d``) or an ISO date/time (UTC unless
    it says otherwise) -> Unix seconds."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        value = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        if value > 100 * 365 * 86400:
            raise UserError(f"--since {text[:40]!r}: more than a century back")
        return now - value
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(f"--since {text[:40]!r}: give a duration (30m, 24h, 7d) or a date (2026-12-01, "
                        "2026-12-01T08:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def usage(
    since: Annotated[str | None, typer.Option("--since", help="30m, 24h, 7d or a date/time (UTC).")] = None,
    by: Annotated[str, typer.Option("--by", help="key, kind, model, day or user.")] = "key",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Requests and tokens per key (or kind, model, day, user) from the usage database."""
    from roost.gateway.db import GROUPS

    if by not in GROUPS:
        raise UserError(f"--by {by[:30]!r}: use one of {', '.join(GROUPS)}")
    start = parse_since(since) if since else None
    rows = _with_db(db, lambda store: store.usage(since=start, by=by))  # type: ignore[arg-type]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        typer.echo("no usage recorded" + (f" since {since}" if since else ""), err=True)
        return
    cols = [c for c in rows[0] if c not in ("requests", "prompt_tokens", "completion_tokens")]
    header = [*cols, "requests", "prompt_tokens", "completion_tokens"]
    table = [header] + [[str(r.get(c) if r.get(c) is not None else "-") for c in header] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        typer.echo("  ".join(cell.rjust(w) if i >= len(cols) else cell.ljust(w)
                             for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


# --- install -----------------------------------------------------------------------------------


def install(
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port the gateway listens on.")] = 8080,
    host: Annotated[str, typer.Option("--host", help="Address it listens on.")] = "0.0.0.0",
    backend: Annotated[list[str] | None, typer.Option("--backend", help="A fixed backend (repeatable); landed "
                                                      "servers are found without it.")] = None,
    db: DbOpt = None,
    unit_dir: Annotated[Path | None, typer.Option("--unit-dir", help="Where the unit goes "
                                                  "(default ~/.config/systemd/user).")] = None,
    env_file: Annotated[Path | None, typer.Option("--env-file", help="Its settings (default "
                                                  "~/.config/roost/gateway.env, mode 600).")] = None,
    start: Annotated[bool, typer.Option("--start/--no-start", help="Enable and start it now.")] = True,
) -> None:
    """Install the gateway as the systemd user service roost-gateway (starts at boot)."""
    from roost.gateway import install as inst
    from roost.gateway.db import async_url, default_db_url
    from roost.gateway.registry import registry_dir
    from roost.settings import roost_home
    from roost.vllm.client import normalize_base_url

    url = db or default_db_url()
    async_url(url)  # refuse a bad URL now, not at boot
    args = ["--host", host, "--port", str(port), *[a for u in backend or [] for a in ("--backend", normalize_base_url(u))]]
    env = {ROOST_GATEWAY_DB: url, ROOST_HOME: str(roost_home()), ROOST_GATEWAY_BACKENDS_DIR: str(registry_dir())}
    env.update(values_of(VLLM_API_KEY, PREFECT_API_URL, PREFECT_API_KEY, ROOST_GATEWAY_METRICS_TOKEN,
                         ROOST_GATEWAY_METRICS_USERS))
    home = Path.home()
    done = inst.install(unit_dir or home / ".config" / "systemd" / "user",
                        env_file or home / ".config" / "roost" / "gateway.env", args, env, start=start)
    for line in done:
        typer.echo(line, err=True)
    if VLLM_API_KEY not in env and PREFECT_API_URL not in env:
        typer.echo("note: no VLLM_API_KEY or PREFECT_API_URL here: the gateway will send no upstream key; "
                   "set one in the environment file", err=True)


def register(app: typer.Typer) -> None:
    group = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                        help="The metering gateway: one door to every landed model, a key per user, device or app.")
    group.command("serve", help="Run the gateway (OpenAI-compatible, :8080).")(user_errors(serve))
    group.command("usage", help="Requests and tokens per key, kind, model, day or user.")(user_errors(usage))
    group.command("install", help="Install the gateway as a systemd user service.")(user_errors(install))
    keys = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                       help="Gateway keys: add, list, revoke, one per tailnet device.")
    keys.command("add", help="Create a key (printed once).")(user_errors(key_add))
    keys.command("list", help="The keys (never the keys themselves).")(user_errors(key_list))
    keys.command("revoke", help="Revoke a key.")(user_errors(key_revoke))
    keys.command("sync-tailscale", help="A device key per tailnet node.")(user_errors(key_sync_tailscale))
    group.add_typer(keys, name="key")
    app.add_typer(group, name="gateway")
