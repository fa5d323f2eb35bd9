from __future__ import annotations

import pytest

from roost import __version__
from roost.errors import UserError
from roost.serve.dockerfile import (
    DEFAULT_BASE_IMAGE,
    LABEL_DOCKERFILE_SHA,
    LABEL_MANAGED,
    BuildSpec,
    content_hash,
    render_dockerfile,
)


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


def test_tag_is_content_addressed_and_stable() -> None:
    a = render_dockerfile(BuildSpec())
    b = render_dockerfile(BuildSpec())
    assert a.tag == b.tag == f"roost/vllm:{a.sha256[:12]}"
    assert a.sha256 == content_hash(a.text, {})


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
