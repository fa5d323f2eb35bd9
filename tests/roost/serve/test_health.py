"""Health-wait logic against a real vLLM server (slow) and its log-milestone parsing (fast)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from roost.errors import StageFailed
from roost.serve.health import HealthTimeout, log_progress, wait_until_ready


def test_log_progress_orders_milestones() -> None:
    assert log_progress("") == ("waiting for the server process", 0.0)
    assert log_progress("Resolved architecture: Qwen3ForCausalLM")[0] == "engine starting"
    name, frac = log_progress("Resolved architecture\nLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01]")
    assert name == "loading weights (1/2 shards)" and 0.15 < frac < 0.5
    assert log_progress("Loading weights took 0.05 seconds\nCPU KV cache size: 10 tokens")[0] == "KV cache sized"
    assert log_progress("x\nApplication startup complete.")[1] == 0.95


class _Proc:
    """A real child process standing in for a server that never listens (health-wait must notice)."""

    def __init__(self, argv: list[str], tmp: Path) -> None:
        self.log = tmp / "log"
        self.log.write_text("Resolved architecture: X\n")
        self.p = subprocess.Popen(argv)
        self.base_url = "http://127.0.0.1:9"  # discard port: nothing answers
        self.served_model_name = "m"

    def is_running(self) -> bool:
        return self.p.poll() is None

    def exit_code(self) -> int | None:
        return self.p.poll()

    def logs(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait()


def test_dead_server_fails_at_once_with_its_exit_code(tmp_path: Path) -> None:
    proc = _Proc([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path)
    t0 = time.monotonic()
    with pytest.raises(StageFailed, match="exited with code 3"):
        wait_until_ready(proc, api_key=None, timeout_s=60)
    assert time.monotonic() - t0 < 10


def test_timeout_is_its_own_class(tmp_path: Path) -> None:
    proc = _Proc([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path)
    try:
        with pytest.raises(HealthTimeout, match=r"not ready after 1 s \(last milestone: engine starting\)"):
            wait_until_ready(proc, api_key=None, timeout_s=1)
    finally:
        proc.stop()


class _Running:
    """The shared session server, seen as a handle that is up (the fixture owns its lifetime)."""

    def __init__(self, info, log: bool = True) -> None:  # type: ignore[no-untyped-def]
        self.base_url, self.served_model_name = info.base_url, info.model
        self._log = Path(info.log_path) if log else None

    def is_running(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def logs(self) -> str:
        return self._log.read_text() if self._log else ""

    def stop(self) -> None:
        pass


@pytest.mark.slow
def test_ready_server_passes_all_three_checks(vllm_server) -> None:  # type: ignore[no-untyped-def]
    result = wait_until_ready(_Running(vllm_server), api_key=vllm_server.api_key, timeout_s=30)
    assert result.health_ok_s <= result.models_ok_s <= result.completion_ok_s < 30
    assert "KV cache sized" in {m.name for m in result.milestones}


@pytest.mark.slow
def test_wrong_api_key_is_reported(vllm_server) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StageFailed, match="rejected roost's API key"):
        wait_until_ready(_Running(vllm_server, log=False), api_key="wrong", timeout_s=30)
