"""The audit and the plan name the model and the window the same way for every built-in profile on its
host: the profile's served name and max_model_len, an override's --max-model-len over both, the
checkpoint's own window only when neither says one (``roost.plan.args.served_as``, issue 39)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support import replicas

from roost.hosts import get_host
from roost.plan.args import parse_overrides
from roost.plan.inputs import PlanInputs
from roost.plan.preflight import PlanReport, plan_checkpoint
from roost.plan.report import AuditReport, audit_for_host
from roost.profiles import LOCAL, PROFILES, ModelProfile
from roost.vllm.argv import VllmArgv

CHECKPOINTS: dict[str, Callable[[], replicas.ReplicaSpec]] = {
    "ornith-35b": replicas.ornith_35b_a3b,
    "ornith-9b": replicas.ornith_9b,
    "ornith-1.5-35b-a3b-nvfp4": replicas.nvfp4_moe_mtp,
}
"""A replica shaped like each Spark profile's checkpoint (the demo profile's is the tiny model itself)."""


@pytest.fixture(scope="module")
def checkpoint_of(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Callable[[str], Path]:
    made: dict[str, Path] = {LOCAL.name: tiny_model}

    def get(profile: str) -> Path:
        if profile not in made:
            made[profile] = replicas.write_replica(CHECKPOINTS[profile](), tmp_path_factory.mktemp("agree") / profile)
        return made[profile]

    return get


def _served(args: list[str]) -> tuple[str | None, str | None]:
    """The --served-model-name and --max-model-len an argv gives (the last one, as vLLM reads it)."""
    argv = VllmArgv(args)
    names, windows = argv.values("--served-model-name"), argv.values("--max-model-len")
    return (names[-1] if names else None), (windows[-1] if windows else None)


def _audit_and_plan(path: Path, prof: ModelProfile, inputs: PlanInputs) -> tuple[AuditReport, PlanReport]:
    host = get_host(prof.host)
    audit = audit_for_host(path, host, inputs=inputs)
    return audit, plan_checkpoint(audit, host, inputs)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_audit_and_plan_agree_for_every_built_in_profile(name: str, checkpoint_of: Callable[[str], Path]) -> None:
    prof = PROFILES[name]
    inputs = prof.plan_inputs()
    audit, plan = _audit_and_plan(checkpoint_of(name), prof, inputs)
    native = audit.config.max_position_embeddings
    window = parse_overrides(inputs.vllm_overrides).max_model_len or prof.max_model_len or native
    assert (audit.served_model_name, audit.max_model_len) == (plan.served_model_name, plan.max_model_len) \
        == (prof.served_model_name, window)
    assert audit.native_max_model_len == native
    assert _served(audit.vllm_args) == _served(plan.vllm_args) == (prof.served_model_name, str(window))
    # without the profile: the directory's name and the checkpoint's own window
    plain = audit_for_host(checkpoint_of(name), get_host(prof.host))
    assert plain.max_model_len == plain.native_max_model_len == native


def test_the_demo_profile_is_audited_at_its_window_not_the_checkpoints(tiny_model: Path) -> None:
    """The issue's case: the demo checkpoint's config says 4,096 tokens, the profile serves 2,048 as ``tiny``."""
    audit, plan = _audit_and_plan(tiny_model, LOCAL, LOCAL.plan_inputs())
    assert (audit.max_model_len, plan.max_model_len, audit.native_max_model_len) == (2048, 2048, 4096)
    assert audit.served_model_name == plan.served_model_name == "tiny" != tiny_model.name
    assert audit.kv_cache_memory_bytes < audit_for_host(tiny_model, get_host("cpu")).kv_cache_memory_bytes


def test_an_override_window_wins_over_the_profiles_in_both(tiny_model: Path) -> None:
    inputs = LOCAL.plan_inputs(["--max-model-len=1024"])
    audit, plan = _audit_and_plan(tiny_model, LOCAL, inputs)
    assert audit.max_model_len == plan.max_model_len == 1024
    assert _served(audit.vllm_args)[1] == "1024" == _served(plan.vllm_args)[1]


def test_without_a_profile_the_audit_keeps_the_directorys_name_and_native_window(tiny_model: Path) -> None:
    audit, plan = _audit_and_plan(tiny_model, LOCAL, PlanInputs())
    assert (audit.served_model_name, audit.max_model_len) == (plan.served_model_name, plan.max_model_len) \
        == (tiny_model.name, 4096)
