"""A cold load on a compile cache that a killed server left half-written, against a real vLLM on this CPU.

What happened in CI: a worker died mid-landing, the retried run stopped the orphan vLLM while torch
inductor was still building its kernel libraries, and from then on every start of that configuration
loaded a 0-byte ``.main.so`` from ``VLLM_CACHE_ROOT`` and died ("Engine core initialization failed").
Here a server is killed once inductor has written its first library; the libraries are then cut to
0 bytes (the kill may land between two of them: a 0-byte one is what a kill mid-link leaves, see
``logs/compile-cache-half-written.cpu.log``). The cold load must name the fault, remove that cache
entry, and come up on its second attempt, compiling afresh.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from roost.hosts import CPU
from roost.net import free_port
from roost.serve.base import ServeSpec
from roost.serve.coldload import cold_load
from roost.serve.health import wait_until_ready
from roost.serve.process import ProcessBackend

pytestmark = pytest.mark.slow


def _libraries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.main.so"))


def test_a_half_written_compile_cache_is_removed_and_the_retry_compiles_afresh(tiny_model: Path,
                                                                                tmp_path: Path) -> None:
    cache = tmp_path / "vllm-cache"
    spec = ServeSpec(model_dir=tiny_model, served_model_name="tiny", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048"],  # compiled: no --enforce-eager
                     env={"VLLM_CACHE_ROOT": str(cache)}, log_path=tmp_path / "vllm.log")
    backend = ProcessBackend(CPU.model_copy(update={"name": "test-compile-cache"}))
    prepared = backend.prepare()

    killed = backend.start(spec, None, prepared)
    try:
        deadline = time.monotonic() + 600
        while not _libraries(cache) and killed.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _libraries(cache), "inductor built no kernel library:\n" + killed.logs()[-3000:]
        os.killpg(killed.pid, signal.SIGKILL)  # a crash, not a shutdown
    finally:
        killed.stop()
    for lib in _libraries(cache):
        lib.write_bytes(b"")

    said: list[str] = []
    loaded = cold_load(lambda s: backend.start(s, None, prepared),
                       lambda srv: wait_until_ready(srv, api_key=None, timeout_s=900),
                       spec, log=said.append)
    try:
        first, second = loaded.attempts
        assert (first.failure_class, first.action) == ("compile_cache_corrupt", "clear the compile cache"), first
        assert first.evidence.endswith(".main.so: file too short"), first.evidence
        entry = Path(first.remediation.split("remove ", 1)[1].split(" and start again")[0])
        assert entry.parent == cache / "torch_compile_cache" / "torch_aot_compile"
        assert f"removed the half-written compile-cache entry {entry}: the next start compiles it afresh" in said
        assert second.ok and loaded.spec == spec
        assert _libraries(cache) and all(lib.stat().st_size > 0 for lib in _libraries(cache))  # compiled afresh
    finally:
        loaded.server.stop()
