"""The ``roost`` command line. Each command lives in ``roost/commands/<name>.py`` and exposes
``register(app)``; this file only assembles them and maps errors to exit codes.

Exit codes (every command): 0 success, 1 a check failed (integrity, an error finding, a failed
stage), 2 unusable input (missing path, unknown profile, port in use...). A user mistake prints one
line ``roost: error: ...`` on stderr and never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from roost._compat import click_errors  # typer's own copy of click's exceptions
from roost.inputs.text import one_line
from roost.settings import environment, secret_values

app = typer.Typer(
    name="roost",
    help="Take an LLM checkpoint from the Hugging Face Hub to a measured, monitored vLLM server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in the order `roost --help` lists them.
COMMANDS = ["run", "download", "audit", "plan", "diagnose", "bench", "eval", "results", "compare", "sweep", "gateway", "monitor", "setup", "doctor"]


for _name in COMMANDS:
    importlib.import_module(f"roost.commands.{_name}").register(app)


def main() -> None:
    """Console entry point. A usage mistake (an unknown or misspelt flag, a bad value, a missing
    argument) is one ``roost: error:`` line on stderr and exit 2, like every other unusable input,
    instead of click's multi-line usage box; ``roost`` alone still prints the help."""
    try:
        code = app(prog_name="roost", standalone_mode=False)
    except click_errors.NoArgsIsHelpError:
        app(prog_name="roost", args=["--help"], standalone_mode=False)  # the help, as `roost --help` prints it
        code = 2
    except click_errors.ClickException as exc:
        where = f" (see `{exc.ctx.command_path} --help`)" if isinstance(exc, click_errors.UsageError) and exc.ctx else ""
        typer.echo(f"roost: error: {one_line(' '.join(exc.format_message().split()))}{where}", err=True)
        code = exc.exit_code
    except typer.Abort:
        typer.echo("roost: error: aborted", err=True)
        code = 1
    except Exception as exc:
        if environment().roost_debug:
            raise
        from roost.inputs.text import shown
        from roost.secrets import redact

        known = secret_values()  # the environment's secrets (roost.settings.SECRET_VARIABLES): never shown
        typer.echo(f"roost: internal error (a bug in roost; rerun with ROOST_DEBUG=1 for the traceback): "
                   f"{type(exc).__name__}: {shown(redact(str(exc), known), 200)}", err=True)
        code = 1
    sys.exit(code if type(code) is int else 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())  # type: ignore[func-returns-value]
