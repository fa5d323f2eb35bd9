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

app = typer.Typer(
    name="roost",
    help="Take an LLM checkpoint from the Hugging Face Hub to a measured, monitored vLLM server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in the order `roost --help` lists them.
COMMANDS = ["run", "download", "audit", "plan", "diagnose", "bench", "results", "setup"]


for _name in COMMANDS:
    importlib.import_module(f"roost.commands.{_name}").register(app)


def main() -> None:
    """Console entry point."""
    app(prog_name="roost")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())  # type: ignore[func-returns-value]
