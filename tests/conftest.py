"""Session-wide test setup: an isolated ROOST_HOME / results dir / PREFECT_HOME, and shared real
services (a Prefect server, a tiny model, a vLLM CPU server) started once and stopped at the end.

The vLLM venv is the real one (``scripts/bootstrap`` makes it); nothing here is a mock.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# A suite started in the background (`cmd &` in a script, nohup, some CI runners) inherits SIGINT ignored, and
# every process it starts would too: a Prefect worker or server stops on SIGTERM by sending itself SIGINT with
# the disposition it inherited, so it would ignore it and wait for the SIGKILL 30 s later (measured: 90 s in one
# module's teardown, ~4.5 minutes a run). The session's children get SIGINT as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="roost-tests-"))
# Before anything imports prefect or roost.settings: keep tests away from the user's state.
os.environ.setdefault("ROOST_VLLM_PYTHON", str(Path.home() / ".cache" / "roost" / "vllm-venv" / "bin" / "python"))
# The named vLLM venvs (a host's vllm_venv, e.g. vllm-venv-0.24.0) are where scripts/bootstrap built them, not
# under the session's own ROOST_HOME below.
os.environ.setdefault("ROOST_VLLM_VENVS", str(Path.home() / ".cache" / "roost"))
os.environ["ROOST_HOME"] = str(_SESSION_DIR / "roost-home")
os.environ["ROOST_RESULTS_DIR"] = str(_SESSION_DIR / "results")
# One compile cache for every vLLM the session starts on this machine (process backend; containers keep
# theirs): a server with the model and arguments of an earlier one loads its compiled entry instead of
# compiling again (vLLM's hash ignores the port, the served name and VLLM_API_KEY); never the user's own.
os.environ["VLLM_CACHE_ROOT"] = str(_SESSION_DIR / "vllm-cache")
# vLLM on CPU runs its model worker inside the engine-core process instead of spawning a third Python
# process (vLLM's "uni" executor, its default for one device whenever V1 multiprocessing is off; the API
# server keeps its own engine-core process): each cold start saves one interpreter importing torch and
# vLLM, ~20 s on these 2 cores. The API, /metrics and the log lines roost reads are the same.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ["PREFECT_HOME"] = str(_SESSION_DIR / "prefect-home")
os.environ.pop("PREFECT_API_URL", None)
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("VLLM_API_KEY", None)
os.environ.pop("ROOST_GATEWAY_METRICS_TOKEN", None)  # gateways and renders without one unless a test sets it
os.environ.pop("HF_TOKEN", None)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


@pytest.fixture(scope="session", autouse=True)
def _stop_temporary_prefect_servers() -> Iterator[None]:
    """Stop the temporary Prefect servers tests started (flows run without PREFECT_API_URL) at the
    end of the session, while pytest's output is still open; Prefect's own atexit hook would log
    to a closed stream."""
    yield
    if "prefect.server.api.server" in sys.modules:
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()


@pytest.fixture(scope="session")
def prefect_api(session_dir: Path) -> Iterator[str]:
    """A real ``prefect server start`` on loopback (SQLite in the session dir); sets PREFECT_API_URL."""
    from support.prefect_server import PrefectServer, using_api

    with PrefectServer(session_dir / "prefect-server.log") as server, using_api(server.url) as url:
        yield url
        _flush_prefect_logs()


def _flush_prefect_logs() -> None:
    """Send the log lines Prefect still buffers before the server they go to is stopped."""
    try:
        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()
    except Exception:  # best effort at teardown
        pass


@pytest.fixture(scope="session")
def tiny_model(session_dir: Path) -> Path:
    """The demo checkpoint (tiny random-weight Qwen3), generated once per session."""
    from roost.demo.model import generate_tiny_model

    return generate_tiny_model(session_dir / "tiny-model", seed=0)


@pytest.fixture
def slack_receiver() -> Iterator[Any]:
    """A real HTTP receiver for the Slack endpoints on loopback (``support.slack_receiver``)."""
    from support.slack import HOOK_SECRET, TOKEN
    from support.slack_receiver import SlackReceiver

    receiver = SlackReceiver(token=TOKEN, webhook_secret=HOOK_SECRET)
    yield receiver
    receiver.close()


@pytest.fixture(scope="session")
def slack_chart(session_dir: Path) -> Path:
    """The decode chart of a regressed run, as the notify stage uploads it."""
    from support.samples import spark_run

    from roost.report import charts

    out = charts.decode_vs_prompt(spark_run(day=9, scale=0.85), session_dir / "slack-chart" / "decode_vs_prompt.png")
    assert out is not None
    return out


class VllmServerInfo:
    def __init__(self, base_url: str, model: str, api_key: str, log_path: Path, spec: Any) -> None:
        self.base_url, self.model, self.api_key, self.log_path = base_url, model, api_key, log_path
        self.spec = spec  # the ServeSpec it was started with


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, session_dir: Path) -> Iterator[VllmServerInfo]:
    """A real vLLM CPU server for the tiny model, with an API key; shared by the whole session.

    Started through the process backend on a host named ``test-session`` (its state file says so), eager:
    no torch.compile warm-up, ready in ~40 s instead of 65-100 s (each xdist worker starts one). No test on it
    is about compiling; its timing tests judge roost against another client on the same server."""
    from roost.hosts import CPU
    from roost.net import free_port
    from roost.serve.base import ServeSpec
    from roost.serve.health import wait_until_ready
    from roost.serve.process import ProcessBackend

    key = "test-key-" + os.urandom(6).hex()
    spec = ServeSpec(model_dir=tiny_model, served_model_name="tiny", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"],
                     log_path=session_dir / "vllm-session.log",
                     # the timing tests on this server (agreement with `vllm bench serve`, regression noise)
                     # pin their clients away from the CPU vLLM's OpenMP binding gives the model worker,
                     # which only the multiprocess executor does: this one server runs as on a Spark
                     env={"VLLM_CACHE_ROOT": os.environ["VLLM_CACHE_ROOT"], "VLLM_ENABLE_V1_MULTIPROCESSING": "1"})
    backend = ProcessBackend(CPU.model_copy(update={"name": "test-session"}))
    server = backend.start(spec, key, backend.prepare())
    try:
        wait_until_ready(server, api_key=key, timeout_s=600)
        yield VllmServerInfo(server.base_url, "tiny", key, spec.log_path, spec)  # type: ignore[arg-type]
    finally:
        server.stop()


class Vllm024ServerInfo(VllmServerInfo):
    def __init__(self, base_url: str, model: str, api_key: str, log_path: Path, spec: Any, *, server: Any,
                 ready: Any, host: Any) -> None:
        super().__init__(base_url, model, api_key, log_path, spec)
        self.server = server  # the ProcessServer (its log buffer, phases, command)
        self.ready = ready  # the Readiness of its start
        self.host = host  # the HostProfile it was started on


VLLM024_PRODUCTION_ARGS = ["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
                           "--enable-prefix-caching", "--enable-chunked-prefill"]
"""The recipes' client-facing serving settings, as the vllm024_server fixture passes them (MTP is left out: the tiny
model has no mtp.* weights to draft with)."""


@pytest.fixture(scope="session")
def vllm024_server(tiny_model: Path, session_dir: Path) -> Iterator[Vllm024ServerInfo]:
    """The tiny model served by vLLM 0.24.0 (the vLLM of NGC 26.07, the recipes' release) from its own venv
    (``scripts/bootstrap``: ``vllm-venv-0.24.0``), with the recipes' serving settings and an API key; shared by
    the session.

    Started through the process backend on a copy of the built-in host ``cpu-vllm-0-24`` named
    ``test-session-024``, with a compile cache of its own (another vLLM release's entries are not its own)."""
    from roost.hosts import get_host
    from roost.net import free_port
    from roost.profiles import LOCAL
    from roost.serve.base import ServeSpec
    from roost.serve.health import wait_until_ready
    from roost.serve.process import ProcessBackend

    host = get_host("cpu-vllm-0-24").model_copy(update={"name": "test-session-024"})
    key = "test-key-" + os.urandom(6).hex()
    spec = ServeSpec(model_dir=tiny_model, served_model_name="tiny", port=free_port(),
                     # and the demo profile's random-weight settings (roost.profiles.LOCAL), so the probes'
                     # grammar-constrained answers end before max_tokens. Compiled, not eager, though eager
                     # starts ~27 s sooner (43 s, not 69 s): test_the_recipes_client_snippet_through_the_gateway
                     # samples the random-weight model (temperature 0.6, the engine's seed), and eager's logits
                     # draw a "<think>" into the content it checks has none. The window and the 1 GiB pool
                     # stay: test_vllm024.py reads their figures in the log.
                     vllm_args=[*VLLM024_PRODUCTION_ARGS, *LOCAL.vllm_overrides, "--max-model-len", "2048"],
                     log_path=session_dir / "vllm024-session.log",
                     # the multiprocess executor, as the 0.32 session server and a Spark run it: 0.24.0 on CPU
                     # serves with it too (its CPU platform turns "uni" into "mp" whenever this is 1)
                     env={"VLLM_CACHE_ROOT": str(session_dir / "vllm-cache-0.24.0"),
                          "VLLM_ENABLE_V1_MULTIPROCESSING": "1", **LOCAL.server_env})
    backend = ProcessBackend(host)
    server = backend.start(spec, key, backend.prepare())
    try:
        ready = wait_until_ready(server, api_key=key, timeout_s=host.health_timeout_s)
        yield Vllm024ServerInfo(server.base_url, "tiny", key, spec.log_path, spec,  # type: ignore[arg-type]
                                server=server, ready=ready, host=host)
    finally:
        server.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Count the vLLM cold starts the run makes, however started (process backend, Docker, ``roost run``,
    Prefect workers), and print them at its end (``support.coldstarts``)."""
    from support.coldstarts import ColdStartsPlugin

    config.pluginmanager.register(ColdStartsPlugin([_SESSION_DIR]), "roost-coldstarts")


@functools.cache
def _uses_docker(path: Path) -> bool:
    """Whether a test file starts or needs the Docker engine (a ``docker`` mark, or the engine fixture)."""
    text = path.read_text(errors="replace")
    return "pytest.mark.docker" in text or "docker_engine" in text


@functools.cache
def _uses_vllm024(path: Path) -> bool:
    """Whether a test file uses the session's vLLM 0.24.0 server: those files are one unit, so one worker
    starts that server (~80 s) once."""
    return "vllm024_server" in path.read_text(errors="replace")


def _work_unit(nodeid: str) -> str:
    """The pytest-xdist work unit of a test: its file, ``docker`` for every file that uses the engine, or
    ``vllm024`` for every file that uses the session's vLLM 0.24.0 server (``_uses_vllm024``).

    A file is one unit, so its module fixtures (a landing, a set of workers) are set up once, on one worker.
    The Docker files are one unit together: they share the engine and its nothing-left-behind guard, and
    the containers they start carry deterministic names."""
    path = nodeid.split("::", 1)[0]
    if _uses_docker(REPO / path):
        return "docker"
    return "vllm024" if _uses_vllm024(REPO / path) else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The two workers ``scripts/test`` runs (``-n 2``) take whole units (:func:`_work_unit`) in
    collection order, heaviest first (``pytest_collection_modifyitems``), so they end at about the same
    time instead of one finishing the last landing alone. Each worker is a session of its own: its own
    Prefect server, vLLM server, compile cache and ``ROOST_HOME`` (``_SESSION_DIR``)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False  # xdist's own order (most tests first) puts the landings last
    return ByUnit(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heavy files first: the Docker unit, then the files with slow tests, then the rest (stable within);
    the files with a ``quiet`` test last, where the other worker is down to short tests
    (:func:`pytest_runtest_protocol`, ``tests/support/machine.py``)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    quiet = {item.path for item in items if item.get_closest_marker("quiet")}
    items.sort(key=lambda item: 3 if item.path in quiet else 0 if _uses_docker(item.path) else 1 if item.path in slow else 2)


_ON_THE_MACHINE = pytest.StashKey[bool]()
"""Whether this process's tests take the machine lock (``tests/support/machine.py``): it runs tests and
is registered as doing so (:func:`pytest_sessionstart`)."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Each process that runs tests (an xdist worker, or the one process of ``-n 0``; not the xdist
    controller) enters its pid in the machine's registry, so that a quiet test of any run on the machine
    pauses it (:func:`pytest_runtest_protocol`); the entry goes at exit (a dead pid's entry is stale)."""
    config = session.config
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # the xdist controller: its workers run the tests
    import atexit

    from support import machine

    label = f"run {os.environ.get('PYTEST_XDIST_TESTRUNUID', '-')} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    config.stash[_ON_THE_MACHINE] = machine.register(label=label)
    if config.stash[_ON_THE_MACHINE]:
        atexit.register(machine.unregister)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A ``quiet`` test (a timing figure judged against another client's or an earlier run's) runs, from
    its setup to its teardown, while no other test on the machine does, of this run or another, with
    every other test process on the machine and its servers stopped: the other worker's load makes the
    clients late by tens of ms (CI: ``vllm bench serve`` read a synthetic 0.30 s TTFT as 0.37 s). What it
    paused is in the test's report (a ``machine`` section) and in the machine's log. ``-n 0`` takes the
    lock too: another run on the machine may be measuring. A pytest run inside another's test does not
    (``support.machine.register``): the outer test holds it."""
    if not item.config.stash.get(_ON_THE_MACHINE, False):
        return (yield)
    from support.machine import machine

    with machine(item.get_closest_marker("quiet") is not None, label=item.nodeid) as pause:
        if pause is not None:
            item.add_report_section("setup", "machine", pause.summary())
        return (yield)
