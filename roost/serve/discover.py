"""Which vLLM server roost is running on a host right now, found from roost's own records only.

- ``process`` backend: the state files ``start_process_server`` writes under
  ``$ROOST_HOME/servers/<host>-<pid>.json``; a file counts only while its process group is alive
  and its leader still runs vLLM's server (a recycled pid is not a server).
- ``docker`` backend: running containers labelled ``ai.roost.managed=true`` and
  ``ai.roost.host=<host>``; containers without roost's label are never considered.

Neither record holds the API key; ``api_key_ref`` only says where it can be found again.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Literal

from pydantic import BaseModel, Field

from roost.hosts import HostProfile
from roost.serve.process import _group_alive, _is_vllm, _state_dir


class ServingServer(BaseModel):
    """A vLLM server roost started that is still running."""

    host: str
    backend: Literal["process", "docker"]
    base_url: str
    served_model_name: str
    port: int
    started_at: dt.datetime | None = None
    pid: int | None = Field(default=None, description="Process group id (process backend).")
    container: str | None = Field(default=None, description="Container name (docker backend).")
    model_dir: str | None = None
    api_key_ref: str | None = Field(default=None, description="Where the key is: env, secret-block, none; None: unrecorded.")


def process_servers(host_name: str) -> list[ServingServer]:
    """Live process-backend servers recorded for ``host_name``, oldest first."""
    state_dir = _state_dir()
    found: list[ServingServer] = []
    if not state_dir.is_dir():
        return found
    for state_file in sorted(state_dir.glob(f"{host_name}-*.json")):
        try:
            state = json.loads(state_file.read_text())
            pid = int(state["pid"])
            port = int(state["port"])
        except (ValueError, KeyError, TypeError, OSError):
            continue
        if state.get("host", host_name) != host_name or not (_group_alive(pid) and _is_vllm(pid)):
            continue
        started = state.get("started_at")
        found.append(ServingServer(
            host=host_name, backend="process", pid=pid, port=port,
            base_url=str(state.get("base_url") or f"http://127.0.0.1:{port}"),
            served_model_name=str(state.get("model", "")),
            started_at=dt.datetime.fromtimestamp(float(started), dt.UTC) if started is not None else None,
            model_dir=state.get("model_dir"), api_key_ref=state.get("api_key_ref"),
        ))
    found.sort(key=lambda s: s.started_at or dt.datetime.min.replace(tzinfo=dt.UTC))
    return found


def docker_servers(host: HostProfile) -> list[ServingServer]:
    """Running roost-managed containers on ``host``'s Docker engine, oldest first."""
    from roost.serve.docker_backend import (
        LABEL_MODEL,
        LABEL_PORT,
        MODEL_MOUNT,
        docker_client,
        roost_containers,
    )
    from roost.serve.phases import parse_timestamp

    client = docker_client(host, timeout=30)
    try:
        containers = roost_containers(client, host.name, all=False)
        addr = next((a for a in host.bind_addrs if a not in ("0.0.0.0", "::")), "127.0.0.1")
        found: list[ServingServer] = []
        for c in containers:
            labels = c.labels or {}
            try:
                port = int(labels[LABEL_PORT])
            except (KeyError, ValueError):
                continue
            state = c.attrs.get("State", {})
            mounts = [m.get("Source") for m in c.attrs.get("Mounts", []) if m.get("Destination") == MODEL_MOUNT]
            started = state.get("StartedAt")
            found.append(ServingServer(
                host=host.name, backend="docker", container=str(c.name), port=port,
                base_url=f"http://{addr}:{port}", served_model_name=labels.get(LABEL_MODEL, ""),
                started_at=parse_timestamp(str(started)) if started else None,
                model_dir=mounts[0] if mounts else None,
            ))
    finally:
        client.close()
    found.sort(key=lambda s: s.started_at or dt.datetime.min.replace(tzinfo=dt.UTC))
    return found


def serving_on(host: HostProfile) -> list[ServingServer]:
    """The servers roost runs on ``host`` with the host's backend, oldest first (normally zero or one)."""
    return process_servers(host.name) if host.backend == "process" else docker_servers(host)


ProbeResult = Literal["ok", "unauthorized", "wrong-model", "unreachable"]


def probe(server: ServingServer, api_key: str | None, timeout_s: float = 5.0) -> ProbeResult:
    """Does ``server`` answer ``/v1/models`` with ``api_key`` and list its served model name?"""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{server.base_url}/v1/models", headers=headers, timeout=timeout_s)
    except httpx.HTTPError:
        return "unreachable"
    if r.status_code in (401, 403):
        return "unauthorized"
    if r.status_code != 200:
        return "unreachable"
    try:
        ids = {m.get("id") for m in r.json().get("data", [])}
    except ValueError:
        return "unreachable"
    return "ok" if server.served_model_name in ids else "wrong-model"
