"""The blocks are the domain models (``HostBlock`` a ``HostProfile``, ``ModelProfileBlock`` a
``ModelProfile``): they validate as the profiles do, and documents saved before still load."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from blocks.hosts import HostBlock, host_fields
from blocks.profiles import ModelProfileBlock
from roost.hosts import CPU, HostProfile
from roost.profiles import LOCAL, ModelProfile


def test_the_blocks_declare_no_field_of_their_own() -> None:
    assert issubclass(HostBlock, HostProfile) and issubclass(ModelProfileBlock, ModelProfile)
    for block, model in ((HostBlock, HostProfile), (ModelProfileBlock, ModelProfile)):
        assert not set(block.__annotations__) & set(model.model_fields), block
        assert {n: repr(f) for n, f in block.model_fields.items()} == {n: repr(f) for n, f in model.model_fields.items()}


def test_a_profile_document_of_the_old_shape_loads() -> None:
    """A document saved while bench, regress and evals were dicts (block_type_slug included)."""
    data = json.loads(LOCAL.model_dump_json()) | {
        "block_type_slug": "model-profile", "bench": {"repeats": 1, "knee_tolerance": 0.05},
        "regress": {"window": 3}, "evals": [{"task": "gsm8k", "limit": 4}]}
    block = ModelProfileBlock.model_validate(data)
    assert block.bench == {"repeats": 1} and block.regress_config().window == 3
    assert block.to_profile() == LOCAL.model_copy(update={
        "bench": block.bench, "regress": block.regress, "evals": block.evals})
    saved = block.model_dump(mode="json", exclude={"block_type_slug"})
    assert (saved["bench"], saved["regress"], saved["evals"]) == ({"repeats": 1}, {"window": 3},
                                                                  [{"task": "gsm8k", "limit": 4}])


def test_a_profile_copied_with_plain_dicts_becomes_a_block() -> None:
    """Tests and callers update a profile with plain dicts (``model_copy`` does not validate)."""
    block = ModelProfileBlock.from_profile(LOCAL.model_copy(update={"bench": {"repeats": 1}, "evals": []}))
    assert block.bench == {"repeats": 1} and block.bench.output_tokens == 256 and block.evals == []


def test_a_block_refuses_what_the_profile_refuses() -> None:
    with pytest.raises(ValidationError, match="not both"):
        ModelProfileBlock.model_validate(LOCAL.model_dump() | {"gpu_memory_utilization": 0.5})
    with pytest.raises(ValidationError, match="HF_TOKEN is a secret"):
        ModelProfileBlock.model_validate(LOCAL.model_dump() | {"server_env": {"HF_TOKEN": "x"}})
    # the host profile refuses these with a UserError; the block, as any invalid data, with a ValidationError
    for bad in ({"vllm_venv": "../../etc"}, {"results_url": "http://u:p@box/"}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            HostBlock(**host_fields(CPU.model_dump() | bad, "box"))


def test_the_profile_form_opens_with_the_name_and_the_repository() -> None:
    """The serving settings are inherited (declared first); the form still opens with what a profile is."""
    from blocks.profiles import ModelProfileBlock

    props = ModelProfileBlock.model_json_schema()["properties"]
    order = sorted(props, key=lambda k: props[k]["position"])
    assert order[:4] == ["name", "repo_id", "revision", "served_model_name"]
    assert order.index("max_num_batched_tokens") + 1 == order.index("gpu_memory_utilization")
    assert [props[k]["position"] for k in order] == list(range(len(order)))
