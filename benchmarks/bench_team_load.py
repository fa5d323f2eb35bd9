"""What one landing costs a team's Prefect server and results store: the figures behind the README's
"A team's costs" (10 Sparks, 1,000 landings a month).

Starts Debian's PostgreSQL (``tests/support/postgres.py``), a ``prefect server start`` on it, moto's S3
server (``tests/support/s3.py``, a stand-in for S3), saves a Roost Store Credentials block and a host
``cpu`` pointing at the bucket, runs ``roost setup --hosts cpu``, starts one real worker on the ``cpu``
queue (``PREFECT_WORKER_QUERY_SECONDS=1``, as the README says) and triggers ``land/cpu`` ``--runs``
times with the ``local`` profile (the first run cold, the others warm). Measured per landing:

- PostgreSQL (``pg_stat_database`` of the Prefect database, before and after): transactions committed,
  rows inserted, updated and deleted, the database's size;
- the worker's idle load: the same counters over ``--idle`` seconds with the worker polling and nothing
  to run (a team pays it per worker, all month);
- the Prefect API: the landing's task runs, log lines and artifacts;
- the store: objects and bytes written per table (the bucket listed before and after), and the benchmark
  requests the landing stored, so the ``requests`` table can be scaled to a recipe profile's benchmark.

    .venv/bin/python benchmarks/bench_team_load.py [--runs 3] [--idle 120] [--json OUT]

Needs the vLLM venv (scripts/bootstrap) and PostgreSQL (``apt-get install postgresql``). ~3 min a landing
on 2 cores. Query times at team scale are ``bench_store_scale.py``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test-only: support.postgres / .s3

from _table import Row, add_json_argument, write_rows
from support.postgres import PostgresServer
from support.s3 import ACCESS_KEY, SECRET_KEY, MotoS3

from roost.bench.settings import BenchSettings
from roost.profiles import PROFILES

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
POOL = "roost-bench"
BUCKET = "roost-bench"
STORE = f"s3://{BUCKET}/results"
COUNTERS = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted")


def pg_counters(pg: PostgresServer) -> dict[str, int]:
    """The Prefect database's counters and size (``pg_stat_database``; the stats are flushed first)."""
    pg.psql("SELECT pg_stat_force_next_flush()", database="prefect")
    time.sleep(1.5)  # other backends flush theirs within a second
    row = pg.psql(f"SELECT {', '.join(COUNTERS)}, pg_database_size('prefect') FROM pg_stat_database "
                  "WHERE datname = 'prefect'")
    values = [int(v) for v in row.strip().split("|")]
    return dict(zip([*COUNTERS, "db_bytes"], values, strict=True))


def bucket_objects(s3: MotoS3) -> dict[str, int]:
    """Every object of the bucket and its size."""
    from roost.store.s3 import S3Store

    store = S3Store(BUCKET, "results", s3.credentials())
    return {o.key: o.size for o in store.list_objects("")}


def prefect_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    from roost.net import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=env | {"PREFECT_UI_ENABLED": "false", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"prefect server exited; see {log}")
        time.sleep(0.5)
    raise SystemExit(f"prefect server did not start in 180 s; see {log}")


def save_blocks(s3: MotoS3) -> None:
    from pydantic import SecretStr

    from blocks.hosts import HostBlock
    from blocks.store import StoreCredentialsBlock
    from roost.hosts import CPU

    StoreCredentialsBlock(access_key_id=ACCESS_KEY, secret_access_key=SecretStr(SECRET_KEY), endpoint_url=s3.url,
                          region="us-east-1", allow_http=True).save("bench-store")
    HostBlock.from_profile(CPU.model_copy(update={"results_store": STORE, "results_store_credentials": "bench-store"})
                           ).save("cpu")


def landing_facts(flow_run_id: Any) -> dict[str, Any]:
    """The landing's rows on the Prefect server: task runs, log lines, artifacts; its duration."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    with get_client(sync_client=True) as client:
        fr = client.read_flow_run(flow_run_id)
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fr.id])), limit=200)
        logs = 0
        while True:
            page = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[fr.id])), limit=200,
                                    offset=logs)
            logs += len(page)
            if len(page) < 200:
                break
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[fr.id])))
    assert fr.start_time is not None and fr.end_time is not None
    return {"state": fr.state_name, "seconds": (fr.end_time - fr.start_time).total_seconds(), "task_runs": len(tasks),
            "logs": logs, "artifacts": len(arts)}


def table_of(key: str) -> str:
    parts = key.split("/")
    return parts[0] + ("/_catalog" if len(parts) > 1 and parts[1] == "_catalog" else "")


def planned_requests(bench: Mapping[str, Any]) -> int:
    """Measured benchmark requests of a profile's settings: each prompt length once per repeat (one user),
    each concurrency level's users, ``requests_per_user`` each, per repeat."""
    s = BenchSettings(**bench)
    return s.repeats * (len(s.prompt_lengths) + sum(s.concurrency) * s.requests_per_user)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="landings to trigger (the first is cold)")
    ap.add_argument("--idle", type=float, default=120.0, help="seconds of an idle polling worker to measure")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="roost-bench-team-"))
    print(f"scratch: {tmp}")
    with PostgresServer(tmp / "pg", database="prefect") as pg, MotoS3(tmp / "moto") as s3:
        s3.create_bucket(BUCKET)
        default_home = Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost"))
        env = dict(os.environ, PREFECT_HOME=str(tmp / "prefect-home"), ROOST_HOME=str(tmp / "home"),
                   ROOST_RESULTS_DIR=str(tmp / "local-results"),  # the vLLM venv scripts/bootstrap made:
                   ROOST_VLLM_PYTHON=os.environ.get("ROOST_VLLM_PYTHON", str(default_home / "vllm-venv/bin/python")))
        env.pop("PREFECT_API_URL", None)
        env.pop("ROOST_RESULTS_STORE", None)
        server, api = prefect_server(env | {"PREFECT_API_DATABASE_CONNECTION_URL": pg.url(
            "prefect", driver="postgresql+asyncpg")}, tmp / "server.log")
        env["PREFECT_API_URL"] = api
        os.environ.update({"PREFECT_API_URL": api, "PREFECT_HOME": env["PREFECT_HOME"], "ROOST_HOME": env["ROOST_HOME"]})
        worker = None
        try:
            save_blocks(s3)
            setup = subprocess.run([str(BIN / "roost"), "setup", "--pool", POOL, "--hosts", "cpu", "--json"],
                                   capture_output=True, text=True, cwd=REPO, env=env)
            if setup.returncode != 0:
                raise SystemExit(f"roost setup failed: {setup.stderr[-2000:]}")
            worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--work-queue", "cpu",
                                       "--name", "bench-team"], stdout=(tmp / "worker.log").open("wb"),
                                      stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                      env=env | {"PREFECT_WORKER_QUERY_SECONDS": "1"})
            time.sleep(15)
            idle0 = pg_counters(pg)
            time.sleep(args.idle)
            idle1 = pg_counters(pg)
            idle = {k: (idle1[k] - idle0[k]) / args.idle for k in COUNTERS}
            rows = []
            from prefect.deployments import run_deployment

            for i in range(args.runs):
                before_pg, before_s3 = pg_counters(pg), bucket_objects(s3)
                fr: Any = run_deployment("land/cpu", parameters={"profile": "local", "notify": False}, timeout=3600,
                                         poll_interval=2)
                facts = landing_facts(fr.id)
                after_pg, after_s3 = pg_counters(pg), bucket_objects(s3)
                new = {k: v for k, v in after_s3.items() if k not in before_s3}
                by_table: Counter[str] = Counter()
                for k, v in new.items():
                    by_table[table_of(k)] += v
                req_rows = sum(1 for k in new if k.startswith("requests/"))
                rows.append({"run": i + 1, **facts, **{k: after_pg[k] - before_pg[k] for k in COUNTERS},
                             "db_bytes": after_pg["db_bytes"] - before_pg["db_bytes"], "objects": len(new),
                             "store_bytes": sum(new.values()), "by_table": dict(by_table),
                             "request_objects": req_rows})
                print(json.dumps(rows[-1]))
                if facts["state"] != "Completed":
                    raise SystemExit(f"landing {i + 1} ended {facts['state']}; see {tmp / 'worker.log'}")
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(timeout=60)
            server.terminate()
            server.wait(timeout=60)
    write_rows(args.json_out, "bench_team_load", report(rows, idle))


def report(rows: list[dict[str, Any]], idle: dict[str, float]) -> list[Row]:
    """Print the figures; the rows of a landing (cold, and the warm median) and of an idle worker."""
    warm = rows[1:] or rows
    med = {k: statistics.median(r[k] for r in warm) for k in (*COUNTERS, "db_bytes", "store_bytes", "seconds",
                                                              "task_runs", "logs", "artifacts", "objects")}
    print("\n== one landing of the local profile, through a worker, on PostgreSQL and an S3-compatible store ==")
    print(f"{'':<30}{'cold':>12}{'warm (median)':>16}")
    for k in (*COUNTERS, "db_bytes", "task_runs", "logs", "artifacts", "objects", "store_bytes", "seconds"):
        print(f"{k:<30}{rows[0][k]:>12,.0f}{med[k]:>16,.0f}")
    tables = sorted({t for r in rows for t in r["by_table"]})
    print("store bytes by table (warm median): " + ", ".join(
        f"{t} {statistics.median(r['by_table'].get(t, 0) for r in warm):,.0f}" for t in tables))
    print(f"idle worker (polling every 1 s): {idle['xact_commit']:.2f} transactions/s, "
          f"{idle['tup_inserted']:.2f} rows inserted/s, {idle['tup_updated']:.2f} updated/s")
    local_req = planned_requests(PROFILES["local"].bench)
    req_bytes = statistics.median(r["by_table"].get("requests", 0) for r in warm)
    per_request = req_bytes / local_req if local_req else 0.0
    other = med["store_bytes"] - req_bytes
    print(f"requests table: {req_bytes:,.0f} bytes for {local_req} measured requests ({per_request:,.0f} B each, "
          "one Parquet object; a larger one compresses better, so scaling by requests overestimates)")
    landings, sparks, seconds_month = 1000, 10, 30 * 86400
    print(f"\n== a team: {sparks} Sparks, {landings:,} landings a month ==")
    xact = med["xact_commit"]
    print(f"Prefect's database: {landings * xact / seconds_month:.3f} transactions/s from landings on average "
          f"({xact:,.0f} per landing), {sparks} landings at once {sparks * xact / med['seconds']:.1f}/s over a "
          f"{med['seconds']:.0f}-s landing (a Spark's landing is longer: the same transactions spread thinner); "
          f"{sparks} idle workers {sparks * idle['xact_commit']:.1f}/s all month")
    print(f"Prefect's database grows {landings * med['db_bytes'] / 1e6:,.0f} MB a month from landings "
          f"(before Prefect's retention of events and logs)")
    for name in ("ornith-35b", "ornith-9b", "ornith-1.5-35b-a3b-nvfp4"):
        n = planned_requests(PROFILES[name].bench)
        per_landing = other + n * per_request
        print(f"store, {name} ({n} requests a landing): ~{per_landing / 1e3:,.0f} kB a landing, "
              f"{landings * per_landing / 1e6:,.0f} MB a month")
    cold = rows[0]
    how = f"cold, {cold['seconds']:.0f} s" + (f"; warm median {med['seconds']:.0f} s" if len(rows) > 1 else "")
    return [
        Row(f"PostgreSQL transactions per landing ({how})", "", cold["xact_commit"],
            detail=f"warm median {med['xact_commit']:,.0f}"),
        Row("PostgreSQL rows inserted + updated per landing (cold)", "", cold["tup_inserted"] + cold["tup_updated"],
            detail=f"warm median {med['tup_inserted'] + med['tup_updated']:,.0f}"),
        Row("Prefect database growth per landing (cold)", "MB", cold["db_bytes"] / 1e6,
            detail=f"warm median {med['db_bytes'] / 1e6:.1f} MB"),
        Row("results store bytes per landing (cold)", "kB", cold["store_bytes"] / 1e3,
            detail=f"{cold['objects']} objects; warm median {med['store_bytes'] / 1e3:.0f} kB"),
        Row("an idle worker polling every 1 s: PostgreSQL transactions", "/s", idle["xact_commit"]),
    ]


if __name__ == "__main__":
    main()
