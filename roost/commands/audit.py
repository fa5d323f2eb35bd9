"""``roost audit PATH | hf://OWNER/NAME[@REVISION] | --profile P``: read a checkpoint's safetensors
headers and config, report what vLLM will meet.

A directory is read on disk; a Hub repository over HTTP without downloading a weight byte (the JSON
then adds ``repo_id``, ``commit`` and ``bytes_fetched``); ``--profile P`` alone reads that profile's
repository and revision from the Hub. Exit 0 when no finding is an error, 1 when one is, 2 for
unusable input (missing directory or repository, corrupt header, config without the fields the
audit needs).
"""

from __future__ import annotations

from typing import Annotated

import typer

from roost.commands._common import echo_json, fail, user_errors


def audit(
    path: Annotated[str | None, typer.Argument(
        help="Checkpoint directory (config.json + *.safetensors), or hf://OWNER/NAME[@REVISION] to read "
        "it from the Hub without downloading it.", show_default=False)] = None,
    host: Annotated[str | None, typer.Option("--host", help="Host profile: spark or cpu (default: the profile's, "
                                             "else spark).")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Model profile: with no PATH, audit its repository and revision on the Hub "
        "(with its file patterns); the report takes its served model name, window and overrides.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON.")] = False,
) -> None:
    """Audit a checkpoint from its headers alone: integrity, layout, findings, decode ceiling, vLLM args."""
    # Imported here, not at module level: every roost command loads this module at start, and CLI
    # start time is measured (the audit pulls in pydantic models and orjson).
    from roost.commands._target import audit_target
    from roost.hosts import get_host

    prof = None
    if profile is not None:
        from roost.profiles import get_profile  # the profiles' settings: only when one is named

        prof = get_profile(profile)
    # named and windowed as the profile serves it, as `roost plan --profile` plans it
    report = audit_target(path, prof, get_host(host or (prof.host if prof is not None else "spark")),
                          prof.plan_inputs() if prof is not None else None)
    if as_json:
        echo_json(report.to_json())
    else:
        typer.echo(report.summary())
    if report.has_errors:
        errors = [f.code for f in report.errors]
        raise fail(f"{report.path}: {len(errors)} error finding(s): {', '.join(dict.fromkeys(errors))}; fix the checkpoint before serving it", 1)


def register(app: typer.Typer) -> None:
    app.command("audit", help="Audit a checkpoint's headers and config (no tensor data is read).")(
        user_errors(audit)
    )
