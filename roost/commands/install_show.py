"""``roost install --dry-run``: every unit and environment file the box would write (secrets as ``********``),
every command it would run and every container it would start, in the install's order; nothing is written."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

import typer

from roost.commands._common import echo_json
from roost.install.layout import (
    ADMIN_KEY_NAME,
    GATEWAY_UNIT,
    MASK,
    PG_DATABASE,
    PG_ROLE,
    PREFECT_UNIT,
    RESULTS_UNIT,
    Box,
    BoxFile,
    gateway_files,
    monitor_up_args,
    prefect_server_files,
    results_files,
    worker_command,
)
from roost.settings import ROOST_WORKER_ENV


def worker_dry_run(box: Box) -> str:
    """``scripts/install-worker --dry-run`` for the box: the worker's unit and environment file."""
    from roost.install.box import service_env

    cmd = [*worker_command(box, "roost"), "--dry-run"]
    env = service_env(box, **{ROOST_WORKER_ENV: str(box.env_dir)})
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(install-worker --dry-run did not run: {exc})"
    return proc.stdout if proc.returncode == 0 else f"(install-worker --dry-run failed: {proc.stderr.strip()[-300:]})"


def shown(cmd: list[str]) -> str:
    return shlex.join(cmd)


def _containers(box: Box) -> list[dict[str, str]]:
    from roost.install.box import up_options
    from roost.monitor import containers

    opts = up_options(box)
    out = [{"name": containers.PROMETHEUS_NAME, "image": opts.prometheus_image, "listen": box.ports.prometheus},
           {"name": containers.ALERTMANAGER_NAME, "image": opts.alertmanager_image, "listen": box.ports.alertmanager}]
    if opts.grafana:
        out.append({"name": containers.GRAFANA_NAME, "image": opts.grafana_image, "listen": f"0.0.0.0:{opts.grafana_port}"})
    return out


def plan(box: Box) -> dict[str, Any]:
    """What an install of ``box`` writes, runs and starts, in order (``files`` and ``commands`` interleave
    as ``order``)."""
    order: list[tuple[str, Any]] = [("command", f"roost doctor --host {box.host} (every check but prefect-api)")]
    if box.postgres:
        order += [("command", "apt-get install -y postgresql (when missing); systemctl enable --now postgresql"),
                  ("command", f"psql (as postgres, SQL on stdin): CREATE ROLE {PG_ROLE} LOGIN PASSWORD '{MASK}'; "
                              f"CREATE DATABASE {PG_DATABASE} OWNER {PG_ROLE}")]
    order += [("file", f) for f in prefect_server_files(box, MASK)]
    order += [("command", f"systemctl daemon-reload; systemctl enable --now {PREFECT_UNIT}; wait for "
                          f"{box.prefect_api}/health"),
              ("command", f"VLLM_API_KEY={MASK} roost setup --hosts {box.host} --store-vllm-api-key --json "
                          "(the key: the gateway's environment file's, else the Secret block's, else made now)"),
              ("command", f"roost-host/{box.host}: results_url {box.results_url}, gateway_url {box.gateway_local}"),
              ("command", f"ROOST_WORKER_ENV={box.env_dir} {shown(worker_command(box, '<the pool setup names>'))}")]
    order += [("command", f"roost gateway key add {ADMIN_KEY_NAME} --kind user --db {box.gateway_db} "
                          "(when there is none; printed once)")]
    order += [("file", f) for f in gateway_files(box, MASK)]
    order += [("command", f"systemctl enable --now {GATEWAY_UNIT}")]
    order += [("file", f) for f in results_files(box)]
    order += [("command", f"systemctl enable --now {RESULTS_UNIT}"),
              ("command", f"roost {shown(monitor_up_args(box))} (unless its containers run as asked)")]
    return {"order": order, "containers": _containers(box)}


def dry_run(box: Box, *, as_json: bool) -> None:
    p = plan(box)
    worker = worker_dry_run(box)
    if as_json:
        files = [{"path": str(f.path), "mode": f"{f.mode:o}", "text": f.shown()}
                 for kind, f in p["order"] if kind == "file"]
        echo_json({"host": box.host, "address": box.address, "user": box.user, "env": str(box.env_dir), "files": files,
                   "commands": [c for kind, c in p["order"] if kind == "command"], "worker": worker,
                   "containers": p["containers"]})
        return
    typer.echo(f"roost install --dry-run: host {box.host}, services run as {box.user}, address {box.address}, "
               f"environment {box.env_dir}; nothing is written or started")
    for kind, item in p["order"]:
        if kind == "file":
            f: BoxFile = item
            typer.echo(f"\nwould write {f.path} (mode {f.mode:o}):\n{f.shown().rstrip()}")
        else:
            typer.echo(f"\nwould run: {item}")
        if kind == "command" and "install-worker" in item:
            typer.echo("  its dry run:\n" + "\n".join(f"    {line}" for line in worker.rstrip().splitlines()))
    typer.echo("\nwould start containers (restart unless-stopped): "
               + ", ".join(f"{c['name']} ({c['image']}, {c['listen']})" for c in p["containers"]))
