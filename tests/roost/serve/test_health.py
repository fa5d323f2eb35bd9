"""The one health wait: milestones from new log text only, the three readiness steps in order through
the vLLM client, a dead server failing the wait at once, a timeout of its own class.

Fast tests run the wait against a scripted OpenAI-compatible endpoint (only it can say exactly when
each step turns ready) and against real child processes through the process backend; the real vLLM
server checks the 401 roost reports for a wrong key (the contract test covers a real readiness)."""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from roost.errors import StageFailed
from roost.net import free_port
from roost.serve.base import Readiness, Server, ServerInfo, ServeSpec
from roost.serve.diagnose import Diagnosis
from roost.serve.health import HealthTimeout, ProgressTracker, ServerExited, log_progress, wait_until_ready
from roost.serve.phases import StartupPhases
from roost.serve.process import start_process_server

KEY = "health-test-key"


def test_log_progress_orders_milestones() -> None:
    assert log_progress("") == ("waiting for the server process", 0.0)
    assert log_progress("Resolved architecture: Qwen3ForCausalLM")[0] == "engine starting"
    name, frac = log_progress("Resolved architecture\nLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01]")
    assert name == "loading weights (1/2 shards)" and frac == pytest.approx(0.325)
    assert log_progress("Loading weights took 0.05 seconds\nCPU KV cache size: 10 tokens")[0] == "KV cache sized"
    assert log_progress("x\nApplication startup complete.")[1] == 0.95


def test_a_milestone_cut_between_two_reads_is_seen_when_its_line_ends() -> None:
    t = ProgressTracker()
    t.feed("Resolved architecture: Qwen3\nLoading wei", 1.0)
    assert (t.name, t.seen) == ("engine starting", {"engine starting": 1.0})
    t.feed("ghts took 0.05 seconds\n", 2.5)
    assert t.name == "weights loaded" and t.seen["weights loaded"] == 2.5
    assert t.seen["loading weights"] == 2.5  # "Loading wei" alone never matched: only the whole line did
    t.feed("CPU KV cache size: 10 tokens\r", 3.0)  # a bare \r ends a line too
    assert (t.name, t.fraction) == ("KV cache sized", 0.85)


def test_milestones_never_go_backwards() -> None:
    t = ProgressTracker()
    t.feed("CPU KV cache size: 10 tokens\n", 1.0)
    t.feed("Loading safetensors checkpoint shards: 100% Completed | 2/2\n", 2.0)  # a late progress line
    assert (t.name, t.fraction) == ("KV cache sized", 0.85)


# --- a scripted OpenAI-compatible endpoint -----------------------------------------------------------


class FakeVllm:
    """``/health`` 503 for the first ``health_after`` polls, then 200; ``/v1/models`` lists ``other``
    first, then ``tiny``; ``/v1/completions`` answers one choice. ``/v1/*`` needs ``Bearer KEY``."""

    def __init__(self, health_after: int = 3, models_after: int = 2) -> None:
        self.calls: list[tuple[str, str]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any] | None = None) -> None:
                data = json.dumps(body or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self) -> None:
                auth = self.headers.get("Authorization", "")
                outer.calls.append((self.path, auth))
                n = sum(1 for p, _ in outer.calls if p == self.path)
                if self.path == "/health":
                    return self._answer(200 if n > health_after else 503)
                if auth != f"Bearer {KEY}":
                    return self._answer(401, {"error": "Unauthorized"})
                if self.path == "/v1/models":
                    name = "tiny" if n > models_after else "other"
                    return self._answer(200, {"object": "list", "data": [{"id": name, "max_model_len": 2048}]})
                if self.path == "/v1/completions":
                    length = int(self.headers.get("Content-Length", 0))
                    body = json.loads(self.rfile.read(length))
                    assert body["max_tokens"] == 1 and body["model"] == "tiny"
                    return self._answer(200, {"choices": [{"text": " there"}]})
                return self._answer(404)

            do_GET = do_POST = _route

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Attached(Server):
    """A server that runs (the test owns it): its log arrives in the pieces given, then nothing."""

    def __init__(self, base_url: str, pieces: list[str] | None = None, log_file: Path | None = None) -> None:
        self.base_url, self.served_model_name = base_url, "tiny"
        self.pieces = list(pieces or [])
        self.log_file = log_file
        self.reads = 0

    def is_running(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def logs(self) -> str:
        if self.log_file is not None:
            return self.log_file.read_text()
        raise AssertionError("the wait must not re-read the whole log of a server that runs")

    def new_log_text(self) -> str:
        self.reads += 1
        return self.pieces.pop(0) if self.pieces else ""

    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        return None

    def phases(self, ready: Readiness) -> StartupPhases:
        return StartupPhases()

    def describe(self) -> ServerInfo:
        return ServerInfo(backend="process", host="t", base_url=self.base_url, served_model_name="tiny", port=0)

    def stop(self, grace_s: float | None = None) -> None:
        return None

    def clear_compile_cache(self, entry: str) -> str:
        raise AssertionError("the health wait never clears a compile cache")


@pytest.fixture
def fake() -> Iterator[FakeVllm]:
    f = FakeVllm()
    yield f
    f.close()


def test_ready_means_health_then_the_served_name_then_a_completion(fake: FakeVllm) -> None:
    server = Attached(fake.base_url, ["Resolved architecture: Qwen3\nLoading wei", "ghts took 0.05 seconds\n",
                                      "CPU KV cache size: 524,288 tokens\n", "INFO: Application startup complete.\n"])
    progress: list[tuple[str, float]] = []
    r = wait_until_ready(server, api_key=KEY, timeout_s=30, poll_interval_s=0.02,
                         on_progress=lambda n, f: progress.append((n, f)))
    paths = [p for p, _ in fake.calls]
    # /health until 200 (4th), then /v1/models until it lists "tiny" (3rd), then one completion
    assert paths == ["/health"] * 4 + ["/v1/models"] * 3 + ["/v1/completions"]
    assert all(auth == f"Bearer {KEY}" for _, auth in fake.calls)  # the one client sends the key everywhere
    assert r.polls == 6 and 0 < r.health_ok_s <= r.models_ok_s <= r.completion_ok_s < 30
    assert r.health_ok_at == pytest.approx(time.time(), abs=10)
    assert [m.name for m in r.milestones] == ["engine starting", "loading weights", "weights loaded", "KV cache sized",
                                              "API server up"]
    assert progress == [("engine starting", 0.05), ("weights loaded", 0.5), ("KV cache sized", 0.85),
                        ("API server up", 0.95), ("ready", 1.0)]
    assert server.reads == r.polls + 1  # one read of new text per poll and one at ready, never the whole log


def test_a_log_that_lags_the_answers_still_times_the_api_server_from_health(fake: FakeVllm) -> None:
    """Docker's log follower on a busy host can deliver "Application startup complete" after the server
    already answered: /health's 200 is the proof the API server is up, and its time is the milestone's."""
    server = Attached(fake.base_url, ["Resolved architecture: Qwen3\n", "CPU KV cache size: 524,288 tokens\n"])
    r = wait_until_ready(server, api_key=KEY, timeout_s=30, poll_interval_s=0.02)
    up = {m.name: m.at_s for m in r.milestones}
    assert list(up) == ["engine starting", "KV cache sized", "API server up"]
    assert up["API server up"] == r.health_ok_s


def test_the_log_line_read_at_ready_times_the_api_server(fake: FakeVllm) -> None:
    pieces = ["Resolved architecture: Qwen3\n"] + [""] * 5 + ["INFO: Application startup complete.\n"]
    # six polls (the first test above), each reading one piece; the seventh piece is read at ready
    r = wait_until_ready(Attached(fake.base_url, pieces), api_key=KEY, timeout_s=30, poll_interval_s=0.02)
    up = {m.name: m.at_s for m in r.milestones}
    assert up["API server up"] > r.health_ok_s  # read at ready, after the answers (not replaced by the health time)


def test_a_wrong_key_is_reported_as_such(fake: FakeVllm) -> None:
    with pytest.raises(StageFailed, match=r"rejected roost's API key \(401 on /v1/models\)"):
        wait_until_ready(Attached(fake.base_url), api_key="wrong", timeout_s=30, poll_interval_s=0.02)


# --- real child processes through the process backend --------------------------------------------------


def _fake_interpreter(tmp_path: Path, body: str) -> tuple[ServeSpec, Path]:
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    python.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return ServeSpec(model_dir=model, served_model_name="tiny", port=free_port(), log_path=tmp_path / "log"), python


def test_a_server_that_exits_fails_the_wait_at_once_with_its_log_tail(tmp_path: Path) -> None:
    spec, python = _fake_interpreter(tmp_path, "print('Resolved architecture: X', flush=True)\n"
                                               "print('RuntimeError: Engine core initialization failed.', flush=True)\n"
                                               "sys.exit(3)")
    server = start_process_server(spec, python=python, host_name="t-health")
    try:
        t0 = time.monotonic()
        with pytest.raises(ServerExited, match="exited with code 3") as info:
            wait_until_ready(server, api_key=None, timeout_s=120)
        assert time.monotonic() - t0 < 60  # not the timeout
        assert info.value.server_exit_code == 3 and info.value.exit_code == 1  # the CLI's exit code stays 1
        assert str(info.value).endswith("last log lines:\nResolved architecture: X\n"
                                        "RuntimeError: Engine core initialization failed.")
    finally:
        server.stop()


def test_a_timeout_is_its_own_class(tmp_path: Path) -> None:
    spec, python = _fake_interpreter(tmp_path, "print('Resolved architecture: X', flush=True)\ntime.sleep(60)")
    server = start_process_server(spec, python=python, host_name="t-health")
    try:
        with pytest.raises(HealthTimeout, match=r"not ready after 2 s \(last milestone: engine starting\)"):
            wait_until_ready(server, api_key=None, timeout_s=2)
        assert server.is_running()
    finally:
        server.stop()


@pytest.mark.slow
def test_real_vllm_refuses_a_wrong_key(vllm_server) -> None:  # type: ignore[no-untyped-def]
    server = Attached(vllm_server.base_url, log_file=Path(vllm_server.log_path))
    with pytest.raises(StageFailed, match=r"rejected roost's API key \(401 on /v1/models\)"):
        wait_until_ready(server, api_key="wrong", timeout_s=30)
