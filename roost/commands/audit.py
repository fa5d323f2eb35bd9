"""``roost audit PATH``: read a checkpoint's safetensors headers and config, report what vLLM will meet.

Exit 0 when no finding is an error, 1 when one is, 2 for unusable input (missing directory, corrupt
header, config without the fields the audit needs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from roost.commands._common import echo_json, fail, user_errors


def audit(
    path: Annotated[Path, typer.Argument(help="Checkpoint directory (config.json + *.safetensors).")],
    host: Annotated[str, typer.Option("--host", help="Host profile: spark or cpu.")] = "spark",
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON.")] = False,
) -> None:
    """Audit a checkpoint from its headers alone: integrity, layout, findings, decode ceiling, vLLM args."""
    # Imported here, not at module level: every roost command loads this module at start, and CLI
    # start time is measured (the audit pulls in pydantic models and orjson).
    from roost.hosts import get_host
    from roost.plan.report import audit_for_host

    report = audit_for_host(path, get_host(host))
    if as_json:
        echo_json(report.to_json())
    else:
        typer.echo(report.summary())
    if report.has_errors:
        errors = [f.code for f in report.errors]
        raise fail(f"{path}: {len(errors)} error finding(s): {', '.join(dict.fromkeys(errors))}; fix the checkpoint before serving it", 1)


def register(app: typer.Typer) -> None:
    app.command("audit", help="Audit a checkpoint's headers and config (no tensor data is read).")(
        user_errors(audit)
    )
