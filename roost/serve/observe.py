"""What a server roost started says about itself, read into the run record.

- :func:`record_start`: a healthy cold load's facts (vLLM's logged KV cache, load and compile
  phases, attempts) beside what the plan predicted;
- :func:`server_version`: vLLM's version as the server reports it;
- :func:`exit_diagnosis`: why a server that stopped answering mid-run exited, once it has.
"""

from __future__ import annotations

import time

from pydantic import SecretStr

from roost.records import RunRecord
from roost.serve.base import Server
from roost.serve.coldload import ColdLoad
from roost.serve.diagnose import Diagnosis, diagnose_exit
from roost.vllm.client import VllmClient, run_sync

EXIT_WAIT_S = 10.0
"""How long a server that stopped answering mid-run is given to exit before it counts as still running."""


def record_start(record: RunRecord, loaded: ColdLoad) -> None:
    """Record what the healthy server's start showed against what the plan predicted. What an earlier
    attempt failed with no longer describes the run (the attempts keep it)."""
    record.clear_failure()
    record.meta.vllm_args = list(loaded.spec.vllm_args)
    obs, facts = record.serve, loaded.facts
    obs.restart_policy = loaded.spec.restart_policy
    obs.attempts = list(loaded.attempts)
    obs.logged_kv_cache_tokens = facts.kv_cache_tokens
    obs.logged_max_concurrency = facts.max_concurrency
    obs.logged_block_size = facts.attention_block_size
    obs.logged_kv_pool_gib = facts.kv_pool_gib
    obs.logged_weights_gib, obs.logged_model_load_s = facts.model_load_gib, facts.model_load_s
    obs.attention_backends = list(facts.attention_backends)
    obs.moe_backends = list(facts.moe_backends)
    obs.explained_log_lines = [e.model_dump() for e in facts.explained]
    obs.start_to_healthy_s = loaded.readiness.completion_ok_s
    obs.health_detect_delay_s = loaded.readiness.detect_delay_s
    obs.load_s, obs.compile_s, obs.ready_s = loaded.phases.load_s, loaded.phases.compile_s, loaded.phases.ready_s


def server_version(base_url: str, key: SecretStr) -> str:
    """vLLM's version as the server reports it (``/version``); "" when it does not say."""

    async def ask() -> str:
        async with VllmClient(base_url, api_key=key.get_secret_value() or None) as client:
            return await client.version()

    return run_sync(ask)


def exit_diagnosis(server: Server, wait_s: float = EXIT_WAIT_S) -> Diagnosis | None:
    """What stopped ``server`` (``server_died``: the signal, or the log's error line; ``out_of_memory``:
    ``roost.serve.diagnose.diagnose_exit``) once it has exited; None when it still runs after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while server.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    if server.is_running():
        return None
    return diagnose_exit(server.exit_code(), server.diagnose())
