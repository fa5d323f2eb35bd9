"""A profile's ``bench``, ``regress`` and ``evals`` are typed (``roost.profile_settings``) yet store,
compare and pass on exactly the dicts of the fields they set, and the dicts profiles were saved with
before they were typed still validate."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from roost.bench.settings import BenchSettings
from roost.profile_settings import BenchOverrides, EvalSpec, RegressOverrides
from roost.profiles import LOCAL, ORNITH_15_NVFP4, ModelProfile
from roost.regress import RegressConfig


def _old_shape(**update: Any) -> dict[str, Any]:
    """LOCAL as a saved document's data: plain JSON, ``update`` laid over it."""
    return json.loads(LOCAL.model_dump_json()) | update


def test_a_profile_stores_only_the_fields_it_sets() -> None:
    data = json.loads(LOCAL.model_dump_json())
    assert json.dumps(data["bench"]) == (
        '{"prompt_lengths": [128, 1024], "output_tokens": 64, "concurrency": [1, 4], "repeats": 2, "warmup": 2}')
    assert json.dumps(data["evals"]) == ('[{"task": "gsm8k", "dataset": "roost-demo/gsm8k-mini", "limit": 12, '
                                         '"max_tokens": 48, "temperature": 0.0, "thinking": false, "concurrency": 4}]')
    assert data["regress"] == {}
    assert ORNITH_15_NVFP4.model_dump()["evals"] == [{"task": "gsm8k"}, {"task": "math500"},
                                                     {"task": "mmlu-pro", "per_category": 50, "concurrency": 8}]
    assert ModelProfile.model_validate(data) == LOCAL
    assert json.loads(ModelProfile.model_validate(data).model_dump_json()) == data


def test_a_setting_reads_every_field_and_maps_the_ones_set() -> None:
    bench = LOCAL.bench
    assert (bench.repeats, bench.seed, bench.ttft_timeout_base_s) == (2, 0, 60.0)  # set, then defaults
    assert bench == {"prompt_lengths": [128, 1024], "output_tokens": 64, "concurrency": [1, 4], "repeats": 2,
                     "warmup": 2}
    assert "seed" not in bench and len(bench) == 5 and bench["warmup"] == 2
    with pytest.raises(KeyError):
        bench["seed"]
    assert BenchSettings(**bench) == BenchSettings(prompt_lengths=[128, 1024], output_tokens=64, concurrency=[1, 4],
                                                   repeats=2, warmup=2)
    assert {"max_num_seqs": 4, **bench}["max_num_seqs"] == 4  # what the flow adds stays unless the profile sets it
    assert bench == BenchOverrides.model_validate(dict(bench)) and bench != BenchOverrides()
    assert dict(ORNITH_15_NVFP4.evals[2]) == {"task": "mmlu-pro", "per_category": 50, "concurrency": 8}
    assert LOCAL.regress == {} and LOCAL.regress_config() == RegressConfig()


def test_documents_saved_before_the_settings_were_typed_still_validate() -> None:
    prof = ModelProfile.model_validate(_old_shape(
        bench={"repeats": None, "knee_tolerance": 0.1, "output_tokens": 32, "max_num_seqs": None},
        regress={"window": 3, "key_fields": None},
        evals=[{"task": "gsm8k", "limit": None, "retired_key": 1}, {"task": "mmlu-pro", "per_category": 5}]))
    assert prof.bench == {"output_tokens": 32, "max_num_seqs": None}  # None: the default; knee_tolerance is gone
    assert prof.bench.repeats == 3
    assert prof.regress_config() == RegressConfig(window=3)
    assert prof.evals[0] == {"task": "gsm8k", "limit": None}  # an unknown key is ignored, as for_task did
    assert [(s.task, s.per_category) for s in prof.eval_settings()] == [("gsm8k", None), ("mmlu-pro", 5)]


@pytest.mark.parametrize(("update", "match"), [
    ({"bench": {"repeats": 0}}, r"bench\.repeats"),
    ({"bench": {"repeatz": 1}}, r"bench\.repeatz"),
    ({"regress": {"window": 0}}, r"regress\.window"),
    ({"evals": [{"limit": 3}]}, r"evals\.0\.task"),
    ({"evals": [{"task": "nope"}]}, r"unknown task 'nope'"),
    ({"evals": [{"task": "gsm8k", "concurrency": 0}]}, r"concurrency"),
])
def test_a_bad_setting_is_refused_naming_it(update: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ModelProfile.model_validate(_old_shape(**update))


def test_the_settings_models_take_their_readers_fields() -> None:
    assert set(BenchOverrides.model_fields) == set(BenchSettings.model_fields)
    assert set(RegressOverrides.model_fields) == set(RegressConfig.model_fields)
    assert EvalSpec(task="gsm8k", temperature=0).model_dump() == {"task": "gsm8k", "temperature": 0.0}
