from roost.serve.vllm_log import parse_vllm_log

CPU_LINE = ("(EngineCore pid=8304) INFO 11-30 07:57:24 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, "
            "Maximum concurrency for 2,048 tokens per request: 256.00x")
ORNITH_35B_RECIPE = """(EngineCore) INFO Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.
(EngineCore) INFO GPU KV cache size: 412,980 tokens
(EngineCore) INFO Maximum concurrency for 262,144 tokens per request: 1.58x
(Worker) INFO Model loading took 65.53 GiB memory and 440.12 seconds
"""


def test_cpu_kv_line_on_one_line() -> None:
    facts = parse_vllm_log(CPU_LINE)
    assert facts.kv_cache_tokens == 524_288
    assert facts.max_concurrency == 256.0
    assert facts.max_concurrency_len == 2048


def test_ornith_35b_recipe_gpu_lines() -> None:
    facts = parse_vllm_log(ORNITH_35B_RECIPE)
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.attention_block_size) == (412_980, 1.58, 1056)
    assert facts.max_concurrency_len == 262_144
    assert facts.model_load_gib == 65.53 and facts.model_load_s == 440.12


def test_last_occurrence_wins_after_restart() -> None:
    facts = parse_vllm_log(ORNITH_35B_RECIPE + CPU_LINE)
    assert facts.kv_cache_tokens == 524_288


def test_nothing_logged_yet() -> None:
    facts = parse_vllm_log("INFO starting\n")
    assert facts.kv_cache_tokens is None and facts.max_concurrency is None


def test_access_log_lines_are_told_apart_from_the_rest() -> None:
    from roost.serve.vllm_log import is_access_log

    assert is_access_log('(APIServer pid=77) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert is_access_log('INFO:     127.0.0.1:40001 - "GET /metrics HTTP/1.1" 401 Unauthorized')
    assert not is_access_log("INFO 12-01 01:23:56 [gpu_model_runner.py:2011] Model loading took 0.01 GiB and 1.2 s")
    assert not is_access_log("(EngineCore pid=78) CPU KV cache size: 524,288 tokens")
