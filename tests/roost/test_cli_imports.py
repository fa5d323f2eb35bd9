"""The command line imports only what the command run uses (issue 38): each check runs a clean interpreter
and reads ``sys.modules`` as it exits. No timing here: start-up is ``benchmarks/bench_startup.py``'s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer

from roost import cli
from roost.commands import _target

HEAVY = ("pandas", "pyarrow", "matplotlib", "prefect", "roost.vllm.client", "openai")
"""Never loaded to start the command line, nor by a command that does not use them."""

# Runs roost's console entry point with ARGS, and at exit writes the modules loaded to OUT (JSON).
_WRAPPER = """
import atexit, json, sys
out, args = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["roost", *args]
from roost.cli import main
main()
"""


def loaded(tmp_path: Path, *args: str, code: int = 0) -> set[str]:
    """The modules loaded by ``roost ARGS`` in a fresh interpreter (which must exit with ``code``)."""
    out = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", _WRAPPER, str(out), *args], capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == code, r.stderr[-2000:]
    return set(json.loads(out.read_text()))


def among(modules: set[str], names: tuple[str, ...] | list[str]) -> list[str]:
    """The ``names`` (packages or modules) that ``modules`` holds, themselves or a submodule."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def commands_loaded(modules: set[str]) -> list[str]:
    return sorted(m.removeprefix("roost.commands.") for m in modules
                  if m.startswith("roost.commands.") and not m.startswith("roost.commands._"))


def test_importing_the_cli_loads_no_command_and_nothing_heavy(tmp_path: Path) -> None:
    code = "import json, sys; import roost.cli; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    modules = set(json.loads(r.stdout))
    assert "roost.cli" in modules
    assert among(modules, [*HEAVY, "httpx", "numpy", "sqlalchemy", "rich", "pydantic_settings"]) == []
    assert commands_loaded(modules) == []


def test_help_loads_no_command(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "--help")
    assert among(modules, [*HEAVY, "httpx", "numpy", "sqlalchemy", "pydantic_settings"]) == []
    assert commands_loaded(modules) == []
    assert "rich" in modules  # typer draws the help with it


def test_audit_of_a_directory_loads_the_audit_alone(tmp_path: Path, tiny_model: Path) -> None:
    modules = loaded(tmp_path, "audit", str(tiny_model), "--json")
    assert among(modules, [*HEAVY, "httpx", "httpx2", "numpy", "sqlalchemy", "rich", "pydantic_settings",
                           "safetensors", "roost.hub", "roost.profiles", "roost.records"]) == []
    assert commands_loaded(modules) == ["audit"]


def test_plan_with_a_profile_loads_no_client_nor_tables(tmp_path: Path, tiny_model: Path) -> None:
    modules = loaded(tmp_path, "plan", str(tiny_model), "--profile", "local", "--json")
    assert among(modules, [*HEAVY, "httpx", "httpx2", "numpy", "sqlalchemy", "rich", "roost.hub.preflight",
                           "roost.eval.runner"]) == []
    assert commands_loaded(modules) == ["plan"]


def test_gateway_usage_loads_no_client_nor_frames(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "gateway", "usage", "--db", f"sqlite:///{tmp_path / 'usage.db'}", "--json")
    assert among(modules, ["pandas", "matplotlib", "prefect", "roost.vllm.client", "openai", "httpx", "rich"]) == []
    assert "sqlalchemy" in modules
    assert commands_loaded(modules) == ["gateway"]


def test_gateway_usage_loads_no_tables(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "gateway", "usage", "--db", f"sqlite:///{tmp_path / 'usage.db'}", "--json")
    assert among(modules, ["pyarrow", "numpy"]) == []


def test_a_misspelt_flag_loads_only_its_command(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "audit", ".", "--hots", "spark", code=2)
    assert commands_loaded(modules) == ["audit"]


def test_the_listing_is_what_each_command_registers() -> None:
    """``roost --help`` lists :data:`roost.cli.COMMANDS` without importing the commands: each name, its order
    (commands, then groups) and its help are what the command's module registers."""
    every = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    for name in cli.COMMANDS:
        __import__(f"roost.commands.{name}", fromlist=["register"]).register(every)
    registered = typer.main.get_group(every).commands
    assert list(registered) == list(cli.COMMANDS)
    assert {name: c.help for name, c in registered.items()} == cli.COMMANDS
    assert all(c.short_help is None and not c.hidden and not c.deprecated for c in registered.values())


def test_a_command_runs_as_its_module_registers_it() -> None:
    for name in ("audit", "gateway"):
        real = cli.load_command(name)
        assert real.name == name and real.help == cli.COMMANDS[name]
        assert real.params or isinstance(real, typer.core.TyperGroup)


def test_the_hub_scheme_is_the_hubs() -> None:
    from roost.hub.preflight import SCHEME, is_hub_url

    assert _target.HUB_SCHEME == SCHEME and is_hub_url(_target.HUB_SCHEME + "a/b")
