"""The cold-start counter (``support.coldstarts``) without vLLM: the argument lists it takes for a vLLM API
server, ``/proc`` and cgroup parsing, readiness from both log kinds, the summary, and the scanner itself
against a real process that runs a stand-in module (named as such) in place of vLLM's API server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import coldstarts as C

from roost.hosts import CPU
from roost.serve.base import ServeSpec
from roost.serve.docker.containers import docker_run_kwargs
from roost.serve.process import vllm_command
from roost.vllm.wordings import APP_STARTED

CID = "3007fa4c27ac8530b78452ed3fe83a01a05ad6baedb2a2acf7c103e6919325e2"


def test_the_api_servers_roost_starts_are_recognised(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    spec = ServeSpec(model_dir=tmp_path, served_model_name="tiny", port=8000, vllm_args=["--enforce-eager"])
    process = vllm_command(spec, Path("/root/.cache/roost/vllm-venv-0.24.0/bin/python"))
    docker = docker_run_kwargs(spec, CPU, image="roost/vllm:x", api_key=None)["command"]
    assert C.is_api_server(process) and C.is_api_server(docker)
    assert C.is_api_server(["/usr/bin/python3.12", "-B", "-X", "utf8", "-m", "vllm.entrypoints.openai.api_server"])
    assert C.is_api_server(["/venv/bin/vllm", "serve", "/m"])
    assert C.is_api_server(["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m"])
    assert C.describe(process) == "tiny on vllm-venv-0.24.0"
    assert C.describe(docker, "roost-coldload-tiny") == "tiny in container roost-coldload-tiny"


@pytest.mark.parametrize("argv", [
    ["/sbin/docker-init", "--", "python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/model"],
    [sys.executable, "-c", "import time; time.sleep(120)", "vllm.entrypoints.openai.api_server"],  # test_process's
    [sys.executable, "/tmp/t/python", "-m", "vllm.entrypoints.openai.api_server"],  # a fake interpreter script
    ["/venv/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=32)",
     "--multiprocessing-fork"],  # the engine core of the multiprocess executor
    ["/venv/bin/vllm", "bench", "serve", "--base-url", "http://x"],  # a client
    ["python", "-m", "vllm.entrypoints.cli.main", "bench", "serve"],
    ["python", "-m"], [],
])
def test_what_is_not_an_api_server(argv: list[str]) -> None:
    assert not C.is_api_server(argv)


def test_stat_and_cgroup_parsing() -> None:
    line = "4242 (python3 (a) b) S 17 4242 4242 0 -1 4194560 1 0 0 0 3 1 0 0 20 0 3 0 987654 1 2 3"
    assert C.parse_stat(line) == (17, 987654)
    ppid, start = C.parse_stat(Path("/proc/self/stat").read_text())
    assert ppid == os.getppid() and start > 0
    assert C.container_id(f"9:name=systemd:/docker/{CID}\n8:pids:/docker/{CID}\n") == CID
    assert C.container_id(f"0::/system.slice/docker-{CID}.scope\n") == CID
    assert C.container_id("4:memory:/process_api/fe0e3ad46a51006d266c4ceb41381762\n0::/\n") is None
    assert C.option(["--port", "80", "--served-model-name=tiny"], "--served-model-name") == "tiny"


def test_ready_from_a_growing_process_log(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes(b"INFO:     Application startup complete.\n")  # an earlier run's, before the offset
    w = C.ReadyWatch(log, log.stat().st_size, docker=False)
    assert w.poll(1.0) is None
    with log.open("ab") as fh:
        fh.write(b"(APIServer pid=7) INFO 12-05 17:37:00 [api_server.py:1] Starting vLLM server\nINFO:     Application st")
    assert w.poll(2.0) is None  # half a line: not yet
    with log.open("ab") as fh:
        fh.write(b"artup complete.\n")
    assert w.poll(3.0) == 3.0
    assert APP_STARTED.text == "Application startup complete"


def test_ready_from_a_docker_json_log() -> None:
    w = C.ReadyWatch(Path("/nonexistent"), 0, docker=True)
    lines = [{"log": "(APIServer pid=1) INFO 12-05 17:37:00 [launcher.py:46] Route: /health\r\n", "stream": "stdout",
              "time": "2026-12-05T17:37:00.685066818Z"},
             {"log": "INFO:     Application startup complete.\r\n", "stream": "stdout", "time": "2026-12-05T17:37:01.5Z"}]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    assert w.feed(data[:40], now=9.0) is None
    assert w.feed(data[40:], now=9.0) == 1796492221.5
    assert w.poll(10.0) is None  # a log that cannot be read: nothing


def test_the_summary() -> None:
    starts = [C.ColdStart(1, "tiny on vllm-venv", "tests/a.py::t1", started=100.0, ready=160.0, ended=300.0),
              C.ColdStart(2, "tiny on vllm-venv", "tests/a.py::t2", started=200.0, ready=230.0),
              C.ColdStart(3, "tiny on vllm-venv-0.24.0", "tests/b.py::t", started=400.0, ended=441.0),
              C.ColdStart(4, "tiny in container c", "tests/c.py::t", started=500.0, ready=580.5)]
    lines = C.summary_lines(starts, top=2)
    assert lines[0] == ("4 vLLM cold start(s), 3 reached ready; start to ready: 170.5 s in total, 80.5 s the largest "
                        "(tiny in container c, tests/c.py::t)")
    assert lines[1] == "never ready: tiny on vllm-venv-0.24.0, tests/b.py::t (stopped after 41.0 s)"
    assert lines[2].startswith("by file (the 2 that spent most of 3)")
    assert lines[3].split() == ["tests/a.py", "2", "2", "90.0", "/", "60.0"]
    assert lines[4].split() == ["tests/c.py", "1", "1", "80.5", "/", "80.5"]
    assert C.summary_lines([]) == ["0 vLLM cold start(s), 0 reached ready; start to ready: 0.0 s in total"]


def test_a_container_is_the_sessions_when_it_mounts_or_its_engine_lies_in_a_session_directory(tmp_path: Path) -> None:
    session = tmp_path / "session"

    def container(root: Path, cid: str, source: Path) -> None:
        (root / "containers" / cid).mkdir(parents=True)
        (root / "containers" / cid / "config.v2.json").write_text(json.dumps(
            {"Name": "/roost-coldload-tiny", "MountPoints": {"/model": {"Source": str(source), "Destination": "/model"}}}))

    docker = tmp_path / "docker"
    container(docker, CID, session / "docker-tiny-model")
    container(docker, "b" * 64, Path("/tmp/elsewhere"))
    container(session / "engine" / "data", "d" * 64, Path("/tmp/elsewhere"))  # an engine of the session's own
    s = C.Scanner(roots=[session], docker_root=docker)
    s._dockerds = lambda: [(1, session / "engine" / "data")]  # type: ignore[method-assign]
    found = s._container(CID)
    assert found is not None and (found.dir, found.name) == (docker / "containers" / CID, "roost-coldload-tiny")
    assert s._container("b" * 64) is None and s._container("c" * 64) is None
    other = s._container("d" * 64)
    assert other is not None and other.dir == session / "engine" / "data" / "containers" / ("d" * 64)


def test_running_engines_and_their_data_roots_are_read_from_proc(tmp_path: Path) -> None:
    """A stand-in ``dockerd`` (a Python that calls itself so) with a data root of its own, started here."""
    standin = subprocess.Popen(["bash", "-c", f'exec -a dockerd {sys.executable} -c "import time; time.sleep(60)" '
                                              f"--data-root {tmp_path / 'data'}"])
    try:
        s = C.Scanner(docker_root=tmp_path / "default")
        deadline = time.monotonic() + 10
        while (standin.pid, tmp_path / "data") not in (engines := s._dockerds()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (standin.pid, tmp_path / "data") in engines and s._descends_from_owner(standin.pid)
    finally:
        standin.kill()
        standin.wait()


STANDIN = "roost_coldstart_standin"
"""A stand-in for ``vllm.entrypoints.openai.api_server`` (a module of its own name, so the session's own
counter does not take it for a vLLM): logs, says ready after ``argv[1]`` seconds, then idles."""


def test_the_scanner_finds_a_start_times_it_and_sees_it_end(tmp_path: Path) -> None:
    """The start is the process's own start, ready is when the scanner read the ready line (after the
    stand-in wrote it, at the latest when the test saw the scanner had it), the end when it saw it gone."""
    (tmp_path / f"{STANDIN}.py").write_text(
        "import sys, time\nprint('INFO starting', flush=True)\ntime.sleep(float(sys.argv[1]))\n"
        "open(sys.argv[2], 'w').write(repr(time.time()))\n"
        "print('INFO:     Application startup complete.', flush=True)\ntime.sleep(60)\n")
    log, said_ready = tmp_path / "standin.log", tmp_path / "ready-at"
    log.write_text("INFO:     Application startup complete.\n")  # a reused log: an earlier server's line
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    scanner = C.Scanner(roots=[tmp_path], modules=(STANDIN,), nodeid="tests/x.py::first").start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with log.open("ab") as out:
            before = time.time()
            procs.append(subprocess.Popen([sys.executable, "-m", STANDIN, "1.5", str(said_ready),
                                           "--served-model-name", "tiny"], stdout=out, env=env, start_new_session=True))
            after = time.time()
        # not counted: the same module under -c, and a server of another owner (pid 1's descendants only)
        procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", STANDIN]))
        other = C.Scanner(owner=1, roots=[], modules=(STANDIN,)).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (scanner.starts and scanner.starts[0].ready):
            time.sleep(0.05)
        seen_ready = time.time()
        assert other.stop() == []
        killed = time.time()
        procs[0].kill()
        procs[0].wait()
        while time.monotonic() < deadline and scanner.starts[0].ended is None:
            time.sleep(0.05)
        seen_ended = time.time()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        starts = scanner.stop()
    [s] = starts
    assert (s.pid, s.what, s.nodeid, s.container) == (procs[0].pid, "tiny on " + Path(sys.executable).parent.parent.name,
                                                      "tests/x.py::first", "")
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - tick <= s.started <= after + tick  # /proc's start time, in clock ticks
    assert s.ready is not None and float(said_ready.read_text()) <= s.ready <= seen_ready
    assert s.ended is not None and killed <= s.ended <= seen_ended
    assert s.ready_s is not None and s.ready_s >= 1.5
