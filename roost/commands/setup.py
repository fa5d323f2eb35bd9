"""``roost setup``: register roost on a Prefect server (blocks, work pool, queues, limits, deployments)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from roost.commands._common import echo_json, user_errors
from roost.errors import UserError


def register(app: typer.Typer) -> None:
    app.command(
        "setup",
        help="Register roost on the Prefect server at PREFECT_API_URL: block types and documents (hosts, model "
        "profiles; host documents earlier releases saved as spark-host are migrated to roost-host), the "
        "process work pool, one work queue and one serving concurrency limit per host, the zombie-run "
        "automation, the crash alert (from the roost-slack Slack block, when saved), the land / "
        "rebenchmark / audit deployments, and with two hosts or more the sweep's queue and deployment. "
        "Hosts: every saved roost-host block, this machine's cpu, and those named with --hosts. Prints the "
        "worker to start on each host. Idempotent: a second run changes nothing and says so.",
    )(user_errors(setup))


def setup(
    pool: Annotated[str | None, typer.Option(
        help="Work pool (process type) the workers poll. Default: roost, or roost-spark where an earlier "
             "release's roost-spark pool holds roost's deployments (kept so its workers keep getting runs).",
        show_default=False)] = None,
    hosts: Annotated[str | None, typer.Option(
        help="Comma-separated hosts to set up besides those that exist (saved roost-host blocks, and cpu): one "
             "work queue, limit and deployment set each (e.g. spark, or a saved roost-host block's name).")] = None,
    cron: Annotated[str, typer.Option(help="Schedule of the rebenchmark deployments (cron; 'off' for none).")]
        = "0 3 * * *",
    timezone: Annotated[str, typer.Option(help="Time zone of the cron schedule.")] = "UTC",
    source: Annotated[Path | None, typer.Option(help="Checkout the workers load the flows from (default: this one).",
                                                file_okay=False)] = None,
    zombie_after: Annotated[float, typer.Option(help="Seconds without a heartbeat before a run is marked crashed.")]
        = 90.0,
    reset_blocks: Annotated[bool, typer.Option("--reset-blocks", help="Revert edited built-in block documents.")]
        = False,
    store_vllm_api_key: Annotated[bool, typer.Option(
        "--store-vllm-api-key", help="Save $VLLM_API_KEY into the Secret block roost-vllm-api-key.")] = False,
    warm_fork: Annotated[bool, typer.Option(
        "--warm-fork", help="Job command: the warm fork client (scripts/warm_fork.py; a host without its server "
                            "runs the stock python -m prefect.engine).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    if pool is not None and not pool.strip():
        raise UserError("--pool is empty: name a work pool, e.g. --pool roost, or leave it out")
    host_list = [h.strip() for h in hosts.split(",") if h.strip()] if hosts is not None else []
    if hosts is not None and not host_list:
        raise UserError("--hosts is empty: name at least one host, e.g. --hosts spark, or leave it out")
    if source is not None and not (source / "flows" / "land.py").is_file():
        raise UserError(f"--source {source}: no flows/land.py there; point it at a roost checkout")
    if warm_fork and not ((source or Path(__file__).resolve().parents[2]) / "scripts" / "warm_fork.py").is_file():
        raise UserError("--warm-fork: the checkout has no scripts/warm_fork.py; update it or leave --warm-fork out")

    # imported when the command runs, not when the module is: it pulls in Prefect's client, workers,
    # deployments and events (4-6 s on the 2-core test machine), which the start of every other roost
    # command would pay (roost/cli.py imports every command module)
    from deployments.setup import setup as run_setup

    report = run_setup(pool, host_list, source=source.resolve() if source else None,
                       cron=None if cron.strip().lower() in ("off", "none", "") else cron, timezone=timezone,
                       zombie_after_s=zombie_after, reset_blocks=reset_blocks, store_api_key=store_vllm_api_key,
                       warm_fork=warm_fork)
    if as_json:
        echo_json(report.model_dump(mode="json") | {"changed": len(report.changed)})
        return
    for item in report.items:
        typer.echo(f"{item.status:<10} {item.kind:<18} {item.name}" + (f"  ({item.detail})" if item.detail else ""))
    typer.echo(f"work pool: {report.pool}" + (f" ({report.pool_note})" if report.pool_note else ""))
    typer.echo(f"hosts set up: {', '.join(report.hosts)}")
    for host, why in report.skipped_hosts.items():
        typer.echo(f"host skipped: {host}: {why}")
    typer.echo(report.crash_alerts)
    typer.echo(report.sweep)
    for host, command in zip(report.hosts, report.workers, strict=True):
        typer.echo(f"worker on {host}: {command}")
    n = len(report.changed)
    typer.echo(f"roost setup: {n} object(s) created, updated, migrated or removed on {report.api_url}" if n else
               f"roost setup: nothing to change on {report.api_url}")
