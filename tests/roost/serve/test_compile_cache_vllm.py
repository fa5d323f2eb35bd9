"""A cold load on a compile cache that a killed server left half-written, against a real vLLM on this CPU.

What happened in CI: a worker died mid-landing, the retried run stopped the orphan vLLM while torch
inductor was still building its kernel libraries, and from then on every start of that configuration
loaded a 0-byte ``.main.so`` from ``VLLM_CACHE_ROOT`` and died ("Engine core initialization failed";
``logs/compile-cache-half-written.cpu.log`` is that log, captured by killing a server 25 s into its
compile and starting it again).

Here the session server's own compiled entry is put in the state such a kill leaves: no AOT artifact,
no AOT-autograd entries, 0-byte kernel libraries (new files: the running session server keeps the
ones it mapped). A server of the same configuration on the same cache (the library names depend on
both) must fail, be named ``compile_cache_corrupt``, have that entry removed, and come up on its
second attempt, compiling afresh; the cache is whole again afterwards.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from roost.hosts import CPU
from roost.net import free_port
from roost.serve.coldload import cold_load
from roost.serve.health import wait_until_ready
from roost.serve.process import ProcessBackend

pytestmark = pytest.mark.slow


def _libraries(entry: Path) -> list[Path]:
    return sorted(entry.rglob("*.main.so"))


def _leave_half_written(entry: Path) -> None:
    for artifact in entry.glob("rank_*/model"):
        artifact.unlink()
    shutil.rmtree(entry / "inductor_cache" / "aotautograd", ignore_errors=True)
    for lib in _libraries(entry):
        lib.unlink()  # never truncate in place: the session server has it mapped
        lib.write_bytes(b"")


def test_a_half_written_compile_cache_is_removed_and_the_retry_compiles_afresh(vllm_server: Any,
                                                                                tmp_path: Path) -> None:
    (entry,) = (vllm_server.compile_cache / "torch_compile_cache" / "torch_aot_compile").iterdir()
    assert _libraries(entry), f"the session server compiled no kernel library into {entry}"
    _leave_half_written(entry)

    spec = vllm_server.spec.model_copy(update={"port": free_port(), "log_path": tmp_path / "vllm.log"})
    backend = ProcessBackend(CPU.model_copy(update={"name": "test-compile-cache"}))
    prepared = backend.prepare()
    said: list[str] = []
    # the session server's key too: vLLM hashes its VLLM_* environment into the entry's name
    loaded = cold_load(lambda s: backend.start(s, vllm_server.api_key, prepared),
                       lambda srv: wait_until_ready(srv, api_key=vllm_server.api_key, timeout_s=900),
                       spec, log=said.append)
    try:
        first, second = loaded.attempts
        assert (first.failure_class, first.action) == ("compile_cache_corrupt", "clear the compile cache"), first
        assert first.evidence.endswith(".main.so: file too short"), first.evidence
        assert f"removed the half-written compile-cache entry {entry}: the next start compiles it afresh" in said
        assert second.ok and loaded.spec == spec
        assert list(entry.glob("rank_*/model"))  # compiled afresh and saved
        assert _libraries(entry) and all(lib.stat().st_size > 0 for lib in _libraries(entry))
    finally:
        loaded.server.stop()
