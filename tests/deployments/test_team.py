"""One team, two hosts: a Prefect server on PostgreSQL, a results store on an S3-compatible bucket, a worker
per host, and a flag sweep fanned out across them. What the README's team section says, done for real.

- PostgreSQL is Debian's (``support.postgres``), the Prefect server runs on it
  (``PREFECT_API_DATABASE_CONNECTION_URL=postgresql+asyncpg://...``); the bucket is moto's server mode
  (``support.s3``, a stand-in for S3) and its credentials live in a Roost Store Credentials block.
- ``roost setup --hosts cpu,cpu-2`` registers both hosts (``cpu-2`` is a saved Roost Host block: this
  machine's CPU again, a second "Spark"), their limits, the land deployments and ``sweep/roost-team``.
- Worker A takes ``cpu`` and ``sweep``, worker B ``cpu-2``: real ``prefect worker start`` processes.

1. The serving slots on PostgreSQL: two runs for one host never hold it at once, two hosts run at once.
2. ``roost sweep`` of three variants over both hosts: the first two land at the same time, one on each
   worker, their rows land in the bucket, and ``roost results`` from a third shell (no worker) lists
   them; the worker landing the third is killed mid-landing: the sweep ends with the other two measured
   and a report that names the third as missing.
3. The same sweep again, through ``sweep/roost-team`` on worker A: it lands only the missing variant and
   compares all three, the best one named.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterDeploymentId,
    FlowRunFilterParentFlowRunId,
)
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from pydantic import SecretStr
from roost_workers import HOLD_ENTRYPOINT, REPO
from support.cli import ROOST, roost_exe
from support.prefect_server import PrefectServer
from support.s3 import ACCESS_KEY, SECRET_KEY, MotoS3
from support.workers import Worker, start_worker, wait_final

from blocks.hosts import HostBlock
from blocks.profiles import ModelProfileBlock
from blocks.resolve import all_profiles, load_host
from blocks.store import StoreCredentialsBlock
from deployments.deploy import apply_deployment, build_deployment
from roost.hosts import CPU
from roost.profiles import LOCAL
from roost.store import load_runs
from roost.store.s3 import S3Store

if os.environ.get("ROOST_TESTS_NO_POSTGRES") == "1":
    pytest.skip("ROOST_TESTS_NO_POSTGRES=1: the PostgreSQL tests are off", allow_module_level=True)

from support.postgres import PostgresServer  # after the opt-out: it finds the binaries

pytestmark = pytest.mark.slow

POOL = "roost-team"
BUCKET = "roost-team"
STORE = f"s3://{BUCKET}/results"
CREDENTIALS = "team-store"
HOSTS = ("cpu", "cpu-2")
QUICK = "local-quick"
QUICK_BENCH = {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [2], "repeats": 1, "warmup": 1}
GRID = ["max-num-seqs=1,2,4"]
RUN_TIMEOUT_S = 900  # a guard against a hung test; nothing here is timed


@dataclass
class Team:
    api: str
    s3: MotoS3
    home: Path
    env: dict[str, str]
    log_dir: Path
    workers: dict[str, Worker] = field(default_factory=dict)

    def store(self) -> S3Store:
        return S3Store(BUCKET, "results", self.s3.credentials())

    def start_worker(self, name: str, *queues: str) -> Worker:
        self.workers[name] = start_worker(name, queues, pool=POOL, log=self.log_dir / f"worker-{name}.log", env=self.env)
        return self.workers[name]

    def roost(self, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """The installed ``roost`` in a shell of the team's (no worker): the server, the store and its block."""
        return roost_exe(*args, cwd=REPO, timeout=timeout, env=self.env)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    base = tmp_path_factory.mktemp("team")
    saved_env = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "ROOST_HOME")}
    with PostgresServer(base / "pg", database="prefect") as pg, MotoS3(base / "moto") as s3:
        s3.create_bucket(BUCKET)
        server = PrefectServer(base / "prefect-pg.log", timeout_s=180, env={
            "PREFECT_API_DATABASE_CONNECTION_URL": pg.url("prefect", driver="postgresql+asyncpg")}).start()
        api = server.url
        home = base / "home"
        env = dict(os.environ, PREFECT_API_URL=api, ROOST_HOME=str(home), ROOST_RESULTS_DIR=str(base / "local-results"),
                   ROOST_RESULTS_STORE_CREDENTIALS=CREDENTIALS)
        env.pop("ROOST_RESULTS_STORE", None)
        os.environ["PREFECT_API_URL"] = api
        t = Team(api=api, s3=s3, home=home, env=env, log_dir=base)
        try:
            with temporary_settings(updates={PREFECT_API_URL: api}):
                _blocks(s3)
                report = t.roost("setup", "--pool", POOL, "--hosts", ",".join(HOSTS), "--zombie-after", "60",
                                  "--json")
                assert report.returncode == 0, report.stderr[-3000:]
                setup = json.loads(report.stdout)
                assert setup["api_url"] == api
                names = {i["name"] for i in setup["items"] if i["kind"] == "deployment"}
                assert {"land/cpu", "land/cpu-2", f"sweep/{POOL}"} <= names
                t.start_worker("team-a", "cpu", "sweep")
                t.start_worker("team-b", "cpu-2")
                yield t
        finally:
            for w in t.workers.values():
                w.stop()
            _reap(home)
            server.stop()
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _blocks(s3: MotoS3) -> None:
    """What a team saves once: the bucket's credentials, the hosts pointing at the shared store, the profile."""
    StoreCredentialsBlock(access_key_id=ACCESS_KEY, secret_access_key=SecretStr(SECRET_KEY), endpoint_url=s3.url,
                          region="us-east-1", allow_http=True).save(CREDENTIALS)
    for name in HOSTS:
        HostBlock.from_profile(CPU.model_copy(update={"name": name, "results_store": STORE,
                                                      "results_store_credentials": CREDENTIALS})).save(name)
    ModelProfileBlock.from_profile(LOCAL.model_copy(update={
        "name": QUICK, "bench": QUICK_BENCH, "evals": [],
        "vllm_overrides": [*LOCAL.vllm_overrides, "--enforce-eager"],  # no compile warm-up: shorter cold loads
    })).save(QUICK)
    Secret(value=SecretStr("team-vllm-key-" + os.urandom(4).hex())).save("roost-vllm-api-key")


def _reap(home: Path) -> None:
    """Stop what the team's hosts left serving (an orphan of the killed worker)."""
    from roost.serve.process import reap_stale_servers

    old = os.environ.get("ROOST_HOME")
    os.environ["ROOST_HOME"] = str(home)
    try:
        for h in HOSTS:
            with contextlib.suppress(Exception):
                reap_stale_servers(h)
    finally:
        if old is not None:
            os.environ["ROOST_HOME"] = old


def _landings() -> list[Any]:
    """Every run of the hosts' land deployments, oldest first (a run still Scheduled has Prefect's own name,
    so they are found by deployment)."""
    with get_client(sync_client=True) as client:
        ids = [client.read_deployment_by_name(f"land/{h}").id for h in HOSTS]
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=ids)),
                                     limit=200)
    return sorted(runs, key=lambda fr: fr.created)


# --- 1. the serving slots on PostgreSQL ------------------------------------------------------------


def test_on_postgres_one_host_never_serves_twice_and_two_hosts_run_at_once(team: Team, tmp_path: Path) -> None:
    deps = []
    for h in HOSTS:
        dep = build_deployment("roost-test-hold", load_host(h), pool=POOL, profiles=all_profiles(), source=REPO,
                               entrypoint=HOLD_ENTRYPOINT)
        apply_deployment(dep)
        deps.append(dep.full_name)
    # team-a takes both cpu runs at once, each in a process of its own: only the host's limit orders them

    def trigger(dep: str, me: str, until: list[str], linger_s: float = 0.0) -> Any:
        return run_deployment(dep, timeout=0, parameters={"me": me, "meet_dir": str(tmp_path), "until": until,
                                                          "linger_s": linger_s, "timeout_s": 300})

    a = trigger("roost-test-hold/cpu", "a", ["arrived-b"], 3.0)
    b = trigger("roost-test-hold/cpu", "b", ["arrived-a"], 3.0)
    c = trigger("roost-test-hold/cpu-2", "c", ["entered-a", "entered-b"])
    done = [wait_final(fr.id, 600) for fr in (a, b, c)]
    assert all(fr.state.is_completed() for fr in done), [fr.state for fr in done]
    ra, rb, rc = (fr.state.result() for fr in done)
    assert (ra["met"], ra["clash"], rb["met"], rb["clash"]) == (True, None, True, None)  # cpu: one at a time
    assert rc["met"] and rc["clash"] is None  # cpu-2 held its slot while both cpu runs held theirs in turn


# --- 2. a sweep over both hosts, one worker killed mid-sweep -----------------------------------------


@pytest.fixture(scope="module")
def first_sweep(team: Team) -> dict[str, Any]:
    """``roost sweep`` from a shell of the team's; the worker landing the third variant is killed once it
    serves. Returns the sweep's JSON, the two concurrent landings and what was killed."""
    env = team.env
    proc = subprocess.Popen([ROOST, "sweep", "--profile", QUICK, *[f"--grid={g}" for g in GRID],
                             "--hosts", ",".join(HOSTS), "--json"], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    killed = ""
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline and not killed:
            landings = _landings()
            if len(landings) >= 3:
                third = landings[2]
                if (third.labels or {}).get("roost.stage") in ("health-wait", "vision-probe", "benchmark"):
                    worker = next(w for w in team.workers.values() if third.work_queue_name in w.queue.split(","))
                    worker.kill_hard(spare_pgids=set())
                    killed = worker.name
                    break
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(1)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, "the third landing never reached its server"
    (team.log_dir / "first-sweep.out").write_text(out)
    (team.log_dir / "first-sweep.err").write_text(err)
    landings = _landings()
    return {"code": proc.returncode, "out": out, "err": err, "killed": killed, "landings": landings}


def test_two_workers_land_at_once_into_the_shared_store(team: Team, first_sweep: dict[str, Any]) -> None:
    first, second = first_sweep["landings"][:2]
    assert {first.work_queue_name, second.work_queue_name} == set(HOSTS)
    assert first.state.is_completed() and second.state.is_completed(), (first.state.message, second.state.message)
    # both ran at once: each started before the other ended
    assert first.start_time < second.end_time and second.start_time < first.end_time
    runs = load_runs(team.store())
    mine = runs[runs["prefect_flow_run_id"].isin([str(first.id), str(second.id)])]
    assert sorted(mine["host_name"]) == sorted(HOSTS) and set(mine["status"]) == {"completed"}
    # a third shell with no worker: the server's credentials block and the store URL only
    listing = subprocess.run([ROOST, "results", "--store", STORE, "--json"], cwd=REPO, capture_output=True,
                             text=True, timeout=300, env={**team.env, "ROOST_HOME": str(team.log_dir / "laptop")})
    assert listing.returncode == 0, listing.stderr
    listed = {r["prefect_flow_run_id"]: r["host_name"] for r in json.loads(listing.stdout)}
    assert listed[str(first.id)] == first.work_queue_name and listed[str(second.id)] == second.work_queue_name
    assert SECRET_KEY not in listing.stdout + listing.stderr


def test_a_worker_killed_mid_sweep_leaves_the_rest_measured_and_a_report_naming_what_is_missing(
        team: Team, first_sweep: dict[str, Any]) -> None:
    assert first_sweep["code"] == 1, first_sweep["err"][-3000:]
    data = json.loads(first_sweep["out"])
    status = {s["variant"]["settings"]["max-num-seqs"]: s["status"] for s in data["states"]}
    assert sorted(status.values()) == ["done", "done", "missing"], status
    (lost,) = [s for s in data["states"] if s["status"] == "missing"]
    assert "crashed" in lost["reason"]
    third = first_sweep["landings"][2]
    assert third.state.type.value == "CRASHED" and lost["flow_run_id"] == str(third.id)
    report = Path(data["report"]).read_text()
    assert f"`max-num-seqs={lost['variant']['settings']['max-num-seqs']}`: MISSING on {lost['host']}" in report
    assert "Run the sweep again to measure the missing variants" in report
    assert Path(data["report"]).with_name("throughput_per_variant.png").is_file()


def test_the_rerun_lands_only_what_is_missing_and_names_the_best(team: Team, first_sweep: dict[str, Any]) -> None:
    killed = team.workers[first_sweep["killed"]]
    team.start_worker(killed.name, *killed.queue.split(","))
    before = {str(fr.id) for fr in _landings()}
    fr = run_deployment(f"sweep/{POOL}", timeout=0, parameters={"profile": QUICK, "grid": GRID, "hosts": list(HOSTS),
                                                                 "pickup_timeout_s": 120, "poll_s": 2})
    done = wait_final(fr.id, RUN_TIMEOUT_S)
    assert done.state.is_completed(), done.state
    new = [r for r in _landings() if str(r.id) not in before]
    assert len(new) == 1 and new[0].state.is_completed()
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[done.id])))
    assert [c.id for c in children] == [new[0].id]  # the landing shows under the sweep in the UI
    store = team.store()
    (summary_key,) = [o.key for o in store.list_objects("sweeps/") if o.key.endswith(".json")][-1:]
    summary = json.loads(store.get(summary_key))
    assert sorted(s["status"] for s in summary["states"]) == ["done", "measured", "measured"]
    best = summary["comparison"]["best"]
    assert best is not None and best["variant"].startswith("max-num-seqs=") and best["runner_up"]
    assert (done.state.message or "").startswith(("best:", "no clear best:"))
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts()
    assert any(a.key == "roost-sweep-local-quick" for a in arts)
