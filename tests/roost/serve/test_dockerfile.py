"""The serving image's Dockerfile: rendering, labels and the content-addressed tag (pinned)."""

from __future__ import annotations

import hashlib
import json

import pytest

from roost import __version__
from roost.errors import UserError
from roost.serve.dockerfile import (
    DEFAULT_BASE_IMAGE,
    LABEL_DOCKERFILE_SHA,
    LABEL_MANAGED,
    BuildSpec,
    render_dockerfile,
)

FIXED = BuildSpec(base_image="roost/vllm-cpu-base:0.32.0", base_image_digest="sha256:abc", roost_version="1.0.0")


def test_default_renders_from_ngc_base_with_pinned_patch_and_verification() -> None:
    r = render_dockerfile(BuildSpec())
    lines = r.text.splitlines()
    assert f"FROM {DEFAULT_BASE_IMAGE}" in lines
    assert DEFAULT_BASE_IMAGE == "nvcr.io/nvidia/vllm:26.07-py3"
    assert any('pip install --no-cache-dir --no-deps "xgrammar==0.2.8"' in line for line in lines)
    # the verification is the last instruction: import + version print + mismatch check
    assert lines[-1].startswith("RUN python3 -c") and "print('xgrammar', v" in lines[-1] and "v == '0.2.8'" in lines[-1]


def test_labels_carry_version_base_digest_patch_and_managed_flag() -> None:
    r = render_dockerfile(BuildSpec(base_image="roost/vllm-cpu-base:0.32.0", base_image_digest="sha256:abc"))
    assert r.labels[LABEL_MANAGED] == "true"
    assert r.labels["ai.roost.version"] == __version__
    assert r.labels["ai.roost.base-image"] == "roost/vllm-cpu-base:0.32.0"
    assert r.labels["ai.roost.base-digest"] == "sha256:abc"
    assert r.labels["ai.roost.xgrammar-version"] == "0.2.8"
    assert r.labels[LABEL_DOCKERFILE_SHA] == r.sha256
    assert 'ai.roost.base-digest="sha256:abc"' in r.text


def test_tag_of_a_fixed_spec_is_pinned() -> None:
    """Pinned: a change to the template or the hashing renames every image (and rebuilds it)."""
    r = render_dockerfile(FIXED)
    assert r.sha256 == "ce25886a4b5c11f496421d1c4237c387097bf15bf2387da84ad3acc41e8e40f7"
    assert r.tag == "roost/vllm:ce25886a4b5c"
    with_args = render_dockerfile(FIXED.model_copy(update={"build_args": {"PIP_DEFAULT_TIMEOUT": "60"}}))
    assert with_args.tag == "roost/vllm:0116691e45fc"


def test_the_hash_covers_the_text_and_the_sorted_build_args() -> None:
    """The rule the module states, recomputed here with hashlib: sha256(text, NUL, JSON of sorted args)."""
    args = {"B_ARG": "2", "A_ARG": "1"}
    r = render_dockerfile(FIXED.model_copy(update={"build_args": args}))
    expected = hashlib.sha256(r.text.encode() + b"\0" + json.dumps([["A_ARG", "1"], ["B_ARG", "2"]]).encode())
    assert r.sha256 == expected.hexdigest() and r.tag == f"roost/vllm:{expected.hexdigest()[:12]}"
    assert render_dockerfile(FIXED).sha256 == hashlib.sha256(render_dockerfile(FIXED).text.encode() + b"\0[]").hexdigest()


@pytest.mark.parametrize(
    "change",
    [
        {"base_image": "roost/vllm-cpu-base:0.32.0"},
        {"base_image_digest": "sha256:1234"},
        {"xgrammar_version": "0.2.9"},
        {"roost_version": "9.9.9"},
        {"build_args": {"PIP_DEFAULT_TIMEOUT": "60"}},
    ],
)
def test_every_input_changes_the_tag(change: dict[str, object]) -> None:
    assert render_dockerfile(BuildSpec(**change)).tag != render_dockerfile(BuildSpec()).tag  # type: ignore[arg-type]


def test_build_arg_values_change_the_tag_and_are_declared() -> None:
    a = render_dockerfile(BuildSpec(build_args={"PIP_DEFAULT_TIMEOUT": "60"}))
    b = render_dockerfile(BuildSpec(build_args={"PIP_DEFAULT_TIMEOUT": "180"}))
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
        render_dockerfile(BuildSpec(**change))  # type: ignore[arg-type]
