"""pyproject.toml declares what roost's code imports, and a Spark worker's install runs it.

- Every third-party import in roost/, flows/, tasks/, blocks/ and deployments/ is a declared
  dependency (main, or the ``demo`` extra), matched to its distribution by
  ``importlib.metadata.packages_distributions()``: a package that only arrives through another one
  can vanish on that one's next release.
- The ``demo`` extra (the local Hub mirror, the tiny model's tokenizer and weights) is imported only
  where it is used, never at module level (except by modules only the demo and tests import), so a
  worker installed without it (scripts/install-worker) imports every flow, task and the CLI: checked
  in a subprocess where ``olah`` and ``tokenizers`` cannot be imported.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["roost", "flows", "tasks", "blocks", "deployments"]
FIRST_PARTY = {*SOURCES, "__future__"}
DEMO_ONLY_MODULES = {"roost/checkpoint/writer.py"}
"""Modules that only the demo (inside its functions) and the tests import: numpy at their top is fine."""
BLOCKED = ("olah", "tokenizers")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    assert match, f"unparsable requirement {spec!r}"
    return canonical(match.group(1))


def pyproject() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def declared() -> tuple[set[str], set[str], set[str]]:
    """(main dependencies, the demo extra, the dev group) as canonical distribution names."""
    project = pyproject()["project"]
    assert isinstance(project, dict)
    main = {requirement_name(s) for s in project["dependencies"]}
    demo = {requirement_name(s) for s in project.get("optional-dependencies", {}).get("demo", [])}
    groups = pyproject().get("dependency-groups", {})
    assert isinstance(groups, dict)
    dev = {requirement_name(s) for s in groups.get("dev", []) if isinstance(s, str)}
    return main, demo, dev


@dataclass(frozen=True)
class Import:
    top: str
    where: str
    module_level: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> list[Import]:
    """Absolute imports in ``path``; module_level: run when the module is imported."""
    found: list[Import] = []
    rel = path.relative_to(ROOT).as_posix()

    def visit(node: ast.AST, module_level: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(alias.name.split(".")[0], f"{rel}:{node.lineno}", module_level))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append(Import(node.module.split(".")[0], f"{rel}:{node.lineno}", module_level))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for child in ast.iter_child_nodes(node):
                visit(child, False)
            return
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False)  # only the type checker runs these
            for child in node.orelse:
                visit(child, module_level)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, module_level)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), True)
    return found


def third_party_imports() -> list[Import]:
    out: list[Import] = []
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            out += [
                i for i in imports_of(path) if i.top not in sys.stdlib_module_names and i.top not in FIRST_PARTY
            ]
    return out


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return md.packages_distributions()  # scans every installed distribution: once


def distributions_of(top: str) -> set[str]:
    return {canonical(d) for d in _packages_distributions().get(top, [])}


def test_the_scan_sees_imports_at_every_level(tmp_path: Path) -> None:
    sample = ROOT / "roost" / "demo" / "model.py"
    found = {(i.top, i.module_level) for i in imports_of(sample)}
    assert ("tokenizers", False) in found and ("numpy", False) in found
    assert ("tokenizers", True) not in found
    tops = {i.top for i in third_party_imports()}
    assert {"prefect", "huggingface_hub", "httpx", "typer", "tqdm", "docker"} <= tops


def test_every_third_party_import_is_a_declared_dependency() -> None:
    main, demo, _ = declared()
    missing = sorted(
        {
            f"{i.top} ({i.where}; distribution {', '.join(sorted(distributions_of(i.top))) or 'not installed'})"
            for i in third_party_imports()
            if not distributions_of(i.top) & (main | demo)
        }
    )
    assert not missing, "imported but not declared in pyproject.toml [project] dependencies:\n" + "\n".join(missing)


def test_demo_extra_is_never_imported_at_module_level() -> None:
    main, demo, _ = declared()
    demo_only = demo - main
    assert {"olah", "tokenizers"} <= demo_only
    offenders = sorted(
        i.where
        for i in third_party_imports()
        if i.module_level
        and distributions_of(i.top) & demo_only
        and not distributions_of(i.top) & main
        and i.where.split(":")[0] not in DEMO_ONLY_MODULES
    )
    assert not offenders, (
        "the demo extra is not installed on a worker: import it inside the function that uses it\n"
        + "\n".join(offenders)
    )


def test_no_group_repeats_a_main_dependency() -> None:
    main, demo, dev = declared()
    assert not main & demo and not main & dev and not demo & dev, (main & demo, main & dev, demo & dev)
    assert {"pytest", "ruff", "mypy", "playwright"} <= dev


_BLOCKER = """
import importlib, importlib.abc, json, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked (not installed on a worker)")
        return None
sys.meta_path.insert(0, Block())
failed = {}
for module in sys.argv[2:]:
    try:
        importlib.import_module(module)
    except Exception as exc:
        failed[module] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def worker_modules() -> list[str]:
    tasks = sorted(f"tasks.{p.stem}" for p in (ROOT / "tasks").glob("*.py") if p.stem != "__init__")
    flows = sorted(f"flows.{p.stem}" for p in (ROOT / "flows").glob("*.py") if p.stem != "__init__")
    # roost.cli imports a command's module only when it runs: each is named
    commands = sorted(f"roost.commands.{p.stem}" for p in (ROOT / "roost" / "commands").glob("*.py")
                      if p.stem != "__init__")
    return ["roost.cli", *commands, *flows, *tasks]


def test_worker_code_imports_without_the_demo_extra() -> None:
    modules = worker_modules()
    assert "flows.land" in modules and "tasks.download" in modules
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKER, ",".join(BLOCKED), *modules],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failed, failed


def test_the_blocker_blocks() -> None:
    """The check above can fail: a module that imports tokenizers at the top is reported."""
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKER, "tokenizers", "tokenizers.decoders"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert "blocked" in json.loads(out.stdout.strip().splitlines()[-1]).get("tokenizers.decoders", "")


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is installed by scripts/bootstrap")
def test_uv_lock_matches_pyproject() -> None:
    out = subprocess.run(
        ["uv", "lock", "--check", "--offline"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, f"uv.lock is out of date with pyproject.toml: run `uv lock`\n{out.stderr[-1500:]}"
