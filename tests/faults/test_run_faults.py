"""Faults during landings, with the real parts: the ``land/cpu`` deployment run by a real worker
(``prefect worker start``), vLLM CPU served by the process backend, and a Prefect server of this
module's own (SQLite), because the scenario restarts it.

One scenario (the module fixture ``scenario``), two landings of one profile on host ``cpu``:

1. Both are triggered together. The run that gets the host's serving slot first (A) starts its
   server; the other (B) waits in its host-slot stage and says so.
2. While A's server loads, the Prefect server is stopped and started again on the same port and
   database; it forgets every concurrency lease (Prefect keeps them in memory), A's too.
3. Once A's benchmark has measured a request, A's vLLM API server is killed with SIGKILL: A fails at
   its benchmark with ``server_died``, what it measured is in the results store, and its slot (the
   lease forgotten) is given back by count, so B gets it and starts its server.
4. B is cancelled while its server loads (what it proves is done; a second cold load and benchmark
   would double the module's time): it stops its server, and the host's slot is free.

All along, a sampler lists the session's vLLM API servers (``/proc``) and the slot's count.
The worker killed mid-run is tested in ``tests/deployments/test_land_deployment.py`` (its crashed run).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Cancelling
from support.processes import vllm_processes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployments"))
from roost_workers import POOL, run_setup
from support.flow_logs import run_log_text, run_logs
from support.prefect_server import PrefectServer, using_api
from support.wait import verdict, wait_for
from support.workers import Worker, start_worker, wait_final

from roost.profiles import LOCAL
from roost.serve.probes import probes_for
from roost.serve.process import process_servers
from roost.store import load_records
from roost.vllm import server_metrics as prometheus
from tasks.host_slot import host_limit_name, host_slot

pytestmark = pytest.mark.slow

HOST = "cpu"
PROFILE = "fault-quick"  # the demo model, no evaluations, no compile warm-up
# long enough (210 requests: 4 lengths and 1+2 users, 30 repeats; about a minute idle) that A still serves when B,
# slowed by the Prefect restart's client retries (34 s in a full local run), says it waits, and that the kill after that
# lands mid-benchmark; it is never run to its end, so its length costs nothing
BENCH = {"prompt_lengths": [128, 256, 512, 1024], "output_tokens": 64, "concurrency": [1, 2], "repeats": 30,
         "warmup": 1}
RUN_TIMEOUT_S = 600  # guards against a hung run; nothing here is timed
B_WAITS_S = 300  # for B to say it waits for the host while A serves: it is there in seconds once past the restart
PROBES = len(probes_for(["--reasoning-parser", str(LOCAL.reasoning_parser), "--tool-call-parser", str(LOCAL.tool_call_parser)]))
MEASURED = 1 + PROBES + 2
"""Finished requests when the first measured one is done: the health-wait's, the probes' (reasoning, tool,
structured), the warm-up's, it."""
SLOT_READS = 3
"""Reads of the host slot's count the sampler must have made while each server was up (A's after the
Prefect restart, B's): "never two holders" is judged on them, not on a sampler that read nothing."""


@pytest.fixture(scope="module")
def own_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """This module's Prefect server, with ``roost setup`` applied and the ``fault-quick`` profile saved;
    this process and every worker it starts talk to it until the module ends."""
    from blocks.profiles import ModelProfileBlock

    home = tmp_path_factory.mktemp("prefect-faults")  # its own PREFECT_HOME, so its own SQLite database
    with PrefectServer(home / "server.log", env={"PREFECT_HOME": str(home)}) as server, using_api(server.url):
        ModelProfileBlock.from_profile(LOCAL.model_copy(update={
            "name": PROFILE, "bench": BENCH, "evals": [],
            "vllm_overrides": [*LOCAL.vllm_overrides, "--enforce-eager"]})).save(PROFILE, overwrite=True)
        run_setup()  # the land/cpu deployment (its form lists fault-quick), the host limits, the automations
        yield server


@pytest.fixture(scope="module")
def worker(own_prefect: PrefectServer, session_dir: Path) -> Iterator[Worker]:
    """One process worker on the cpu queue: it runs both landings at once, each in its own process."""
    w = start_worker("worker-faults", [HOST], pool=POOL, log=session_dir / "worker-faults.log")
    try:
        yield w
    finally:
        w.stop()


@dataclass
class Sample:
    t: float
    servers: list[int]  # pids of the session's live vLLM API servers
    slot: int | None  # the host slot's count (None: the API did not answer; ``error`` says why)
    error: str = ""


@dataclass
class Sampler:
    """Every 0.3 s: the vLLM API servers running under this session's ROOST_HOME, and the slot's count."""

    samples: list[Sample] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def run(self, settings_url: str) -> None:
        with temporary_settings(updates={PREFECT_API_URL: settings_url}):
            while not self.done.is_set():
                # the time the servers were listed: the slot's query after it can take seconds on a loaded
                # machine, and a sample stamped after it would place what it saw too late
                t, pids = time.monotonic(), _vllm_pids()
                slot, error = None, ""
                try:  # the Prefect server is down for a while on purpose: a failed read is a sample without a count
                    with get_client(sync_client=True) as client:
                        slot = client.read_global_concurrency_limit_by_name(host_limit_name(HOST)).active_slots
                except Exception as exc:
                    error = type(exc).__name__
                self.samples.append(Sample(t, pids, slot, error))
                self.done.wait(0.3)

    def reads(self, pid: int, after: float = 0.0) -> list[int]:
        """The slot counts read in samples that listed server ``pid`` (taken after ``after``)."""
        return [s.slot for s in self.samples if pid in s.servers and s.t > after and s.slot is not None]

    def has_read(self, pid: int, after: float = 0.0) -> bool | None:
        """True once :data:`SLOT_READS` counts were read while server ``pid`` was listed; False if it is gone
        first; None meanwhile (a :func:`verdict` check)."""
        if len(self.reads(pid, after)) >= SLOT_READS:
            return True
        return None if os.path.exists(f"/proc/{pid}") else False


def _vllm_pids() -> list[int]:
    """The vLLM API servers under this session's ROOST_HOME (as ``support.processes`` finds them), by pid.

    Only a process group's leader counts: roost starts each server in a session of its own, and the
    engine core vLLM forks carries its parent's command line until it renames itself ("VLLM::EngineCore")
    a moment later; one server is not two."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                pid = int(proc.name)
                if "vllm.entrypoints" in cmd and os.environ["ROOST_HOME"] in cmd and os.getpgid(pid) == pid:
                    out.append(pid)
    return out


_logs = run_log_text  # every log line of the flow run so far (the server's own lines too: hundreds)
_wait = functools.partial(wait_for, timeout_s=RUN_TIMEOUT_S, every_s=0.2)


def _new_server(exclude: set[int]) -> Any:
    return next((s for s in process_servers(HOST) if s.pid not in exclude), None)


def _finished_requests(base_url: str) -> float:
    try:
        text = httpx.get(f"{base_url}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    return prometheus.totals(prometheus.parse_text(text)).get("vllm:request_success_total", 0.0)


@pytest.fixture(scope="module")
def scenario(own_prefect: PrefectServer, worker: Worker) -> dict[str, Any]:
    sampler = Sampler()
    watcher = threading.Thread(target=sampler.run, args=(own_prefect.url,), daemon=True)
    watcher.start()
    try:
        runs = [run_deployment(f"land/{HOST}", parameters={"profile": PROFILE, "notify": False}, timeout=0)
                for _ in range(2)]
        first = _wait("a vLLM server of either landing", lambda: _new_server(set()))
        a, b = _wait("the run that started it", lambda: next(  # the one whose log names its pid
            ((r, o) for r, o in (runs, runs[::-1]) if f"vLLM starting (pid {first.pid})" in _logs(r.id)), None))
        # the sampler too has seen A's server (a sample can take seconds under load): the restart comes after
        _wait("the sampler's sight of A's server", lambda: any(first.pid in s.servers for s in sampler.samples))
        stopped_at = time.monotonic()  # A's server is loading: the Prefect server goes down and comes back
        own_prefect.stop()
        own_prefect.start()
        up_at = time.monotonic()
        _wait("A's first measured request", lambda: _finished_requests(first.base_url) >= MEASURED, every_s=0.1)
        # B says it waits for the host while A's server is up (never judged at one instant: B may still be
        # retrying its calls across the restart); A's benchmark outlasts the wait, so it is cut mid-way
        def b_said_it_waits() -> bool | None:  # None: not yet; then whether A's server was still up after
            said = f"host {HOST} serves another run" in _logs(b.id)
            up = os.path.exists(f"/proc/{first.pid}")  # looked at after the log was read
            return said and up if said or not up else None

        b_waiting = verdict(b_said_it_waits, timeout_s=B_WAITS_S)
        # the slot read while A serves after the restart (one read can take seconds under load): judged by the test
        verdict(lambda: sampler.has_read(first.pid, up_at), timeout_s=RUN_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):  # gone already: B never said it waited, and that test says so
            os.kill(first.pid, signal.SIGKILL)
        fa = wait_final(a.id, RUN_TIMEOUT_S)
        second = _wait("B's vLLM server", lambda: _new_server({first.pid}))
        verdict(lambda: sampler.has_read(second.pid), timeout_s=RUN_TIMEOUT_S)  # ... and while B's server loads
        with get_client(sync_client=True) as client:  # B has shown it could start: no second cold load is paid
            client.set_flow_run_state(b.id, Cancelling(message="the fault test has seen what it needed"))
        cancelled_at, cancel_t = datetime.datetime.now(datetime.UTC), time.monotonic()
        fb = wait_final(b.id, RUN_TIMEOUT_S)
        left = {"servers": process_servers(HOST), "processes": vllm_processes()}
        try:
            with host_slot(HOST, timeout_s=20) as after:  # the next landing on the host gets the slot at once
                pass
        except TimeoutError as exc:  # what B did with the slot, and what the worker did with B, say why
            b_log = [f"{line.timestamp:%H:%M:%S.%f} {line.message[:160]}" for line in run_logs(b.id)]
            since = [(round(x.t - cancel_t, 1), x.slot, x.servers) for x in sampler.samples if x.t > cancel_t]
            raise AssertionError(f"{exc}; B was cancelled at {cancelled_at:%H:%M:%S.%f} and ended {fb.state.type.value}"
                                 f" at {fb.state.timestamp:%H:%M:%S.%f} ({fb.state.message!r}); B's last lines: "
                                 f"{b_log[-12:]}; (s after the cancel, slot, servers) sampled since: {since[-20:]}; "
                                 f"the worker's log ends: {worker.log.read_text()[-3000:]}") from exc
    finally:
        sampler.done.set()
        watcher.join(timeout=10)
    return {"a": fa, "b": fb, "first": first, "second": second, "b_waiting": b_waiting,
            "restart": (stopped_at, up_at), "samples": sampler.samples, "sampler": sampler, "left": left,
            "after": after}


def _stored(flow_run_id: Any) -> Any:
    (rec,) = [r for r in load_records(model=LOCAL.repo_id, host=HOST) if r.meta.prefect_flow_run_id == str(flow_run_id)]
    return rec


def test_two_landings_on_one_host_never_serve_at_once(scenario: dict[str, Any]) -> None:
    """Never two vLLM servers (nor two slot holders) at once: the second run waited, saying so, while the
    first one served, and started its server only once the first one's was gone."""
    samples: list[Sample] = scenario["samples"]
    sampler: Sampler = scenario["sampler"]
    assert max(len(s.servers) for s in samples) == 1, [s for s in samples if len(s.servers) > 1][:3]
    first, second = scenario["first"].pid, scenario["second"].pid
    # the slot was read while each run served (A across the Prefect restart), and held by one run only: the
    # restarted server forgot A's lease but kept its count, so B could not enter
    _, up_at = scenario["restart"]
    reads = {"A after the restart": sampler.reads(first, up_at), "B": sampler.reads(second)}
    failed = sorted({s.error for s in samples if s.slot is None})
    assert all(len(r) >= SLOT_READS for r in reads.values()), (reads, f"failed reads: {failed}")
    assert all(1 in r for r in reads.values()), reads
    assert all(s.slot <= 1 for s in samples if s.slot is not None), [s for s in samples if (s.slot or 0) > 1][:3]
    first_seen = [s.t for s in samples if first in s.servers]
    second_seen = [s.t for s in samples if second in s.servers]
    assert first_seen and second_seen and max(first_seen) < min(second_seen)
    assert scenario["b_waiting"]  # B's log said so while A served, before A's server was killed
    assert f"host {HOST} is free: got its serving slot after waiting" in _logs(scenario["b"].id)


def test_a_server_killed_mid_benchmark_keeps_what_was_measured_and_frees_the_host(scenario: dict[str, Any]) -> None:
    """SIGKILL of A's vLLM: A fails (not crashes) at its benchmark, classified ``server_died``; the points and
    requests it measured are in the results store; its slot is given back (B started its server next)."""
    import pandas as pd

    fa = scenario["a"]
    assert fa.state.type.value == "FAILED", fa.state
    assert "benchmark: server stopped answering" in (fa.state.message or ""), fa.state.message
    rec = _stored(fa.id)
    assert (rec.status, rec.failed_stage, rec.failure_class) == ("failed", "benchmark", "server_died"), rec
    assert rec.remediation.startswith("killed by SIGKILL (exit status -9): vLLM was killed (SIGKILL) mid-run"), rec
    assert rec.points and rec.points[0].kind == "prompt_length" and rec.points[0].prompt_tokens_target == 128
    requests = pd.read_parquet(Path(os.environ["ROOST_RESULTS_DIR"]) / "requests")
    mine = requests[(requests["run_id"] == rec.meta.run_id) & (requests["phase"] != "warmup")]
    measured = mine[mine["error"].isna() | (mine["error"] == "")]
    assert len(measured) >= 1 and (measured["completion_tokens"] == BENCH["output_tokens"]).all(), mine
    assert len(mine) == sum(p.requests for p in rec.points)  # the cut request is stored too, as an error
    assert {s.stage: s.status for s in rec.stages}["benchmark"] == "failed"
    assert f"host {HOST} is free: got its serving slot" in _logs(scenario["b"].id)  # the next landing started


def test_a_prefect_server_restart_mid_serve_loses_nothing_and_frees_the_slot(scenario: dict[str, Any]) -> None:
    """The Prefect server restarted while A's server loaded: every stage across it completed, A ended with a
    clear state (Failed, at the benchmark killed afterwards) and its results stored; its slot, whose lease
    the restarted server had forgotten, came back (B got it), and no vLLM is left."""
    stopped_at, up_at = scenario["restart"]
    samples: list[Sample] = scenario["samples"]
    first = scenario["first"].pid
    assert any(first in s.servers for s in samples if s.t < stopped_at)  # A's server was loading ...
    assert any(first in s.servers for s in samples if s.t > up_at)  # ... and still was after the restart
    rec = _stored(scenario["a"].id)
    status = {s.stage: s.status for s in rec.stages}
    assert all(status[name] == "completed" for name in ("host-slot", "host-check", "serve", "health-wait")), status
    assert rec.serve.start_to_healthy_s and rec.points  # measured after the restart, and stored
    logs = _logs(scenario["a"].id)
    assert f"the Prefect server no longer knows host {HOST}'s serving slot lease" in logs  # the fault did hit
    assert f"gave host {HOST}'s serving slot back by count" in logs
    assert scenario["after"].waited_s < 5  # free: not held by a lease nobody knows any more
    assert scenario["left"] == {"servers": [], "processes": []}  # B, cancelled while loading, stopped its server
