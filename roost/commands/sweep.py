"""``roost sweep``: land a profile with every combination of a grid of vLLM flags across hosts, and compare.

It runs the ``sweep`` flow here (``flows/sweep.py``) against the Prefect server at ``PREFECT_API_URL``;
the variants land through each host's ``land/<host>`` deployment on that host's worker (``roost setup``
first). ``--dry-run`` needs neither: it plans every variant from the Hub's headers and prints what would
be landed or refused (exit 1 when one is refused). Exit 0 when every variant was measured or refused by
its plan and at least one was measured, 1 when one is missing or failed or none was measured, 2 for
unusable input.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from roost.commands._common import echo_json, fail, user_errors
from roost.errors import UserError
from roost.settings import environment, log_roost_through_prefect


def register(app: typer.Typer) -> None:
    app.command(
        "sweep",
        help="Land a profile with every combination of --grid flags across hosts (each host one server at a "
        "time, hosts in parallel) and compare throughput, TTFT and decode per variant; the best one is named "
        "with its margin over the noise band. Variants measured already (same commit, arguments and image) are "
        "skipped. Needs PREFECT_API_URL and roost setup (the land/<host> deployments and their workers).",
    )(user_errors(sweep))


def sweep(
    profile: Annotated[str, typer.Option(help="Model profile to sweep (a built-in or a saved model-profile block).")],
    grid: Annotated[list[str], typer.Option(
        "--grid", help="An axis: FLAG=V1,V2,... (repeatable), e.g. --grid 'max-num-seqs=16,20,24' "
        "--grid 'max-num-batched-tokens=4096,8192'; on/off for a switch.")],
    hosts: Annotated[str | None, typer.Option(
        help="Comma-separated hosts (default: every host with a land deployment of the profile's kind).")] = None,
    revision: Annotated[str | None, typer.Option(help="Branch, tag or commit (default: the profile's).")] = None,
    objective: Annotated[str, typer.Option(
        help="What names the best variant: peak-output, decode or ttft.")] = "peak-output",
    evaluate: Annotated[bool, typer.Option("--evaluate/--no-evaluate",
                                           help="Run the profile's accuracy evaluations in every landing.")] = False,
    pickup_timeout: Annotated[float, typer.Option(
        help="Seconds a landing may wait for a worker before its host is left out.", min=1)] = 300.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan every variant from the Hub and print them; "
                                                            "nothing is landed.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    from roost.sweep.compare import OBJECTIVES
    from roost.sweep.grid import parse_grid, variants

    if objective not in OBJECTIVES:
        raise UserError(f"--objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    axes = parse_grid(grid)
    host_list = [h.strip() for h in hosts.split(",") if h.strip()] if hosts is not None else None
    if hosts is not None and not host_list:
        raise UserError("--hosts is empty: name at least one host, or leave it out")
    if dry_run:
        _dry_run(profile, [v.overrides for v in variants(axes)], host_list, revision, as_json)
        return
    if not environment().prefect_api_url:
        raise UserError("roost sweep lands each variant through the land/<host> deployments: set PREFECT_API_URL to "
                        "the Prefect server `roost setup` ran against (or use --dry-run to plan the variants)")
    prof, _ = _profile_and_host(profile, None)  # unknown names are refused before the flow starts
    for h in host_list or []:
        _profile_and_host(profile, h)
    log_roost_through_prefect()
    from flows.sweep import sweep as sweep_flow

    state: Any = sweep_flow(profile=prof.name, grid=grid, hosts=host_list, revision=revision, objective=objective,
                            evaluate=evaluate, pickup_timeout_s=pickup_timeout, return_state=True)
    data = state.result(raise_on_failure=False)
    if not isinstance(data, dict):  # the flow failed before it compared anything: its exception
        exc = data if isinstance(data, BaseException) else None
        raise fail(" ".join(str(exc or state.message or "the sweep ended without a result").split())[:500],
                   getattr(exc, "exit_code", 1))
    if as_json:
        echo_json(data)
    else:
        from pathlib import Path

        typer.echo(Path(data["report"]).read_text())
        typer.echo(f"report: {data['report']}")
    if state.is_failed():
        raise typer.Exit(1)


def _dry_run(profile: str, overrides: list[list[str]], hosts: list[str] | None, revision: str | None,
             as_json: bool) -> None:
    """Plan each variant from the Hub's headers (read once; no server, no download) and print it; exit 1
    when one is refused."""
    from roost.commands._target import audit_target
    from roost.plan.preflight import plan_checkpoint

    prof, host = _profile_and_host(profile, hosts[0] if hosts else None)
    if revision:
        prof = prof.model_copy(update={"revision": revision})
    audit = audit_target(None, prof, host)
    rows: list[dict[str, Any]] = []
    for ov in overrides:
        plan = plan_checkpoint(audit, host, prof.plan_inputs(ov))
        refusal = plan.refusal()
        rows.append({"overrides": ov, "vllm_args": plan.vllm_args, "refused": refusal[1] if refusal else None})
    if as_json:
        echo_json(rows)
    else:
        commit = (audit.commit or "")[:12]
        typer.echo(f"roost: sweep of {prof.name} on {host.name} planned from the Hub ({commit}): nothing landed")
        for r in rows:
            state = f"REFUSED: {r['refused']}" if r["refused"] else "would be landed"
            typer.echo(f"{' '.join(r['overrides'])}: {state}\n  vllm args: {' '.join(r['vllm_args'])}")
    if any(r["refused"] for r in rows):
        raise typer.Exit(1)


def _profile_and_host(profile: str, host: str | None) -> tuple[Any, Any]:
    """The profile and host as the flow resolves them: saved block documents when a Prefect API is set."""
    if environment().prefect_api_url:
        from blocks.resolve import load_host, load_profile

        prof = load_profile(profile)
        return prof, load_host(host or prof.host)
    from roost.hosts import get_host
    from roost.profiles import get_profile

    prof = get_profile(profile)
    return prof, get_host(host or prof.host)
