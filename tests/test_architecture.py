"""The shape the code keeps (issue 35): the layers' contract covers every domain package, no module or
function grows past what a reader takes in at once, and ``land`` stays a list of stages.

The import contracts themselves are checked by ``lint-imports`` in ``scripts/test`` (``.importlinter``).
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("roost", "flows", "tasks", "blocks", "deployments")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LAND_LINES = 100
CLI = {"roost.cli", "roost.commands"}


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_domain_contract_names_every_package_under_roost() -> None:
    """A package added under ``roost/`` is domain code unless it is the CLI: the contract must list it,
    or it could import Prefect unnoticed."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    listed = set(config["importlinter:contract:domain"]["source_modules"].split())
    present = {f"roost.{p.stem if p.is_file() else p.name}" for p in (ROOT / "roost").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").is_file())}
    assert present - CLI - listed == set(), "add these to .importlinter's domain contract"
    assert listed - present == set(), "these no longer exist: remove them from .importlinter"
    missing_init = [str(p.relative_to(ROOT)) for p in (ROOT / "roost").rglob("*") if p.is_dir()
                    and p.name != "__pycache__" and any(p.glob("*.py")) and not (p / "__init__.py").is_file()]
    assert missing_init == [], "a namespace package is invisible to lint-imports: give it an __init__.py"


def test_no_module_is_longer_than_a_reader_takes_in() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these modules by concern (at most {MAX_MODULE_LINES} lines)"


def test_no_function_is_longer_than_a_screen_or_two() -> None:
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}, f"extract named steps from these (at most {MAX_FUNCTION_LINES} lines)"


def test_the_land_flow_reads_as_its_list_of_stages() -> None:
    assert len((ROOT / "flows" / "land.py").read_text().splitlines()) < MAX_LAND_LINES
