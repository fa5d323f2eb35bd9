"""The serving image's Dockerfile: a vLLM base image plus the xgrammar patch layer.

Pure: rendering and tagging only (``roost.serve.docker.images`` builds it). The tag is
content-addressed: ``roost/vllm:<sha12>`` where the hash covers the rendered Dockerfile and the
build args, so the same inputs always name the same image and a build can be skipped when the tag
exists. The base image's digest is part of the rendered text (a label), so a re-pulled base that
changed gives a new tag.

The patch layer pins xgrammar with ``--no-deps`` so pip can never swap the base image's own torch
build (NGC ships a CUDA torch that PyPI's wheels would replace), and the last step imports xgrammar
and checks its version, so a build whose patch did not take fails at build time, not at serve time.
"""

from __future__ import annotations

import hashlib
import json
import re

from pydantic import BaseModel, Field

from roost import __version__ as ROOST_VERSION
from roost.errors import UserError

DEFAULT_BASE_IMAGE = "nvcr.io/nvidia/vllm:26.07-py3"
# vLLM 0.32 pins xgrammar==0.2.8; the patch layer re-pins it explicitly so the image says what it runs.
DEFAULT_XGRAMMAR_VERSION = "0.2.8"
IMAGE_REPOSITORY = "roost/vllm"

LABEL_MANAGED = "ai.roost.managed"
LABEL_ROOST_VERSION = "ai.roost.version"
LABEL_BASE_IMAGE = "ai.roost.base-image"
LABEL_BASE_DIGEST = "ai.roost.base-digest"
LABEL_XGRAMMAR = "ai.roost.xgrammar-version"
LABEL_DOCKERFILE_SHA = "ai.roost.dockerfile-sha"

_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")

TEMPLATE = """\
# Rendered by roost {roost_version}; do not edit: change the build spec instead.
FROM {base_image}
{build_arg_lines}\
# xgrammar patch: pinned, no dependency changes to the base image's torch/vLLM.
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-deps "xgrammar=={xgrammar_version}"
LABEL {labels}
# Verify the patch took: import it and print its version (the build fails on a mismatch).
# (xgrammar has no __version__: the installed distribution's metadata is the version.)
RUN python3 -c "import sys, importlib.metadata, xgrammar; v = importlib.metadata.version('xgrammar'); print('xgrammar', v, 'imports from', xgrammar.__file__); sys.exit(0 if v == '{xgrammar_version}' else 'xgrammar ' + v + ' != {xgrammar_version}')"
"""


class BuildSpec(BaseModel):
    """What the serving image is made of."""

    base_image: str = Field(default=DEFAULT_BASE_IMAGE, description="The vLLM base image (per host profile).")
    base_image_digest: str = Field(
        default="", description="Digest or image id of the base as found locally; labelled and hashed into the tag."
    )
    xgrammar_version: str = DEFAULT_XGRAMMAR_VERSION
    roost_version: str = ROOST_VERSION
    build_args: dict[str, str] = Field(
        default_factory=dict, description="Docker build args (e.g. PIP_DEFAULT_TIMEOUT); hashed into the tag."
    )


class RenderedDockerfile(BaseModel):
    """A rendered Dockerfile and the content-addressed tag it builds to."""

    text: str
    sha256: str = Field(description="sha256 of the Dockerfile text and the sorted build args.")
    tag: str = Field(description="roost/vllm:<first 12 hex of sha256>")
    labels: dict[str, str]
    build_args: dict[str, str]


def _check(spec: BuildSpec) -> None:
    if not _IMAGE_REF.match(spec.base_image):
        raise UserError(f"base image {spec.base_image!r} is not a valid image reference: use e.g. {DEFAULT_BASE_IMAGE}")
    if not _VERSION.match(spec.xgrammar_version):
        raise UserError(
            f"xgrammar version {spec.xgrammar_version!r} is not a pinned version: use an exact one such as {DEFAULT_XGRAMMAR_VERSION}"
        )
    for key in spec.build_args:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise UserError(f"build arg name {key!r} is not a valid identifier: use letters, digits and underscores")


def image_labels(spec: BuildSpec) -> dict[str, str]:
    """The labels every roost-built image carries (``ai.roost.managed=true`` marks it as roost's)."""
    return {
        LABEL_MANAGED: "true",
        LABEL_ROOST_VERSION: spec.roost_version,
        LABEL_BASE_IMAGE: spec.base_image,
        LABEL_BASE_DIGEST: spec.base_image_digest,
        LABEL_XGRAMMAR: spec.xgrammar_version,
    }


def _label_line(labels: dict[str, str]) -> str:
    return " \\\n      ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())


def content_hash(text: str, build_args: dict[str, str]) -> str:
    """sha256 over the Dockerfile text and the build args (sorted), hex."""
    h = hashlib.sha256(text.encode())
    h.update(b"\0")
    h.update(json.dumps(sorted(build_args.items())).encode())
    return h.hexdigest()


def render_dockerfile(spec: BuildSpec) -> RenderedDockerfile:
    """Render the Dockerfile for ``spec`` and name the image it builds to."""
    _check(spec)
    labels = image_labels(spec)
    arg_lines = "".join(f"ARG {k}\n" for k in sorted(spec.build_args))
    text = TEMPLATE.format(
        roost_version=spec.roost_version,
        base_image=spec.base_image,
        build_arg_lines=arg_lines,
        xgrammar_version=spec.xgrammar_version,
        labels=_label_line(labels),
    )
    sha = content_hash(text, spec.build_args)
    return RenderedDockerfile(
        text=text,
        sha256=sha,
        tag=f"{IMAGE_REPOSITORY}:{sha[:12]}",
        labels={**labels, LABEL_DOCKERFILE_SHA: sha},
        build_args=dict(spec.build_args),
    )
