"""The process backend: argv, port checks, stop semantics, reaping servers a crashed run left, the
incremental log, discovery. Stand-in interpreters (real child processes) play vLLM where only the
process matters; the contract test (test_backend_contract.py) runs the real vLLM, and so does the
cancelled cold load here (the hang on SIGTERM is vLLM's own)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect.exceptions import TerminationSignal
from support.wait import wait_for

from roost.errors import UserError
from roost.hosts import CPU
from roost.net import free_port
from roost.serve.base import ABORT_GRACE_S, Server, ServeSpec, StartFailed
from roost.serve.coldload import cold_load
from roost.serve.process import (
    STOP_GRACE_S,
    ProcessBackend,
    ProcessServer,
    process_servers,
    reap_stale_servers,
    remove_compile_cache_entry,
    start_process_server,
    vllm_command,
)
from roost.settings import roost_home


def test_vllm_command_never_carries_the_api_key(tmp_path: Path) -> None:
    spec = ServeSpec(model_dir=tmp_path, served_model_name="m", port=8123, vllm_args=["--max-model-len", "2048"])
    argv = vllm_command(spec, Path("/venv/bin/python"))
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[-2:] == ["--max-model-len", "2048"]
    assert "--api-key" not in argv
    assert argv.count("--served-model-name") == 1 and argv[argv.index("--served-model-name") + 1] == "m"


def test_the_served_name_is_passed_once_when_the_plan_already_names_it(tmp_path: Path) -> None:
    plan_args = ["--served-model-name", "m", "--max-model-len", "2048"]
    spec = ServeSpec(model_dir=tmp_path, served_model_name="m", port=8123, vllm_args=plan_args)
    argv = vllm_command(spec, Path("/venv/bin/python"))
    assert argv.count("--served-model-name") == 1 and argv[-4:] == plan_args


def test_an_override_serving_another_name_is_a_user_error(tmp_path: Path) -> None:
    spec = ServeSpec(model_dir=tmp_path, served_model_name="m", port=8123,
                     vllm_args=["--served-model-name", "m", "--served-model-name", "other"])
    with pytest.raises(UserError, match=r"'other'.*'m'"):
        vllm_command(spec, Path("/venv/bin/python"))


def test_a_taken_port_is_a_start_failure_retryable_on_another_port(tmp_path: Path, tiny_model: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec = ServeSpec(model_dir=tiny_model, served_model_name="m", port=port)
        with pytest.raises(StartFailed, match=f"port {port} on 127.0.0.1 is already in use") as info:
            start_process_server(spec)
    d = info.value.diagnosis
    assert d is not None and (d.failure_class, d.retryable) == ("port_in_use", True)
    assert d.evidence == f"port {port} on 127.0.0.1: [Errno 98] Address already in use"


def test_missing_checkpoint_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no config\.json"):
        start_process_server(ServeSpec(model_dir=tmp_path, served_model_name="m", port=1))


def test_missing_interpreter_is_a_user_error(tiny_model: Path, tmp_path: Path) -> None:
    spec = ServeSpec(model_dir=tiny_model, served_model_name="m", port=1)
    with pytest.raises(UserError, match="scripts/bootstrap"):
        start_process_server(spec, python=tmp_path / "nope" / "python")
    with pytest.raises(UserError, match=f"vLLM interpreter {tmp_path / 'nope' / 'python'} not found"):
        ProcessBackend(CPU, python=tmp_path / "nope" / "python").prepare()


def test_prepare_has_nothing_to_build(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("")
    backend = ProcessBackend(CPU, python=python)
    said: list[str] = []
    p = backend.prepare(log=said.append)
    assert (p.backend, p.skipped, p.cached, p.image) == ("process", True, False, "")
    assert p.note == said[0] == f"process backend: vLLM runs from {python}; no image to build"
    assert backend.prepare_key() is None and backend.is_prepared()


def test_api_key_reaches_vllm_through_env_only(tiny_model: Path, tmp_path: Path) -> None:
    """A stand-in interpreter that records its argv and env shows where the key goes."""
    fake_python = tmp_path / "python"
    out = tmp_path / "seen.json"
    fake_python.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                           f"json.dump({{'argv': sys.argv, 'key': os.environ.get('VLLM_API_KEY')}}, open({str(out)!r}, 'w'))\n")
    fake_python.chmod(0o755)
    spec = ServeSpec(model_dir=tiny_model, served_model_name="m", port=1, log_path=tmp_path / "log")
    server = start_process_server(spec, api_key="s3cret", python=fake_python, host_name="t-env")
    server.proc.wait(timeout=30)
    seen = json.loads(out.read_text())
    assert seen["key"] == "s3cret"
    assert "s3cret" not in " ".join(seen["argv"])
    server.stop()
    assert not server.state_file.exists()


def test_reap_stops_only_recorded_vllm_groups(tmp_path: Path) -> None:
    """A 'vLLM' left by a crashed run (its state file remains) is stopped; other processes are not."""
    state = roost_home() / "servers"
    state.mkdir(parents=True, exist_ok=True)
    # argv contains vllm.entrypoints so it looks like a server; it just sleeps.
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "vllm.entrypoints.openai.api_server"],
                            start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    (state / f"t-reap-{left.pid}.json").write_text(json.dumps({"pid": left.pid}))
    (state / f"t-reap-{other.pid}.json").write_text(json.dumps({"pid": other.pid}))
    try:
        stopped = reap_stale_servers("t-reap", grace_s=5)
        assert stopped == [left.pid]
        left.wait(timeout=10)
        assert other.poll() is None
        assert not list(state.glob("t-reap-*.json"))
    finally:
        for p in (left, other):
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()


def test_a_host_never_reaps_or_finds_the_servers_of_a_host_whose_name_starts_with_its_own() -> None:
    """Hosts ``t-pre`` and ``t-pre-2`` on one machine (two CPU "Sparks"): each sees only its own state files
    (seen in the team test: the first host's serve stage stopped the second one's cold load)."""
    state = roost_home() / "servers"
    state.mkdir(parents=True, exist_ok=True)
    theirs = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "vllm.entrypoints.openai.api_server"],
                              start_new_session=True)
    (state / f"t-pre-2-{theirs.pid}.json").write_text(json.dumps({"pid": theirs.pid, "port": 1, "host": "t-pre-2"}))
    try:
        assert reap_stale_servers("t-pre", grace_s=5) == []
        assert theirs.poll() is None and process_servers("t-pre") == []
        assert [s.pid for s in process_servers("t-pre-2")] == [theirs.pid]
        assert reap_stale_servers("t-pre-2", grace_s=5) == [theirs.pid]
    finally:
        if theirs.poll() is None:
            os.killpg(theirs.pid, 9)
        theirs.wait()


def test_stop_takes_the_children_with_it(tiny_model: Path, tmp_path: Path) -> None:
    """vLLM forks an engine core; stop() must end the whole process group, and be idempotent."""
    fake_python = tmp_path / "python"
    pids = tmp_path / "pids"
    fake_python.write_text(
        f"#!{sys.executable}\nimport subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'w').write(str(c.pid))\ntime.sleep(120)\n")
    fake_python.chmod(0o755)
    spec = ServeSpec(model_dir=tiny_model, served_model_name="m", port=1, log_path=tmp_path / "log")
    server = start_process_server(spec, python=fake_python, host_name="t-stop")
    wait_for("the fake server's child", lambda: pids.exists() and pids.read_text(), timeout_s=30, every_s=0.05)
    child = int(pids.read_text())
    server.stop(grace_s=5)
    assert not server.is_running()
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    server.stop()  # idempotent


def _interpreter(tmp_path: Path, body: str) -> Path:
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    python.chmod(0o755)
    return python


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def test_new_log_text_reads_only_what_is_new_and_skips_earlier_runs(tmp_path: Path) -> None:
    """A reused log file keeps an earlier run's text: this server's log starts after it. A line written
    in two pieces is handed out once, whole; every line reaches the log callback once."""
    log = tmp_path / "log"
    log.write_text("OLD RUN: RuntimeError: Engine core initialization failed\n")
    go = tmp_path / "go"
    python = _interpreter(tmp_path, (
        f"import os\nprint('first line', flush=True)\nsys.stdout.write('Loading wei'); sys.stdout.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "print('ghts took 0.05 seconds', flush=True)\nprint('last line', end='', flush=True)\nsys.exit(0)"))
    said: list[str] = []
    spec = ServeSpec(model_dir=_model(tmp_path), served_model_name="m", port=free_port(), log_path=log)
    server = start_process_server(spec, python=python, host_name="t-log", log=said.append)
    try:
        chunks: list[str] = []
        deadline = time.monotonic() + 30
        while "Loading wei" not in log.read_text():
            assert time.monotonic() < deadline
            chunks.append(server.new_log_text())
            time.sleep(0.05)
        chunks.append(server.new_log_text())
        assert "".join(chunks) == "first line\n"  # the unfinished line waits for its end
        go.write_text("")
        server.proc.wait(timeout=30)
        chunks.append(server.new_log_text())
        assert "".join(chunks) == "first line\nLoading weights took 0.05 seconds\nlast line\n"
        assert server.new_log_text() == ""
        assert server.logs() == "".join(chunks)  # without the earlier run's text
        assert server.diagnose() is None  # so the earlier run's failure is not this server's
        pid = server.pid
        assert said == [f"[vllm {pid}] first line", f"[vllm {pid}] Loading weights took 0.05 seconds",
                        f"[vllm {pid}] last line"]
    finally:
        server.stop()
    assert log.read_text().startswith("OLD RUN")  # the file itself is only appended to


def test_backend_start_reaps_a_crashed_run_warns_about_restart_policies_and_is_found(tmp_path: Path) -> None:
    host = CPU.model_copy(update={"name": "t-backend"})
    state = roost_home() / "servers"
    state.mkdir(parents=True, exist_ok=True)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "vllm.entrypoints.openai.api_server"],
                            start_new_session=True)
    (state / f"t-backend-{left.pid}.json").write_text(json.dumps({"pid": left.pid}))
    backend = ProcessBackend(host, python=_interpreter(tmp_path, "time.sleep(120)"))
    said: list[str] = []
    spec = ServeSpec(model_dir=_model(tmp_path), served_model_name="m", port=free_port(), log_path=tmp_path / "log",
                     restart_policy="unless-stopped")
    server = backend.start(spec, "k", backend.prepare(), log=said.append)
    try:
        left.wait(timeout=30)
        assert said[:2] == [
            "warning: restart policy unless-stopped applies to containers only; host t-backend runs vLLM as a "
            "process, which is not restarted",
            f"warning: stopped 1 vLLM server(s) a crashed earlier run left on host t-backend (pids [{left.pid}])",
        ]
        info = server.describe()
        assert (info.backend, info.host, info.port, info.served_model_name) == ("process", "t-backend", spec.port, "m")
        assert info.pid == server.proc.pid == os.getpgid(server.proc.pid)  # its own process group
        assert info.base_url == f"http://127.0.0.1:{spec.port}" and info.log_location == str(tmp_path / "log")
        assert backend.servers() == [info.model_copy(update={"started_at": backend.servers()[0].started_at})]
        assert abs((backend.servers()[0].started_at - info.started_at).total_seconds()) < 5  # type: ignore[operator]
    finally:
        server.stop()
        if left.poll() is None:
            os.killpg(left.pid, 9)
    assert backend.servers() == []


def test_a_compile_cache_entry_is_removed_and_nothing_else(tmp_path: Path) -> None:
    aot = tmp_path / "torch_compile_cache" / "torch_aot_compile"
    entry, other = aot / ("ab" * 32), aot / ("cd" * 32)
    for d in (entry / "inductor_cache" / "cw", other):
        d.mkdir(parents=True)
    (entry / "inductor_cache" / "cw" / "c.main.so").write_bytes(b"")
    assert remove_compile_cache_entry(str(entry)).startswith(f"removed the half-written compile-cache entry {entry}")
    assert not entry.exists() and other.is_dir()
    assert remove_compile_cache_entry(str(entry)) == f"the compile-cache entry {entry} is gone already"
    for refused in (aot, tmp_path, aot / ".." / "torch_aot_compile" / ("cd" * 32)):
        assert remove_compile_cache_entry(str(refused)).startswith(f"left {refused} in place")
    assert other.is_dir()


@pytest.mark.slow
def test_a_cancelled_cold_load_kills_the_vllm_that_hangs_on_sigterm_within_the_abort_grace(
        tiny_model: Path, tmp_path: Path) -> None:
    """vLLM's API server, interrupted while it waits for its engine core to load, never exits by itself
    (it has its SIGTERM, then nothing; its log may say ``KeyboardInterrupt: terminated``): a landing cancelled then kept the host's slot past
    Prefect's 30 s kill. The cancellation (Prefect's own TerminationSignal) kills it ABORT_GRACE_S after
    the SIGTERM, not after the clean-shutdown grace."""
    spec = ServeSpec(model_dir=tiny_model, served_model_name="tiny", port=free_port(), log_path=tmp_path / "vllm.log")
    started: list[ProcessServer] = []
    raised_at: list[float] = []

    def start(s: ServeSpec) -> Server:
        started.append(start_process_server(s, host_name="t-abort"))
        return started[-1]

    def wait(server: Server) -> object:
        deadline = time.monotonic() + 600
        while "(EngineCore" not in server.logs():  # the engine core runs: the API server waits on it
            assert server.is_running() and time.monotonic() < deadline, server.logs()[-2000:]
            time.sleep(0.1)
        raised_at.append(time.monotonic())
        raise TerminationSignal(signal.SIGTERM)

    with pytest.raises(TerminationSignal):
        cold_load(start, wait, spec)  # type: ignore[arg-type]
    took = time.monotonic() - raised_at[0]
    (server,) = started
    assert not server.is_running() and process_servers("t-abort") == []
    assert server.exit_code() == -signal.SIGKILL, server.logs()[-3000:]  # it hung: only the SIGKILL ended it
    assert ABORT_GRACE_S <= took < STOP_GRACE_S, took
