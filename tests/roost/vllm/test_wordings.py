"""roost.vllm.wordings: every vLLM log line roost reads, in one table, checked against the lines it was seen as."""

from __future__ import annotations

import pytest

from roost.serve import diagnose, health, phases, vllm_log
from roost.vllm import specdecode_log
from roost.vllm import wordings as W

SEEN = [(key, release, line) for key, w in W.WORDINGS.items() for release, line in w.seen]


@pytest.mark.parametrize(("key", "release", "line"), SEEN)
def test_each_wording_matches_the_lines_it_was_seen_as(key: str, release: str, line: str) -> None:
    assert W.WORDINGS[key].pattern.search(line) is not None, (key, release)
    assert W.WORDINGS[key].marker.search(line) is not None, (key, release)


def test_the_table_is_keyed_by_meaning_and_says_where_each_line_comes_from() -> None:
    assert W.WORDINGS["model_loaded"] is W.MODEL_LOADED and W.WORDINGS["spec_decoding"] is W.SPEC_DECODING
    assert all(w.source for w in W.WORDINGS.values())
    # the releases roost serves with (0.24.0: NGC 26.07, the recipes'; 0.32) where they word a line differently
    kv = W.KV_CACHE_SIZE.seen
    assert {release for release, _ in kv} == {"0.24.0", "0.32"} and len({line for _, line in kv}) == 2


def test_the_values_read_the_numbers() -> None:
    m = W.MODEL_LOADED.pattern.search("Model loading took 65.53 GiB memory and 440.118273 seconds")
    assert m is not None and m.groups() == ("65.53", "440.118273")
    m = W.KV_POOL_CPU.pattern.search("Explicitly set (1.0/23.54) GiB for KV cache on node 0.")
    assert m is not None and m.group(1) == "1.0"
    assert W.any_of(W.APP_STARTED, W.API_SERVER_STARTING).search("Starting vLLM API server 0 on http://x") is not None


def test_every_reader_reads_its_patterns_from_the_table() -> None:
    assert vllm_log._LOAD is W.MODEL_LOADED.pattern and vllm_log._POOL_GPU is W.KV_POOL_GPU.pattern
    assert vllm_log.EXPLAINED[0].pattern is W.AUTO_PREFETCH_LOCAL_FS.pattern
    assert phases._WEIGHTS is W.WEIGHTS_READ.pattern and phases._ENGINE_READY is W.ENGINE_READY.pattern
    assert dict((name, p) for name, p, _ in health.MILESTONES)["KV cache sized"] is W.KV_CACHE_SIZE.marker
    assert diagnose._KV_NEEDED is W.KV_NEEDED.pattern and diagnose._OOM is W.OUT_OF_MEMORY.pattern
    assert specdecode_log.SPEC_LINE is W.SPEC_DECODING.pattern


def test_a_predicted_line_is_written_with_the_words_the_readers_look_for() -> None:
    # roost.plan writes the lines it predicts from the table: they read back as vLLM's own lines do
    assert W.KV_POOL_GPU.line(" 56.92 GiB") == W.KV_POOL_GPU.seen[0][1]
    assert W.KV_CACHE_SIZE.line(" 524,288 tokens", before="GPU ") == W.KV_CACHE_SIZE.seen[0][1]
    assert W.MAX_CONCURRENCY.line(" 2,048 tokens per request: 256.00x") == W.MAX_CONCURRENCY.seen[0][1]
    m = W.KV_POOL_GPU.pattern.search(W.KV_POOL_GPU.line(" 1.5 GiB"))
    assert m is not None and m.group(1) == "1.5"
    assert W.ENGINE_READY.text.startswith("init engine (profile")  # escaped characters printed as they are
    with pytest.raises(ValueError, match="pattern"):
        W.TORCH_COMPILE_TOOK.line(" 1.0 s in total")  # 'takes' or 'took': no one text
