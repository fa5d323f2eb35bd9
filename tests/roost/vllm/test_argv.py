"""roost.vllm.argv.VllmArgv: an argument list read and changed as vLLM's FlexibleArgumentParser reads it."""

from __future__ import annotations

import json

import pytest

from roost.vllm.argv import VllmArgv
from roost.vllm.flags import long_flag, vllm_flag

SPEC = "--speculative-config"


@pytest.mark.parametrize("args", [
    ["--speculative_config", '{"method":"mtp"}'],
    ["--speculative-config", '{"method":"mtp"}'],
    ['--speculative_config={"method":"mtp"}'],
    ["-sc", '{"method":"mtp"}'],  # vLLM's short alias
    ["--specu", '{"method":"mtp"}'],  # the shortest abbreviation vLLM expands to it
    ['--speculative-config {"method":"mtp"}'],  # one argument with a space, as roost's secret check reads it
])
def test_every_spelling_vllm_reads_is_the_flag(args: list[str]) -> None:
    argv = VllmArgv(["--max-model-len", "2048", *args, "--enforce-eager"])
    assert argv.has(SPEC) and argv.get(SPEC) == '{"method":"mtp"}'
    assert list(argv.remove(SPEC)) == ["--max-model-len", "2048", "--enforce-eager"]


def test_a_prefix_vllm_finds_ambiguous_or_another_flag_is_not_the_flag() -> None:
    argv = VllmArgv(["--spec", "x", "--model", "m"])  # --spec: several flags; --model: a flag of its own
    assert not argv.has(SPEC) and argv.get("--model-impl") is None and argv.get("--model") == "m"


def test_the_underscore_and_equals_forms_read_the_same_value() -> None:
    assert VllmArgv(["--max_model_len", "4096"]).get("--max-model-len") == "4096"
    assert VllmArgv(["--max-model-len=4096"]).get("--max_model_len") == "4096"
    assert VllmArgv(["--max_model_len=4096"]).get("--max-model-len") == "4096"


def test_the_last_value_wins_and_a_bare_flag_reads_empty() -> None:
    argv = VllmArgv(["--kv-cache-memory-bytes", "1", "--kv_cache_memory_bytes=2", "--enforce-eager"])
    assert argv.get("--kv-cache-memory-bytes") == "2" and argv.values("--kv-cache-memory-bytes") == ["1", "2"]
    assert argv.get("--enforce-eager") == "" and argv.get("--dtype") is None and not argv.has("--dtype")


def test_the_next_token_is_a_value_unless_it_is_an_option() -> None:
    argv = VllmArgv(["--enforce-eager", "--seed", "-1", "--dtype", "bfloat16"])
    assert argv.get("--enforce-eager") == "" and argv.get("--seed") == "-1" and argv.get("--dtype") == "bfloat16"


def test_set_replaces_in_place() -> None:
    argv = VllmArgv(["--dtype", "bfloat16", "--kv_cache_memory_bytes=1", "--enforce-eager", "--kv-cache-memory-bytes", "3"])
    out = argv.set("--kv-cache-memory-bytes", "42")
    assert list(out) == ["--dtype", "bfloat16", "--kv-cache-memory-bytes", "42", "--enforce-eager"]
    assert list(argv) == ["--dtype", "bfloat16", "--kv_cache_memory_bytes=1", "--enforce-eager",
                          "--kv-cache-memory-bytes", "3"]  # unchanged: a new list comes back
    assert list(VllmArgv(["--dtype", "auto"]).set("--enforce-eager")) == ["--dtype", "auto", "--enforce-eager"]
    assert list(VllmArgv(["--enforce-eager"]).set("--dtype", "auto")) == ["--enforce-eager", "--dtype", "auto"]


def test_remove_removes_both_forms_and_the_value() -> None:
    argv = VllmArgv(["--a", "--kv-cache-memory-bytes", "1", "--b=2", "--kv_cache_memory_bytes=3", "--c"])
    assert list(argv.remove("--kv-cache-memory-bytes")) == ["--a", "--b=2", "--c"]
    assert list(argv.remove("--not-given")) == list(argv)


def test_json_keys_given_one_by_one_are_gathered_as_vllm_does() -> None:
    argv = VllmArgv(["--speculative-config", '{"method":"ngram"}', "--speculative_config.method", "mtp",
                     "--speculative-config.num_speculative_tokens=1", "--dtype", "auto"])
    # vLLM appends the gathered keys after every other argument: they win over the whole JSON
    assert json.loads(argv.get(SPEC) or "") == {"method": "mtp", "num_speculative_tokens": 1}
    assert list(argv.remove(SPEC)) == ["--dtype", "auto"]
    listed = VllmArgv(["--compilation-config.cudagraph_capture_sizes+", "1,2", "--compilation-config.level", "1k"])
    assert json.loads(listed.get("--compilation-config") or "") == {"cudagraph_capture_sizes": ["1", "2"], "level": 1000}


def test_a_boolean_flag_and_its_no_form() -> None:
    assert VllmArgv(["--language_model_only"]).enabled("--language-model-only") is True
    assert VllmArgv(["--language-model-only", "--no-language-model-only"]).enabled("--language-model-only") is False
    assert VllmArgv(["--no-la", "--la"]).enabled("--language-model-only") is True
    assert VllmArgv(["--dtype", "auto"]).enabled("--language-model-only") is None


def test_a_list_round_trips() -> None:
    args = ["--model", "/m", "--dtype", "auto"]
    argv = VllmArgv(args)
    assert list(argv) == args and len(argv) == 4 and argv == VllmArgv(tuple(args)) and hash(argv) == hash(VllmArgv(args))
    assert repr(argv) == f"VllmArgv({args!r})"


def test_flag_names_as_vllm_spells_them() -> None:
    assert vllm_flag("--speculative_config.num_speculative_tokens=1") == "--speculative-config.num_speculative_tokens"
    assert long_flag("-sc") == SPEC and long_flag("--speculative-conf") == SPEC and long_flag("--spec") == "--spec"
    assert long_flag("--no-lang") == "--no-language-model-only" and long_flag("--model") == "--model"
