"""The door clients use: whether the metering gateway fronts a kept server, and roost's way through it.

A landing that keeps its server registers it for the gateway (``roost.gateway.registry``); then its
benchmark and evaluations also go through the gateway, as every client does. :func:`open_door`
finds the gateway (``gateway_url`` on the host profile, ``ROOST_GATEWAY_URL`` on the worker over
it), issues the run's own key (``roost.gateway.bench_key``) and waits until the gateway routes the
served model; any reason it cannot comes back as one line for the report, never as a failure: the
direct measurement stands on its own.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx
from pydantic import SecretStr

from roost.errors import UserError
from roost.gateway import bench_key
from roost.gateway.db import default_db_url, display_db_url
from roost.settings import ROOST_GATEWAY_URL, environment
from roost.vllm.client import VllmClient, display_url, normalize_base_url, run_sync

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where ``roost gateway serve``/``install`` listens by default, as the worker on the same host reaches it."""


@dataclass
class Door:
    """The way through the gateway for one run: its URL and the run's key (revoked by :func:`close_door`)."""

    url: str
    key: SecretStr = field(repr=False)
    key_name: str
    db_url: str
    opened_at: float

    @property
    def display(self) -> str:
        return display_url(self.url)


def gateway_url(host_value: str) -> str:
    """The gateway's URL in effect: ``ROOST_GATEWAY_URL`` when set (empty: none), else the host's; a
    UserError naming the setting when it is not an http(s) URL."""
    env = environment().roost_gateway_url
    value, source = (env, ROOST_GATEWAY_URL) if env is not None else (host_value, "gateway_url")
    if not value.strip():
        return ""
    try:
        return normalize_base_url(value)
    except UserError:
        raise UserError(f"{source} {value[:80]!r}: give the gateway's URL, e.g. {DEFAULT_URL}") from None


async def _routed(url: str, key: SecretStr, model: str, wait_s: float) -> str | None:
    """None once the gateway lists ``model`` to ``key``; else why not (after ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    why = ""
    async with VllmClient(url, model, api_key=key.get_secret_value(), connect_timeout_s=3.0) as client:
        while True:
            try:
                answer = await client.models(timeout_s=5.0)
            except httpx.HTTPError as exc:
                return f"no gateway answers at {display_url(url)} ({type(exc).__name__})"
            if answer.status_code in (401, 403):
                why = (f"the gateway at {display_url(url)} refused the key roost issued in "
                       f"{display_db_url(bench_key_db())}: the worker and the gateway use different databases "
                       "(give both the same ROOST_GATEWAY_DB)")
            elif answer.status_code != 200 or answer.problem:
                return (f"{display_url(url)} answered /v1/models with HTTP {answer.status_code}"
                        f"{': ' + answer.problem if answer.problem else ''}: is it roost's gateway?")
            elif model in answer.ids:
                return None
            else:
                why = f"the gateway at {display_url(url)} does not route {model!r} yet (it lists {answer.listing()})"
            if time.monotonic() >= deadline:
                return why
            await asyncio.sleep(0.5)


def bench_key_db() -> str:
    """The gateway's database as this worker reaches it (``ROOST_GATEWAY_DB``, else roost's home)."""
    return default_db_url()


def open_door(host_gateway_url: str, host: str, model: str, wait_s: float = 30.0) -> Door | str:
    """The door for a run on ``host`` serving ``model``, or one line saying why there is none."""
    try:
        url = gateway_url(host_gateway_url)
    except UserError as exc:  # the worker's ROOST_GATEWAY_URL: said in the report, the landing goes on
        return str(exc)
    if not url:
        return "no gateway configured (gateway_url on the host profile, or ROOST_GATEWAY_URL)"
    try:
        run_sync(lambda: _reachable(url))
    except httpx.HTTPError as exc:
        return (f"no gateway answers at {display_url(url)} ({type(exc).__name__}): `roost gateway install` "
                "starts one; gateway_url on the host profile names another")
    db_url, name = bench_key_db(), bench_key.key_name(host)
    try:
        key = bench_key.issue(db_url, name)
    except UserError as exc:
        return f"cannot issue roost's benchmark key: {exc}"
    opened = time.time()
    why = run_sync(lambda: _routed(url, key, model, wait_s))
    if why is not None:
        close_door(Door(url, key, name, db_url, opened))
        return why
    return Door(url, key, name, db_url, opened)


async def _reachable(url: str) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=3.0)) as client:
        await client.get(f"{url}/health")


def close_door(door: Door) -> None:
    """Revoke the run's key (its usage rows stay)."""
    bench_key.revoke(door.db_url, door.key_name)
