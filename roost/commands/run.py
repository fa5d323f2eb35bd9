"""``roost run``: the whole pipeline (download -> audit -> build -> serve -> health -> bench -> report)."""

from __future__ import annotations

import os
from typing import Annotated, Any, cast, get_args

import typer

from roost import catalogue as C
from roost.commands._common import echo_json, user_errors
from roost.errors import UserError
from roost.headline import headline_rows
from roost.hosts import get_host
from roost.net import require_free_port
from roost.profiles import ModelProfile, get_profile
from roost.records import RunRecord
from roost.serve.base import RestartPolicy, check_vllm_args


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help="Run the land pipeline. With no arguments: the embedded local default (a tiny model generated "
        "on the spot, served from a local Hub mirror by a real vLLM on this CPU).",
    )(user_errors(run))


def run(
    profile: Annotated[str, typer.Option(help="Model profile: local, ornith-9b, ornith-35b, ornith-1.5-35b-a3b-nvfp4.")] = "local",
    revision: Annotated[str | None, typer.Option(help="Branch, tag or commit (default: the profile's).")] = None,
    host: Annotated[str | None, typer.Option(help="Host profile to serve on (default: the profile's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port for the vLLM server (default: a free one).")] = None,
    vllm_arg: Annotated[list[str] | None, typer.Option(
        "--vllm-arg", help="An extra vLLM argument after the plan's (repeatable; write it as --vllm-arg=--enforce-eager "
        "or --vllm-arg=--max-num-seqs=8). Keys never go here: VLLM_API_KEY or the Secret block.")] = None,
    keep_serving: Annotated[bool, typer.Option("--keep-serving", help="Leave the server running after the run.")] = False,
    restart_policy: Annotated[str, typer.Option(
        "--restart-policy", help="Docker restart policy of the server container: no, always, unless-stopped, "
        "on-failure (with --keep-serving, unless-stopped keeps it up across reboots).")] = "no",
    notify: Annotated[bool, typer.Option("--notify/--no-notify", help="Send Slack notifications if configured.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run record as JSON.")] = False,
) -> None:
    if os.environ.get("PREFECT_API_URL"):  # saved model-profile / roost-host documents count too
        prof = _saved_or_builtin(profile, host)
    else:  # unknown names fail here, before a temporary Prefect server starts
        prof = get_profile(profile)
        get_host(host or prof.host)
    if port is not None:
        require_free_port(port)
    if restart_policy not in get_args(RestartPolicy):
        raise UserError(f"--restart-policy {restart_policy!r}: choose one of {', '.join(get_args(RestartPolicy))}")
    overrides = list(vllm_arg or [])
    check_vllm_args(overrides, source="--vllm-arg")

    # Without PREFECT_API_URL Prefect starts a temporary local server on the default SQLite database;
    # on a busy 2-core machine it needs longer than Prefect's default 20 s to come up.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # Its telemetry heartbeat sends usage data off the machine, and on a brand-new database it races
    # its own first insert and prints an SQLAlchemy traceback; roost runs never need it.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect and the flows load only when a run starts: every `roost` command imports this module.
    from flows.land import land

    record = land(profile=profile, revision=revision, host=host, vllm_overrides=overrides or None, port=port,
                  keep_serving=keep_serving, notify=notify, restart_policy=cast(RestartPolicy, restart_policy))
    if as_json:
        echo_json(record)
        return
    typer.echo(_summary(record))


def _saved_or_builtin(profile: str, host: str | None) -> ModelProfile:
    """The profile (and check the host) as the flow will resolve them, from the Prefect server's blocks."""
    import httpx

    from blocks.resolve import load_host, load_profile  # Prefect's client, only when PREFECT_API_URL is set

    try:
        prof = load_profile(profile)
        load_host(host or prof.host)
    except (httpx.HTTPError, OSError, RuntimeError) as exc:
        raise UserError(f"cannot reach the Prefect API at {os.environ['PREFECT_API_URL']} ({type(exc).__name__}): "
                        "start the server (prefect server start) or unset PREFECT_API_URL") from None
    return prof


def _summary(data: dict[str, Any]) -> str:
    """The run as a few lines: the headline rows every output shows, one line per point, the stages."""
    record = RunRecord.model_validate(data)
    meta = record.meta
    lines = [f"roost: landed {meta.repo_id}@{meta.commit[:12]} on {meta.host}"]
    lines += [f"  {r.label:<34} {r.text}" for r in headline_rows(record) if r.value is not None]
    for p in record.points:
        lines.append(
            f"  {p.kind:<13} prompt {p.prompt_tokens:>6} x{p.concurrency:<3} "
            f"{C.TTFT.label} {C.TTFT.format(p.ttft_s.median)}  {C.DECODE.label} {C.DECODE.format(p.decode_tok_s.median)}"
            f"  aggregate {C.OUTPUT_THROUGHPUT.format(p.output_tok_s.median)}"
        )
    for s in record.stages:
        lines.append(f"  stage {s.stage:<12} {s.seconds:7.1f} s  {s.status}{' (cached)' if s.cached else ''}")
    lines.append(f"report: {record.report_path}")
    return "\n".join(lines)
