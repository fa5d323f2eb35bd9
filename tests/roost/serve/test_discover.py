"""Finding the server roost runs on a host from the process backend's state files, and probing its
key (real vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from roost.hosts import CPU
from roost.net import free_port
from roost.serve.base import ServerInfo
from roost.serve.discover import probe
from roost.serve.process import ProcessBackend, process_servers
from roost.settings import roost_home


@pytest.fixture
def state_dir() -> Iterator[Path]:
    d = roost_home() / "servers"
    d.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    yield d
    for f in d.glob("test-discover-*.json"):
        made.append(f)
        f.unlink()


def _write_state(d: Path, pid: int, port: int) -> None:
    (d / f"test-discover-{pid}.json").write_text(json.dumps(
        {"pid": pid, "host": "test-discover", "port": port, "model": "tiny", "log": "/dev/null", "started_at": 0.0}))


def test_stale_or_foreign_state_files_are_not_servers(state_dir: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    alive = subprocess.Popen(["sleep", "60"], start_new_session=True)  # alive, but not vLLM
    try:
        _write_state(state_dir, done.pid, 1)
        _write_state(state_dir, alive.pid, 2)
        (state_dir / "test-discover-garbage.json").write_text("{not json")
        assert process_servers("test-discover") == []
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.slow
def test_finds_the_running_server_and_its_key(vllm_server: object) -> None:
    base_url, api_key = vllm_server.base_url, vllm_server.api_key  # type: ignore[attr-defined]
    (found,) = process_servers("test-session")
    assert found.base_url == base_url and found.served_model_name == "tiny" and found.backend == "process"
    assert found.port == int(base_url.rsplit(":", 1)[1])
    assert found.pid is not None and os.getpgid(found.pid) == found.pid
    assert found.api_key_ref is None  # started with a key but no reference: probe to find it
    assert found.started_at is not None
    state = json.loads((roost_home() / "servers" / f"test-session-{found.pid}.json").read_text())
    assert api_key not in json.dumps(state)  # the key itself is never written
    assert probe(found, api_key) == "ok"
    assert probe(found, "wrong-key") == "unauthorized"
    assert probe(found, None) == "unauthorized"
    assert probe(found.model_copy(update={"served_model_name": "other"}), api_key) == "wrong-model"
    assert ProcessBackend(CPU.model_copy(update={"name": "test-session"})).servers() == [found]


def test_nothing_listening_is_unreachable() -> None:
    s = ServerInfo(host="cpu", backend="process", base_url=f"http://127.0.0.1:{free_port()}",
                      served_model_name="tiny", port=1)
    assert probe(s, None, timeout_s=2) == "unreachable"
