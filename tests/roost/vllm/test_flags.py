"""roost.vllm.flags: vLLM's flags as its parser reads them, and the secret checks that follow them."""

from __future__ import annotations

import pytest

from roost.errors import UserError
from roost.serve.base import check_vllm_args
from roost.vllm.flags import carries_secret, vllm_flag


def test_flags_are_read_as_vllms_parser_reads_them() -> None:
    assert vllm_flag("--max_model_len=4096") == "--max-model-len"
    assert vllm_flag("--api-key sk-1") == "--api-key"
    assert vllm_flag(" --enforce_eager ") == "--enforce-eager"
    assert vllm_flag("4096") == "4096"


@pytest.mark.parametrize("arg", ["--api-key=sk-1", "--api_key=sk-1", "--api-ke=sk-1", "--api-key sk-1",
                                 "--hf-token=hf_1", "--hf_token=hf_1", "--hf-tok=hf_1", " --api-key=sk-1"])
def test_every_spelling_of_a_secret_flag_is_refused_without_echoing_it(arg: str) -> None:
    assert carries_secret(arg) in ("--api-key", "--hf-token")
    with pytest.raises(UserError, match="carries a secret") as info:
        check_vllm_args(["--enforce-eager", arg], source="--vllm-arg")
    assert "sk-1" not in str(info.value) and "hf_1" not in str(info.value)


@pytest.mark.parametrize("arg", ["--api-server-count=2", "--enforce-eager", "-O3", "--hf-config-path=/x", "sk-1"])
def test_other_flags_pass(arg: str) -> None:
    assert carries_secret(arg) is None
    check_vllm_args([arg])
