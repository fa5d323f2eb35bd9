"""The MTP A/B finds ``--speculative-config`` in every spelling vLLM reads (roost.vllm.argv)."""

from __future__ import annotations

import pytest

from roost.bench import mtp
from roost.bench.validity import num_speculative_tokens

CONFIG = '{"method":"mtp","num_speculative_tokens":1}'


@pytest.mark.parametrize("given", [
    ["--speculative_config", CONFIG],
    [f"--speculative_config={CONFIG}"],
    ["-sc", CONFIG],
])
def test_the_ab_sees_the_underscore_spelling_and_runs_the_baseline_without_it(given: list[str]) -> None:
    args = ["--max-model-len", "2048", *given, "--dtype", "bfloat16"]
    assert mtp.speculative_config(args) == CONFIG
    assert mtp.without_speculative(args) == ["--max-model-len", "2048", "--dtype", "bfloat16"]
    assert num_speculative_tokens(args) == 1


def test_keys_given_one_by_one_are_a_speculative_config_too() -> None:
    args = ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "1"]
    assert mtp.speculative_method(mtp.speculative_config(args) or "") == "mtp"
    assert mtp.without_speculative(args) == []
