"""What Prefect costs per ``land`` run, next to the stages' own work (warm run, local profile).

Runs ``land`` in-process against a real ``prefect server start`` (started here, on loopback, with
its own PREFECT_HOME), twice: the first run warms the caches (download, audit, plan), the second
is measured. Instrumentation only observes (timers around calls, a counter on the HTTP client):

- wall: the ``land(...)`` call as its caller sees it;
- task body: time inside each task's own function; task call: the same call as the flow sees it;
- flow body: time inside ``land``'s own function.

    stages' own work  = task bodies + (flow body - task calls)     (the glue: records, server stop...)
    orchestration     = (wall - flow body)                         (flow run create, states, engine)
                      + sum(task call - task body)                 (task-run bookkeeping, cache lookups)

A cached task's whole call counts as orchestration (its body does not run). API requests are the
Prefect client's HTTP requests to PREFECT_API_URL (the events websocket is not counted); many run
in background threads, so their summed time is shown but is not part of the sum above.

Target (issue 8): orchestration under 5 % of the work or under 5 s, whichever is larger.

``--via-deployment`` adds what a deployment run costs on top: ``roost setup --hosts cpu``, then per
worker setting (``--worker-settings before,after``: Prefect's default 10 s poll, then the README's
``PREFECT_WORKER_QUERY_SECONDS=1``) a ``prefect worker start`` on the cpu queue and ``land/cpu``
triggered with ``run_deployment`` (warm runs); side by side, from the API's state timestamps:
pickup wait (created -> Pending: the worker's poll), process start (Pending -> Running: flow-run
process, pull step, Prefect and flow import), flow setup (Running -> the first task run's start:
parameters, block loads), and the engine's share of the rest (Running -> Completed minus the
record's stage timings and the flow glue measured in-process). Target (issue 17): pickup + start +
setup + engine under 5 s.

``--worker-settings ...,warm-fork`` measures the same run through the warm fork server (``scripts/warm_fork.py``,
"after"'s worker settings): the pool's job command is its client for that run, as ``roost setup --warm-fork`` sets it.

    .venv/bin/python benchmarks/bench_orchestration.py [--runs 2] [--profile local] [--via-deployment]
        [--worker-settings before,after[,warm-fork]] [--json OUT]

Where a deployment run's start goes (issue 38, 2026-12-06, 2 cores, other jobs running: load 3-7). The
issue's 8.8 s (pickup 0.3 + process start 6.0 + setup 2.6) was already down to pickup 2.4 + start 2.4 +
setup 0.1 s here (one run each; the job command is ``python -m prefect.engine`` since ``roost setup`` sets
it, no workspace supervisor). The flow-run process, timed phase by phase from exec to the first task
(the engine's own steps wrapped with timers, 5 runs, median; before -> after the cut below):

    Python start (exec -> first line)                 0.01
    import prefect                                    0.78 -> 0.97 (load)  Prefect's; every new process
    import prefect.engine + prefect.flow_engine       0.17 -> 0.20
    load_flow_run (client + GET)                      0.04
    read_deployment                                   0.02 -> 0.05
    pull step (set_working_directory)                 0.12 -> 0.11          Prefect's run_steps; one chdir
    import flows/land.py (roost + pyarrow, numpy)     1.05 -> 0.57          the cut
    run_flow -> Running (parameters validated)        0.11 -> 0.13
    Running -> first task (flow setup)                0.09 -> 0.11          3 block reads 0.06-0.08 s
    total exec -> first task                          2.66 -> 2.36

The cut: the flow modules imported the gateway's and the monitoring sync's modules at import (SQLAlchemy
for the gateway's database, Docker's SDK with requests and chardet: ~0.5 s) for stages only a landing that
keeps its server (or retires one) runs; they now import them there. The block reads (profile, host,
Secret) are 20-40 ms each: running them in parallel would save ~0.05 s, not worth a thread.

Warm fork server (measured on its prototype, now ``scripts/warm_fork.py``; land/cpu through a real worker polling every 1 s, each run cancelled
from the API once its first task ran; median of 4, stock job command vs the client):

    pickup + start + setup, stock (after the cut)     0.99 + 3.08 + 0.18 = 3.57 s  (start 2.26-3.39)
    warm fork, server imports Prefect only            0.26 + 1.24 + 0.21 = 2.33 s
    warm fork, server imports Prefect + flows.land    0.69 + 0.64 + 0.19 = 1.44 s  (start 0.58-0.67)

and whole runs to Completed (``--runs 1 --worker-settings after,warm-fork``, one run each): pickup + start
+ setup 0.82 + 2.54 + 0.24 = 3.60 s stock, 0.39 + 0.91 + 0.29 = 1.59 s warm fork (Prefect's part with the
engine's share of the rest: 7.26 and 3.99 s, that share 3.7 and 2.4 s: noise between single runs).

Isolation and supervision held in the prototype: every cancelled run ended Cancelled (6.3-9.9 s after
Cancelling, as stock: 6.3-7.5 s); SIGKILL of the forked engine -> the worker reported Crashed (exit -9),
SIGKILL of the client -> the server killed the child's process group, Crashed (-9), nothing left
running; the runs after both crashes forked warm; a full land/cpu run Completed with roost's loggers in
the run's logs (the job's PREFECT_LOGGING_EXTRA_LOGGERS applied). Built from it, opt-in (the default job
command stays ``python -m prefect.engine``): ``roost setup --warm-fork`` makes the pool's job command the
client, ``scripts/install-worker --warm-fork`` runs the server as ``roost-warm@HOST`` beside the worker;
the server answers "stale" (the run goes cold, the server exits and its unit restarts it) once a module
file it loaded from the checkout or Prefect's package changed; roost's modules read no environment at
import; a host without a server runs the stock command (tests/deployments/test_warm_fork.py). The 2 s it
saves per run are ~3 % of a warm demo landing and well under 1 % of a Spark landing (minutes of
download, build and cold load): hence opt-in.

Needs the vLLM venv (scripts/bootstrap); everything else (ROOST_HOME, results, PREFECT_HOME) goes
to a scratch directory, so the first run is cold and the next ones warm. ~2-4 min per run on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402


class Probe:
    """Timers and counters, filled while a run executes."""

    def __init__(self) -> None:
        self.task_calls: dict[str, list[float]] = defaultdict(list)
        self.task_bodies: dict[str, list[float]] = defaultdict(list)
        self.flow_body: float = 0.0
        self.api_requests = 0
        self.api_seconds = 0.0

    def reset(self) -> None:
        """Empty every timer in place (the task wrappers hold their own list's ``append``)."""
        for v in self.task_bodies.values():
            v.clear()
        self.task_calls.clear()
        self.flow_body, self.api_requests, self.api_seconds = 0.0, 0, 0.0


PROBE = Probe()


def _timed(fn: Callable[..., Any], sink: Callable[[float], None]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink(time.perf_counter() - t0)

    # Prefect validates a flow's parameters against its signature, resolving the annotations in the
    # wrapper's module: hand it the resolved signature (``from __future__ import annotations`` leaves
    # names only ``fn``'s module knows, such as land's ``RestartPolicy``)
    wrapper.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return wrapper


def instrument(api_url: str) -> None:
    """Wrap every roost task's function and call, ``land``'s function, and the HTTP clients' send."""
    import importlib

    import httpx
    from prefect.tasks import Task

    import flows.land

    for mod_name in ("download", "local_hub", "audit", "build", "serve", "health", "benchmark", "report", "notify"):
        mod = importlib.import_module(f"tasks.{mod_name}")
        for obj in vars(mod).values():
            if isinstance(obj, Task) and not getattr(obj.fn, "_roost_timed", False):
                obj.fn = _timed(obj.fn, PROBE.task_bodies[obj.name].append)
                obj.fn._roost_timed = True  # type: ignore[attr-defined]
    orig_call = Task.__call__

    def task_call(self: Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            PROBE.task_calls[self.name].append(time.perf_counter() - t0)

    Task.__call__ = task_call  # type: ignore[method-assign]
    land = flows.land.land
    land.fn = _timed(land.fn, lambda s: setattr(PROBE, "flow_body", PROBE.flow_body + s))

    def count(send: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(send)
        def sync_send(self: Any, request: httpx.Request, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return send(self, request, *a, **kw)
            finally:
                if str(request.url).startswith(api_url):
                    PROBE.api_requests += 1
                    PROBE.api_seconds += time.perf_counter() - t0

        return sync_send

    def acount(send: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(send)
        async def async_send(self: Any, request: httpx.Request, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await send(self, request, *a, **kw)
            finally:
                if str(request.url).startswith(api_url):
                    PROBE.api_requests += 1
                    PROBE.api_seconds += time.perf_counter() - t0

        return async_send

    httpx.Client.send = count(httpx.Client.send)  # type: ignore[method-assign]
    httpx.AsyncClient.send = acount(httpx.AsyncClient.send)  # type: ignore[method-assign]


@contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """A real ``prefect server start`` on a free loopback port; yields its API URL."""
    import httpx

    from roost.net import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_UI_ENABLED="false", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"prefect server did not start; see {home / 'server.log'}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)


def _sum(d: dict[str, list[float]]) -> float:
    return sum(sum(v) for v in d.values())


def report(record: dict[str, Any], wall: float) -> tuple[float, float, float]:
    """Print the tables; returns (orchestration, work, flow glue) seconds."""
    calls, bodies = PROBE.task_calls, PROBE.task_bodies
    task_call_s, task_body_s = _sum(calls), _sum(bodies)
    flow_glue = PROBE.flow_body - task_call_s
    engine = wall - PROBE.flow_body
    bookkeeping = task_call_s - task_body_s
    orchestration = engine + bookkeeping
    work = task_body_s + flow_glue
    n_tasks = sum(len(v) for v in calls.values())

    print(f"\nper task ({n_tasks} task runs)")
    print(f"{'task':<14}{'runs':>5}{'call s':>10}{'body s':>10}{'overhead s':>12}{'overhead/call ms':>18}")
    for name in sorted(calls, key=lambda n: -sum(calls[n])):
        c, b = sum(calls[name]), sum(bodies.get(name, []))
        note = "  (cached: body did not run)" if not bodies.get(name) else ""
        print(f"{name:<14}{len(calls[name]):>5}{c:>10.2f}{b:>10.2f}{c - b:>12.3f}{1000 * (c - b) / len(calls[name]):>18.1f}{note}")

    stages = {s["stage"]: s for s in record["stages"]}
    print("\nrecord's stage timings (as the flow measured them, task bookkeeping included)")
    for name, s in stages.items():
        print(f"  {name:<12}{s['seconds']:>9.2f} s  {s['status']}{' (cached)' if s['cached'] else ''}")

    print("\nwhere the wall time went")
    rows = [
        ("wall: land() call", wall, ""),
        ("stages' own work", work, "task bodies + flow glue"),
        ("  task bodies", task_body_s, ""),
        ("  flow glue", flow_glue, "records, server stop, mirror stop"),
        ("Prefect orchestration", orchestration, "engine + task-run bookkeeping"),
        ("  flow-run engine", engine, "create run, states, setup/teardown"),
        ("  task-run bookkeeping", bookkeeping, f"{n_tasks} task runs: states, cache lookups"),
    ]
    print(f"{'component':<26}{'seconds':>10}{'of wall':>10}{'of work':>10}  note")
    for label, sec, note in rows:
        print(f"{label:<26}{sec:>10.2f}{100 * sec / wall:>9.1f}%{100 * sec / work:>9.1f}%  {note}")
    mean_ms = 1000 * PROBE.api_seconds / max(1, PROBE.api_requests)
    print(f"\nAPI requests: {PROBE.api_requests} ({PROBE.api_seconds:.2f} s summed, {mean_ms:.1f} ms mean; "
          "partly in background threads)")
    budget = max(0.05 * work, 5.0)
    verdict = "PASS" if orchestration < budget else "FAIL"
    print(f"target: orchestration {orchestration:.2f} s < max(5% of work = {0.05 * work:.2f} s, 5 s) = {budget:.2f} s"
          f" -> {verdict} (orchestration/work = {orchestration / work:.3f})")
    return orchestration, work, flow_glue


def cold_import_s() -> float:
    """Seconds a fresh process spends importing the flow and its stage modules (after Prefect): paid by
    every deployment run when the worker loads ``flows/land.py``, by the in-process runs only once."""
    code = "import time, prefect; t0 = time.perf_counter(); import flows.land; print(time.perf_counter() - t0)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                                 check=True).stdout) for _ in range(3)]
    return sorted(runs)[1]


WORKER_SETTINGS: dict[str, dict[str, str]] = {
    # Prefect's defaults: the worker asks for runs every 10 s
    "before": {"PREFECT_WORKER_QUERY_SECONDS": "10", "PREFECT_WORKER_PREFETCH_SECONDS": "10"},
    # what the README's worker command sets: a run is picked up within ~1 s of its creation
    "after": {"PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "5"},
}
# "after", the pool's job command the warm fork server's client (scripts/warm_fork.py, roost setup --warm-fork)
WORKER_SETTINGS["warm-fork"] = WORKER_SETTINGS["after"]
WARM_FORK_PREIMPORT = ["flows.land"]
"""What the server imports besides Prefect (its default: roost's land flow and everything it imports)."""


@contextmanager
def warm_fork(tmp: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The warm fork server running (in the worker's environment and cwd) and the pool's job command its
    client (``roost setup --warm-fork``'s) for the duration; yields the worker's environment (the server's socket)."""
    from prefect.client.orchestration import get_client

    from deployments.deploy import DEFAULT_POOL
    from deployments.setup import _work_pool, engine_command

    sock = str(tmp / "warm-fork.sock")
    env = dict(os.environ, **env, ROOST_WARM_FORK_SOCKET=sock)
    script = str(REPO / "scripts" / "warm_fork.py")

    def set_command(command: str) -> None:
        with get_client(sync_client=True) as client:
            _work_pool(client, DEFAULT_POOL, command)

    server = subprocess.Popen([sys.executable, script, "serve", *WARM_FORK_PREIMPORT], cwd=REPO, env=env,
                              stdout=(tmp / "warm-fork.log").open("wb"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(sock):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"warm fork server did not start; see {tmp / 'warm-fork.log'}")
            time.sleep(0.2)
        set_command(engine_command(warm_fork=True))
        yield env
    finally:
        set_command(engine_command())
        _stop(server)


BREAKDOWN = [
    ("pickup", "created -> Pending (worker poll)"),
    ("start", "Pending -> Running (process start, flow import)"),
    ("setup", "Running -> first task running (flow setup)"),
    ("engine", "engine in the rest of the run"),
    ("prefect", "Prefect's part (pickup+start+setup+engine)"),
    ("stages", "stages (record's timings)"),
    ("total", "total (created -> Completed)"),
]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, 15)
    proc.wait(timeout=60)


def _trigger(profile: str) -> tuple[Any, Any, Any]:
    """One ``land/cpu`` run through the worker that just started: the run, its states, its task runs."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.deployments import run_deployment

    time.sleep(15)  # the worker's first poll has run: the pickup wait below is the steady-state one
    fr: Any = run_deployment("land/cpu", parameters={"profile": profile, "notify": False}, timeout=3600,
                             poll_interval=1)
    with get_client(sync_client=True) as client:
        history = client.read_flow_run_states(fr.id)
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fr.id])))
    return fr, history, task_runs


def deployment_run(profile: str, tmp: Path, flow_glue: float, label: str, env: dict[str, str]) -> dict[str, float]:
    """One warm ``land/cpu`` run through a worker started with ``env`` (and the warm fork server for
    ``warm-fork``); its breakdown in seconds."""
    from deployments.deploy import DEFAULT_POOL
    from roost.store import load_records

    bindir = Path(sys.executable).parent
    log = (tmp / f"worker-{label}.log").open("wb")
    with contextlib.ExitStack() as stack:
        worker_env = stack.enter_context(warm_fork(tmp, env)) if label == "warm-fork" else dict(os.environ, **env)
        worker = subprocess.Popen([str(bindir / "prefect"), "worker", "start", "--pool", DEFAULT_POOL, "--work-queue",
                                   "cpu", "--name", f"bench-worker-{label}"], stdout=log, stderr=subprocess.STDOUT,
                                  cwd=REPO, env=worker_env, start_new_session=True)
        stack.callback(_stop, worker)
        fr, history, task_runs = _trigger(profile)
    at = {st.type.value: st.timestamp for st in history}
    if "COMPLETED" not in at:
        raise SystemExit(f"land/cpu did not complete: {[(st.type.value, st.message) for st in history]}")
    starts = [t.start_time for t in task_runs if t.start_time is not None]
    first_task = min(starts) if starts else at["COMPLETED"]
    (rec,) = [r for r in load_records(model=None, host="cpu") if r.meta.prefect_flow_run_id == str(fr.id)]
    out = {
        "pickup": (at["PENDING"] - fr.created).total_seconds(),
        "start": (at["RUNNING"] - at["PENDING"]).total_seconds(),
        "setup": (first_task - at["RUNNING"]).total_seconds(),
        "stages": sum(st.seconds for st in rec.stages),
        "total": (at["COMPLETED"] - fr.created).total_seconds(),
    }
    running_rest = (at["COMPLETED"] - first_task).total_seconds()
    out["engine"] = max(0.0, running_rest - out["stages"] - flow_glue)
    out["prefect"] = out["pickup"] + out["start"] + out["setup"] + out["engine"]
    return out


def via_deployment(profile: str, tmp: Path, flow_glue: float, settings: list[str]) -> list[Row]:
    """Measure ``land/cpu`` run through a real worker, once per worker setting (see the module docstring)."""
    bindir = Path(sys.executable).parent
    setup = subprocess.run([str(bindir / "roost"), "setup", "--hosts", "cpu", "--json"], capture_output=True, text=True,
                           cwd=REPO)
    if setup.returncode != 0:
        raise SystemExit(f"roost setup failed: {setup.stderr[-2000:]}")
    # the caches are warm from the in-process runs: each deployment run is a warm run
    results = {label: deployment_run(profile, tmp, flow_glue, label, WORKER_SETTINGS[label]) for label in settings}
    imports = cold_import_s()
    print("\n== deployment run land/cpu, warm (times from the API's state history) ==")
    for label in settings:
        print(f"  {label}: " + " ".join(f"{k}={v}" for k, v in WORKER_SETTINGS[label].items()))
    print(f"{'component':<48}" + "".join(f"{label:>10}" for label in settings))
    for key, text in BREAKDOWN:
        print(f"{text:<48}" + "".join(f"{results[label][key]:>10.2f}" for label in settings))
    print(f"(flow glue {flow_glue:.2f} s and the stage modules' cold import {imports:.2f} s are roost's own work; "
          "the import is inside 'process start')")
    rows = []
    for label in settings:
        r = results[label]
        work = r["stages"] + flow_glue
        budget = max(0.05 * work, 5.0)
        print(f"{label}: Prefect's part {r['prefect']:.2f} s ({r['pickup']:.2f} s of it the worker's poll) against "
              f"{work:.2f} s of work; target max(5 %, 5 s) = {budget:.2f} s -> "
              f"{'PASS' if r['prefect'] < budget else 'over'}")
        poll = WORKER_SETTINGS[label]["PREFECT_WORKER_QUERY_SECONDS"]
        rows.append(Row(f"Prefect's part of a warm deployment run, worker polling every {poll} s ({label})", "s",
                        r["prefect"], work, "the stages' own work", f"< max(5% of the work, 5 s) = {budget:.1f} s",
                        judged(r["prefect"] < budget),
                        f"pickup {r['pickup']:.2f} + process start {r['start']:.2f} + flow setup {r['setup']:.2f} + "
                        f"engine {r['engine']:.2f} s; the stage modules' cold import {imports:.2f} s"))
    return rows


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="runs; the last is reported (the first warms the caches)")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--via-deployment", action="store_true", help="also measure land/cpu through a real worker")
    ap.add_argument("--worker-settings", default="before,after",
                    help=f"worker settings to compare, comma-separated, of: {', '.join(WORKER_SETTINGS)}")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)

    from roost.settings import vllm_python

    tmp = Path(tempfile.mkdtemp(prefix="roost-bench-orch-"))
    (tmp / "prefect-home").mkdir()
    os.environ["ROOST_VLLM_PYTHON"] = str(vllm_python())  # before ROOST_HOME moves to the scratch dir
    os.environ["ROOST_HOME"] = str(tmp / "roost-home")
    os.environ["PREFECT_HOME"] = str(tmp / "prefect-home")
    os.environ["ROOST_RESULTS_DIR"] = str(tmp / "results")
    os.environ.pop("VLLM_API_KEY", None)
    with prefect_server(tmp / "prefect-home") as url:
        os.environ["PREFECT_API_URL"] = url
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: url}):
            instrument(url)
            from flows.land import land

            for i in range(1, args.runs + 1):
                PROBE.reset()
                t0 = time.perf_counter()
                record = land(profile=args.profile, notify=False)
                wall = time.perf_counter() - t0
                print(f"run {i}/{args.runs}: {wall:.1f} s, {len(record['points'])} benchmark points")
            print(f"\n== in-process warm run {args.runs} of {args.runs}, profile {args.profile} ==")
            orchestration, work, flow_glue = report(record, wall)
            budget = max(0.05 * work, 5.0)
            rows = [Row(f"Prefect's orchestration of a warm land run, in-process (profile {args.profile})", "s",
                        orchestration, work, "the stages' own work", f"< max(5% of the work, 5 s) = {budget:.1f} s",
                        judged(orchestration < budget), f"wall {wall:.1f} s")]
            if args.via_deployment:
                rows += via_deployment(args.profile, tmp, flow_glue,
                                       [x for x in args.worker_settings.split(",") if x in WORKER_SETTINGS])
            write_rows(args.json_out, "bench_orchestration", rows)


if __name__ == "__main__":
    main()
