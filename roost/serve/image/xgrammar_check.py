"""roost's xgrammar check, the serving image's last build step::

    python3 xgrammar_check.py XGRAMMAR_VERSION BACKEND_MODULE

Passes when xgrammar XGRAMMAR_VERSION is installed and imports, every xgrammar name a vLLM module
imports at module level (they fail the server's start) and every xgrammar attribute the
guided-decoding backend module uses exist in it, and the backend module imports. Prints one line
starting with PREFIX either way; exits 1 on a failure.

The Dockerfile ``roost.serve.dockerfile`` renders copies this file into the image and runs it under
the image's own ``python3``: standard library only, plus the xgrammar and vLLM it checks, imported
when it runs. Its text is part of the image's content-addressed tag: any edit here, a comment too,
names (and so builds) a new serving image.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from typing import NoReturn

PREFIX = "roost-xgrammar-check:"
"""Starts the check's verdict line (``roost.serve.dockerfile.check_failure_detail`` finds it in the build log)."""


def fail(message: str) -> NoReturn:
    print(PREFIX, "FAIL", message, flush=True)
    sys.exit(1)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements an import runs unguarded: not under TYPE_CHECKING, not in a try."""
    for node in body:
        if isinstance(node, ast.If):
            if not is_type_checking(node.test):
                yield from module_level(node.body)
            yield from module_level(node.orelse)
        else:
            yield node


def imported(tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(module, name) imported from xgrammar at module level; name '' for a plain import."""
    for node in module_level(tree.body):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "xgrammar":
            for alias in node.names:
                if alias.name != "*":
                    yield node.module or "", alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "xgrammar":
                    yield alias.name, ""


def aliases(tree: ast.Module) -> set[str]:
    """Names bound to the xgrammar module anywhere: import xgrammar [as x]; x = LazyLoader(..., "xgrammar")."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name == "xgrammar")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(
                isinstance(a, ast.Constant) and a.value == "xgrammar" for a in node.value.args):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def attributes(tree: ast.Module, names: set[str]) -> set[str]:
    """Attributes read off any of ``names`` (``xgr.GrammarCompiler`` -> GrammarCompiler)."""
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names}


def resolves(module: str, name: str) -> bool:
    """``from module import name`` (``import module`` when name is '') would succeed."""
    try:
        mod = importlib.import_module(module)
        return not name or hasattr(mod, name) or importlib.util.find_spec(module + "." + name) is not None
    except Exception:
        return False


def uses(root: str, backend: str) -> dict[str, tuple[str, str, str]]:
    """The xgrammar names the vllm package at ``root`` uses: dotted name -> (module, name, the first vLLM
    module using it, in walking order), name '' for a plain ``import module``. What its modules import
    from xgrammar at module level, and the attributes the ``backend`` module reads off xgrammar."""
    found: dict[str, tuple[str, str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(f for f in filenames if f.endswith(".py")):
            path = os.path.join(dirpath, filename)
            with open(path, encoding="utf-8", errors="replace") as fh:
                source = fh.read()
            if "xgrammar" not in source:
                continue
            where = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
            where = where[:-len(".__init__")] if where.endswith(".__init__") else where
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            pairs = set(imported(tree))
            if where == backend:
                pairs |= {("xgrammar", a) for a in attributes(tree, aliases(tree))}
            for module, name in sorted(pairs):
                found.setdefault(module + "." + name if name else module, (module, name, where))
    return found


def main(expected: str, backend: str) -> None:
    try:
        installed = md.version("xgrammar")
    except md.PackageNotFoundError:
        fail("xgrammar is not installed")
    if installed != expected:
        fail(f"xgrammar {installed} is installed, not {expected}")
    try:
        xgrammar = importlib.import_module("xgrammar")  # as vLLM imports it (not a static import: not roost's dependency)
    except Exception as exc:
        fail(f"import xgrammar {installed} failed: {type(exc).__name__}: {exc}")
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        fail("vllm is not installed")
    used = uses(next(iter(spec.submodule_search_locations)), backend)
    missing = sorted(f"{key} ({where})" for key, (module, name, where) in used.items() if not resolves(module, name))
    if missing:
        fail(f"xgrammar {installed} lacks {len(missing)} name(s) vLLM uses: "
             f"{'; '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
    try:
        importlib.import_module(backend)
    except Exception as exc:
        fail(f"import {backend} failed with xgrammar {installed}: {type(exc).__name__}: {exc}")
    print(PREFIX, "ok", f"xgrammar {installed} imports from {os.path.dirname(xgrammar.__file__ or '')}; the {len(used)} "
          f"xgrammar names vLLM uses resolve; {backend} imports", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
