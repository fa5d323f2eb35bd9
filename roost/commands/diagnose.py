"""``roost diagnose LOGFILE``: why did this vLLM server fail to start?

Prints the classification as JSON (``--json``) or as a few readable lines. Exit 0 when the log
shows a failure (even one roost cannot name: ``unknown``), 1 when it shows none, 2 when the file
cannot be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from roost.commands._common import echo_json, user_errors
from roost.inputs.files import read_tail
from roost.serve.diagnose import diagnose

LOG_TAIL_BYTES = 8 * 1024 * 1024
"""How much of a log's end ``diagnose`` reads: a failed start's lines are at the end, and a log of
gigabytes (a server that ran for weeks) is read in bounded memory."""


def diagnose_command(
    logfile: Annotated[Path, typer.Argument(help="A vLLM server log (docker logs output or the process backend's log file).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: failure_class, retryable, remediation, evidence.")] = False,
    exit_code: Annotated[
        int | None, typer.Option("--exit-code", min=-255, max=255, help="The server's exit status, when known (e.g. 137).")
    ] = None,
    oom_killed: Annotated[bool, typer.Option("--oom-killed", help="Docker reported State.OOMKilled=true.")] = False,
    timed_out: Annotated[bool, typer.Option("--timed-out", help="The health wait gave up before the server was ready.")] = False,
) -> None:
    """Classify a failed vLLM start from its log: KV pool too small, vision-tower flags, MTP weights, OOM, port in use..."""
    raw = read_tail(logfile, limit=LOG_TAIL_BYTES, what="the server log", remedy="pass the server's log file")
    text = raw.decode("utf-8", errors="replace")
    found = diagnose(text, exit_code, oom_killed=oom_killed, timed_out=timed_out)
    if found is None:
        if as_json:
            echo_json({"failure_class": None, "retryable": None, "remediation": None, "evidence": None})
        else:
            typer.echo(f"{logfile}: no start failure found in the log")
        raise typer.Exit(1)
    if as_json:
        echo_json(found)
    else:
        typer.echo(f"failure_class: {found.failure_class}")
        typer.echo(f"retryable:     {str(found.retryable).lower()}")
        typer.echo(f"remediation:   {found.remediation}")
        typer.echo(f"evidence:      {found.evidence}")


def register(app: typer.Typer) -> None:
    app.command("diagnose", help="Classify a failed vLLM start from its log (exit 0 failure found, 1 none, 2 unreadable).")(
        user_errors(diagnose_command)
    )
