"""The blocks carry exactly the fields of the profiles they store, and round-trip them unchanged."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from blocks.hosts import LEGACY_HOST_SLUG, HostBlock, builtin_host_documents, host_fields
from blocks.profiles import ModelProfileBlock, builtin_profile_documents, profile_document_name
from roost.errors import UserError
from roost.hosts import HOSTS, HostProfile
from roost.profiles import PROFILES, ModelProfile

PREFECT_NAME = re.compile(r"^[a-z0-9-]+$")  # what Prefect accepts as a block document name


@pytest.mark.parametrize(("block", "model"), [(HostBlock, HostProfile), (ModelProfileBlock, ModelProfile)])
def test_same_fields_types_and_defaults(block: type[BaseModel], model: type[BaseModel]) -> None:
    bf, mf = block.model_fields, model.model_fields
    assert set(bf) == set(mf)
    for name in mf:
        assert bf[name].annotation == mf[name].annotation, name
        assert bf[name].is_required() == mf[name].is_required(), name
        if not mf[name].is_required():
            assert bf[name].get_default(call_default_factory=True) == mf[name].get_default(call_default_factory=True), name


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_host_round_trip(host: str) -> None:
    assert HostBlock.from_profile(HOSTS[host]).to_profile() == HOSTS[host]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_round_trip(profile: str) -> None:
    assert ModelProfileBlock.from_profile(PROFILES[profile]).to_profile() == PROFILES[profile]


def test_builtin_documents() -> None:
    hosts, profiles = builtin_host_documents(), builtin_profile_documents()
    assert sorted(hosts) == sorted(HOSTS) and {"cpu", "spark", "cpu-vllm-0-24"} <= set(hosts)
    assert hosts["cpu-vllm-0-24"].vllm_venv == "vllm-venv-0.24.0" and hosts["cpu"].vllm_venv == ""
    assert sorted(profiles) == sorted(profile_document_name(n) for n in PROFILES)
    assert {"local", "ornith-1-5-35b-a3b-nvfp4", "ornith-35b", "ornith-9b"} <= set(profiles)
    assert all(PREFECT_NAME.match(n) for n in [*hosts, *profiles])
    assert profiles["ornith-1-5-35b-a3b-nvfp4"].name == "ornith-1.5-35b-a3b-nvfp4"  # the profile keeps its name


@pytest.mark.parametrize(("name", "doc"), [("ornith-1.5-35b-a3b-nvfp4", "ornith-1-5-35b-a3b-nvfp4"),
                                           ("My_Model 2", "my-model-2"), ("a..b", "a-b"), ("local", "local")])
def test_profile_document_name(name: str, doc: str) -> None:
    assert profile_document_name(name) == doc


def test_block_type_slugs_and_names() -> None:
    assert (HostBlock.get_block_type_slug(), HostBlock.get_block_type_name()) == ("roost-host", "Roost Host")
    assert (ModelProfileBlock.get_block_type_slug(), ModelProfileBlock.get_block_type_name()) == (
        "model-profile", "Model Profile")
    assert LEGACY_HOST_SLUG == "spark-host"  # what earlier releases saved hosts as, read for the migration


def test_a_saved_host_with_a_venv_outside_the_venv_root_is_refused() -> None:
    """A document's vllm_venv is checked as the profile's is: no empty, '.' or '..' parts."""
    data = HostBlock.from_profile(HOSTS["cpu-vllm-0-24"]).model_dump(mode="json") | {"vllm_venv": "../../etc"}
    with pytest.raises(UserError, match=r"^vllm_venv '\.\./\.\./etc': "):
        HostProfile.model_validate(host_fields(data, "box"))


def test_host_fields_take_the_document_name_and_drop_foreign_keys() -> None:
    """A saved document's data: the block's own keys (``block_type_slug``) and unknown ones are dropped."""
    data = HostBlock.from_profile(HOSTS["cpu"]).model_dump(mode="json") | {"name": "other", "retired": 1}
    fields = host_fields(data, "box")
    assert set(fields) == set(HostProfile.model_fields)
    assert HostProfile.model_validate(fields) == HOSTS["cpu"].model_copy(update={"name": "box"})
