"""``roost run``: the whole pipeline (download -> audit -> build -> serve -> health -> bench -> report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast, get_args

import typer

from roost import catalogue as C
from roost.commands._common import echo_json, fail, user_errors
from roost.errors import CheckFailed, UserError
from roost.headline import headline_rows
from roost.hosts import HostProfile, get_host
from roost.inputs.text import shown
from roost.net import require_free_port
from roost.profiles import ModelProfile, get_profile
from roost.records import RunRecord
from roost.serve.base import RestartPolicy, check_vllm_args
from roost.settings import (
    PREFECT_SERVER_ANALYTICS_ENABLED,
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    child_env,
    environment,
    log_roost_through_prefect,
    set_default,
)


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
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port for the vLLM server (default: a free one).")] = None,
    vllm_arg: Annotated[list[str] | None, typer.Option(
        "--vllm-arg", help="An extra vLLM argument after the plan's (repeatable; write it as --vllm-arg=--enforce-eager "
        "or --vllm-arg=--max-num-seqs=8). Keys never go here: VLLM_API_KEY or the Secret block.")] = None,
    keep_serving: Annotated[bool, typer.Option("--keep-serving", help="Leave the server running after the run "
                                                "(a production profile does by default).")] = False,
    one_off: Annotated[bool, typer.Option("--one-off", help="Benchmark and tear down even a production profile "
                                          "(ornith-1.5-35b-a3b-nvfp4), whose server otherwise keeps serving with "
                                          "restart policy unless-stopped: the recipe's RESTART=no.")] = False,
    restart_policy: Annotated[str | None, typer.Option(
        "--restart-policy", help="Docker restart policy of the server container: no, always, unless-stopped, "
        "on-failure (default: unless-stopped with --keep-serving, a production landing that takes the policy off "
        "the host's previous server; no otherwise; --restart-policy no for a one-off kept server).")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Stop containers roost did not start that hold the GPUs or the profile's fixed port "
        "(refused otherwise); they are stopped with restart policy no, never removed.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Audit and plan the downloaded checkpoint, print the full serve specification (image, "
        "arguments, environment variable names, ports, bind addresses, restart policy, mounts) and exit; nothing "
        "is downloaded, built or started.")] = False,
    model_dir: Annotated[Path | None, typer.Option(
        "--model-dir", help="With --dry-run: the checkpoint directory to plan from (default: where land downloads "
        "the profile's repo).")] = None,
    mtp_ab: Annotated[bool | None, typer.Option(
        "--mtp-ab/--no-mtp-ab", help="After the benchmark, restart without --speculative-config (same image and "
        "commit) and benchmark again: speed-up per point and draft acceptance (default: the profile's; on for "
        "ornith-1.5-35b-a3b-nvfp4).")] = None,
    notify: Annotated[bool, typer.Option("--notify/--no-notify", help="Send Slack notifications if configured.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run record as JSON.")] = False,
) -> None:
    # roost's module loggers (roost.hub retries and resumes, ...) in the run's logs, at INFO
    # (flows/identity.py); set before anything loads Prefect, which reads it once
    log_roost_through_prefect()
    prof = _profile(profile, host)
    _check_revision(revision)
    policy = _restart_policy(restart_policy)
    if keep_serving and one_off:
        raise UserError("--keep-serving and --one-off contradict each other: give one")
    keep = prof.keeps_serving(True if keep_serving else False if one_off else None)
    overrides = _checked_overrides(prof, vllm_arg)
    if dry_run:
        _dry_run(prof, host, model_dir, overrides, port=port, keep_serving=keep, restart_policy=policy,
                 as_json=as_json)
        return
    if model_dir is not None:
        raise UserError("--model-dir goes with --dry-run only: a run downloads the profile's repo itself")
    _refuse_before_starting(prof, host, overrides, revision, port)
    _local_prefect_defaults()
    # Prefect and the flows load only when a run starts: every `roost` command imports this module.
    from flows.land import land

    record = land(profile=profile, revision=revision, host=host, vllm_overrides=overrides or None, port=port,
                  keep_serving=keep, notify=notify, restart_policy=policy, replace=replace, mtp_ab=mtp_ab)
    if as_json:
        echo_json(record)
        return
    typer.echo(_summary(record))


def _profile(profile: str, host: str | None) -> ModelProfile:
    """The profile (and check the host) as the flow will resolve them."""
    if environment().prefect_api_url:  # saved model-profile / roost-host documents count too
        return _saved_or_builtin(profile, host)
    prof = get_profile(profile)  # unknown names fail here, before a temporary Prefect server starts
    get_host(host or prof.host)
    return prof


def _check_revision(revision: str | None) -> None:
    """Refuse a ``--revision`` git would not take as a branch, tag or commit."""
    if revision is not None:
        from roost.hub.snapshot import is_ref_name

        if not is_ref_name(revision.strip()):
            raise UserError(f"--revision {shown(revision, 80)!r}: not a branch, tag or commit git would accept "
                            "(no '..', spaces or control characters)")


def _restart_policy(restart_policy: str | None) -> RestartPolicy | None:
    """``--restart-policy`` when it names a Docker restart policy; a UserError listing them otherwise."""
    if restart_policy is not None and restart_policy not in get_args(RestartPolicy):
        raise UserError(f"--restart-policy {restart_policy!r}: choose one of {', '.join(get_args(RestartPolicy))}")
    return cast(RestartPolicy | None, restart_policy)


def _checked_overrides(prof: ModelProfile, vllm_arg: list[str] | None) -> list[str]:
    """The ``--vllm-arg`` overrides, each checked, and with the profile's refused now when vLLM would refuse them."""
    overrides = list(vllm_arg or [])
    check_vllm_args(overrides, source="--vllm-arg")
    if overrides:
        from roost.plan.args import parse_overrides

        parse_overrides([*prof.vllm_overrides, *overrides])  # a value vLLM would refuse, refused now
    return overrides


def _refuse_before_starting(prof: ModelProfile, host: str | None, overrides: list[str], revision: str | None,
                            port: int | None) -> None:
    """What a run would stop at later, refused before anything starts: a malformed ``ROOST_RESULTS_URL``
    (not ignored at the report), a port in use, overrides vLLM would not start with."""
    from roost.report.publish import results_url

    results_url()
    if port is not None:
        require_free_port(port)
    if overrides:
        refuse_early(prof, host, overrides, revision)


def _local_prefect_defaults() -> None:
    """Settings of the temporary local Prefect server a run starts without ``PREFECT_API_URL`` (each
    unless already set)."""
    # Prefect starts it on the default SQLite database; on a busy 2-core machine it needs longer than
    # Prefect's default 20 s to come up.
    set_default(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, "180")
    # Its telemetry heartbeat sends usage data off the machine, and on a brand-new database it races
    # its own first insert and prints an SQLAlchemy traceback; roost runs never need it.
    set_default(PREFECT_SERVER_ANALYTICS_ENABLED, "false")


def refuse_early(prof: ModelProfile, host: str | None, overrides: list[str], revision: str | None = None) -> None:
    """Plan the checkpoint with the run's ``--vllm-arg`` overrides before Prefect starts, and refuse
    (exit 1, as ``roost plan`` does, naming them) what vLLM would refuse: a pool that cannot hold one request, a window beyond
    the model's. The embedded demo's checkpoint is generated to plan from (half a second); another
    profile's is read from its Hub (config and headers; cached per commit). When the Hub cannot be read
    now the flow's preflight stage decides, with its retries."""
    import tempfile

    from roost.errors import RoostError
    from roost.plan.preflight import plan_checkpoint
    from roost.plan.report import audit_for_host

    target = _host(host or prof.host)
    env = None
    if target.backend == "process":
        from roost.serve.process import CPU_ENV_DEFAULTS

        env = {**CPU_ENV_DEFAULTS, **child_env()}
    with tempfile.TemporaryDirectory(prefix="roost-plan-") as tmp:
        try:
            if prof.demo:
                from roost.demo.model import generate_tiny_model

                audit = audit_for_host(generate_tiny_model(Path(tmp) / "model"), target)
            else:
                from roost.hub.preflight import HubRef, preflight

                pf = preflight(HubRef(repo_id=prof.repo_id, revision=revision or prof.revision),
                               allow_patterns=list(prof.allow_patterns), ignore_patterns=list(prof.ignore_patterns))
                audit = audit_for_host(pf.files, target).from_hub(pf.repo_id, pf.commit, pf.bytes_fetched)
        except (RoostError, OSError):  # the Hub unreadable now (or a token only the Secret block holds):
            return                     # the flow's preflight stage retries, and reports what it finds
        refusal = plan_checkpoint(audit, target, prof.plan_inputs(overrides), env=env).refusal()
    if refusal is not None:  # usable input a check refused: exit 1, as `roost plan` and --dry-run say it
        raise CheckFailed(f"--vllm-arg {shown(' '.join(overrides), 200)}: vLLM would not start {prof.name} with it: "
                          f"{refusal[1]}")


def _dry_run(prof: ModelProfile, host: str | None, model_dir: Path | None, overrides: list[str], *, port: int | None,
             keep_serving: bool, restart_policy: RestartPolicy | None, as_json: bool) -> None:
    """Plan the profile's checkpoint as ``land`` would and print what would be started; exit 1 when the
    plan says vLLM would refuse (the specification is printed all the same)."""
    from roost.plan.preflight import plan_checkpoint
    from roost.plan.report import audit_for_host
    from roost.serve.backends import backend_for
    from roost.settings import checkpoint_dir
    from roost.units import format_memory

    target = _host(host or prof.host)
    path = model_dir or checkpoint_dir(prof.repo_id)
    if not (path / "config.json").is_file():
        raise UserError(f"{path}: no checkpoint there; download it first (roost download {prof.repo_id}) "
                        "or pass --model-dir DIR")
    check_vllm_args(list(prof.vllm_overrides), source=f"model profile {prof.name}: vllm_overrides")
    plan = plan_checkpoint(audit_for_host(path, target), target, prof.plan_inputs(overrides))
    spec = prof.serve_spec(path, plan.vllm_args, port=port, keep_serving=keep_serving, restart_policy=restart_policy)
    start = backend_for(target).start_plan(spec)
    refusal = plan.refusal()
    if as_json:
        echo_json({"profile": prof.name, "host": target.name, "model_dir": str(path), "vllm_args": plan.vllm_args,
                   "fits_host": plan.fits_host, "refusal": refusal[1] if refusal else None,
                   "serve": start.model_dump(mode="json")})
    else:
        typer.echo(f"roost: dry run of {prof.name} ({prof.repo_id}) on {target.name}: nothing started")
        typer.echo(start.summary())
        typer.echo(f"  plan: weights + KV pool + headroom {format_memory(plan.fit.total_bytes)} of "
                   f"{format_memory(plan.fit.usable_bytes)}{'' if plan.fits_host else ': DOES NOT FIT'}")
    if refusal is not None:
        raise fail(f"{path}: vLLM would not start: {refusal[1]}", 1)


def _host(name: str) -> HostProfile:
    if environment().prefect_api_url:
        from blocks.resolve import load_host

        return load_host(name)
    return get_host(name)


def _saved_or_builtin(profile: str, host: str | None) -> ModelProfile:
    """The profile (and check the host) as the flow will resolve them, from the Prefect server's blocks."""
    import httpx

    from blocks.resolve import load_host, load_profile  # Prefect's client, only when PREFECT_API_URL is set

    try:
        prof = load_profile(profile)
        load_host(host or prof.host)
    except (httpx.HTTPError, OSError, RuntimeError) as exc:
        raise UserError(f"cannot reach the Prefect API at {environment().prefect_api_url} ({type(exc).__name__}): "
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
        lines.append(f"  stage {s.stage:<14} {s.seconds:7.1f} s  {s.status}{' (cached)' if s.cached else ''}")
    lines.append(f"report: {record.report_path}")
    return "\n".join(lines)
