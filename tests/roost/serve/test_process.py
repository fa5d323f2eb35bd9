"""The process backend: argv, port checks, stop semantics, and reaping servers a crashed run left."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roost.errors import UserError
from roost.serve.base import ServeSpec
from roost.serve.process import reap_stale_servers, start_process_server, vllm_command


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


def test_port_in_use_is_a_user_error(tmp_path: Path, tiny_model: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec = ServeSpec(model_dir=tiny_model, served_model_name="m", port=port)
        with pytest.raises(UserError, match=f"port {port} on 127.0.0.1 is already in use"):
            start_process_server(spec)


def test_missing_checkpoint_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no config\.json"):
        start_process_server(ServeSpec(model_dir=tmp_path, served_model_name="m", port=1))


def test_missing_interpreter_is_a_user_error(tiny_model: Path, tmp_path: Path) -> None:
    spec = ServeSpec(model_dir=tiny_model, served_model_name="m", port=1)
    with pytest.raises(UserError, match="scripts/bootstrap"):
        start_process_server(spec, python=tmp_path / "nope" / "python")


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
    from roost.settings import roost_home

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
    deadline = time.monotonic() + 30
    while not pids.exists() or not pids.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pids.read_text())
    server.stop(grace_s=5)
    assert not server.is_running()
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    server.stop()  # idempotent
