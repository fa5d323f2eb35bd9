"""The ``roost`` command line. Each command lives in ``roost/commands/<name>.py`` and exposes
``register(app)``; this file only assembles them and maps errors to exit codes.

A command's module is imported when that command runs, never to list it: ``roost --help`` reads the
names and one-line helps from :data:`COMMANDS` (kept equal to what each module registers by
``tests/roost/test_cli_imports.py``), and ``roost audit`` imports the audit's module alone. Start-up
is measured by ``benchmarks/bench_startup.py``.

Exit codes (every command): 0 success, 1 a check failed (integrity, an error finding, a failed
stage), 2 unusable input (missing path, unknown profile, port in use...). A user mistake prints one
line ``roost: error: ...`` on stderr and never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from roost._compat import click_errors  # typer's own copy of click's exceptions
from roost.inputs.text import one_line

# Every command, in the order `roost --help` lists them (commands, then groups of commands), with the help
# its module registers: the listing is built from here without importing a command's module.
COMMANDS: dict[str, str] = {
    "run": "Run the land pipeline. With no arguments: the embedded local default (a tiny model generated on "
           "the spot, served from a local Hub mirror by a real vLLM on this CPU).",
    "download": "Download a checkpoint from the Hub (HF_ENDPOINT, HF_TOKEN honoured) and verify every file.",
    "audit": "Audit a checkpoint's headers and config (no tensor data is read).",
    "plan": "Predict vLLM's KV-cache size, concurrency and fit for a checkpoint.",
    "diagnose": "Classify a failed vLLM start from its log (exit 0 failure found, 1 none, 2 unreadable).",
    "bench": "Benchmark any OpenAI-compatible server (TTFT, decode tok/s, aggregate tok/s, knee).",
    "eval": "Accuracy of a served model: GSM8K, MATH-500 or MMLU-Pro, resumable, per category.",
    "compare": "Two models side by side from the results store, as the recipe compares a new model with the one "
               "it replaced: throughput per concurrency, GSM8K/MATH-500 accuracy with truncation and output "
               "length, MMLU-Pro per category; tables, charts (PNG) and --json.",
    "sweep": "Land a profile with every combination of --grid flags across hosts (each host one server at a time, "
             "hosts in parallel) and compare throughput, TTFT and decode per variant; the best one is named with "
             "its margin over the noise band. Variants measured already (same commit, arguments and image) are "
             "skipped. Needs PREFECT_API_URL and roost setup (the land/<host> deployments and their workers).",
    "setup": "Register roost on the Prefect server at PREFECT_API_URL: block types and documents (hosts, model "
             "profiles; host documents earlier releases saved as spark-host are migrated to roost-host), the "
             "process work pool, one work queue and one serving concurrency limit per host, the zombie-run "
             "automation, the crash alert (from the roost-slack Slack block, when saved), the land / "
             "rebenchmark / audit deployments, and with two hosts or more the sweep's queue and deployment. "
             "Hosts: every saved roost-host block, this machine's cpu, and those named with --hosts. Prints the "
             "worker to start on each host. Idempotent: a second run changes nothing and says so.",
    "doctor": "Preflight a worker host: Docker, NVIDIA runtime and driver, disk, base image, Prefect API (exit 0 "
              "ready, 1 a check failed, 2 bad input).",
    "install": "Install the whole serving box on this machine as system services: Prefect server, worker, gateway, "
               "report server, monitoring (sudo scripts/install-spark runs it; --dry-run shows everything, "
               "--uninstall removes it).",
    "results": "List stored runs and their headline numbers; filter by model and host. `roost results serve` "
               "serves the reports over HTTP for the Prefect UI.",
    "gateway": "The metering gateway: one door to every landed model, a key per user, device or app.",
    "monitor": "Live monitoring: Prometheus, alert rules and the Grafana dashboard for kept servers.",
}


class _Listed(TyperCommand):
    """A command as ``roost --help`` lists it (name and help); running it loads the real one."""


def load_command(name: str) -> Any:
    """The click command (or group) ``roost.commands.<name>`` registers, built as typer builds the app's."""
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    importlib.import_module(f"roost.commands.{name}").register(sub)
    return typer.main.get_group(sub).commands[name]


class LazyCommands(TyperGroup):
    """``roost``'s group: every command listed from :data:`COMMANDS`, its module imported when it runs."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, text in COMMANDS.items():
            self.commands[name] = _Listed(name=name, help=text)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if name is not None and isinstance(cmd, _Listed):
            cmd = self.commands[name] = load_command(name)
        return name, cmd, rest


app = typer.Typer(
    name="roost",
    help="Take an LLM checkpoint from the Hugging Face Hub to a measured, monitored vLLM server.",
    cls=LazyCommands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _roost() -> None:
    # Makes the app a group of commands (typer builds one only when the app has a callback or commands);
    # its commands are LazyCommands'.
    pass


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
        from roost.settings import environment, secret_values  # pydantic-settings: only on this path

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
