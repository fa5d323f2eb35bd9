"""The results store at team scale: 1,000, 10,000 and 100,000 runs, on a directory and on an S3-compatible
bucket (moto's server on loopback, ``tests/support/s3.py``: a stand-in for S3, ~5 ms a request).

    .venv/bin/python benchmarks/bench_store_scale.py [--sizes 1000,10000,100000] [--repeat 5] [--skip-s3]
        [--json OUT]

Setup (not timed): a store holding ``N`` runs of 20 models on 10 hosts (200 partitions) as a team's store
looks just before a compaction: a runs catalog of ``N - 15`` synthetic rows in the real schema
(``tests/support/store_rows.py``), and the newest 15 runs of one partition (``team/model-00`` on
``spark-00``) appended as real runs after it (``catalog.COMPACT_AFTER - 1``: the most a partition holds
past its catalog), with the records of that partition's newest 60 runs.

Rows (median of ``--repeat``; the requests and bytes the store was asked for, from ``ReadStats``):

- listing, one model and host: what ``roost results --model M --host H`` reads and prints;
- listing, newest 50: ``roost results --last 50`` over the whole store (every partition's newest objects);
- baseline lookup: the runs of the partition, the comparable ones picked, the newest 5 of them read and
  compared (``roost.regress.compare``): what a landing's verdict needs;
- report history: the partition's newest 60 records (``tasks.report.HISTORY_LIMIT``), for the charts.

And, to show what the catalog buys: the same listings of a store without one (every run one object,
as before this store version) at the sizes ``--no-catalog-max`` allows (writing 100,000 objects to moto
takes ten minutes).

Targets at 100,000 runs: baseline lookup under 0.5 s, listing under 2 s, and both growing sub-linearly
with runs (a ratio 100k/1k far below 100): printed PASS/FAIL. Every store must read back the runs it was
filled with (the partition's count, the newest 50), or the run fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test-only: support.s3 / .store_rows

from _table import Row, add_json_argument, judged, write_rows
from support import store_rows
from support.s3 import MotoS3
from support.samples import spark_run

from roost import store
from roost.commands.results import render_table, select_runs
from roost.regress import compare
from roost.store import catalog
from roost.store.layout import comparable_key_id, record_key
from roost.store.objects import LocalStore, ObjectStore
from roost.store.s3 import S3Store
from roost.store.schema import RUNS_SCHEMA, parquet_bytes

MODELS, HOSTS = 20, 10
TAIL = 15  # the most runs a partition holds past the catalog before a run compacts it (COMPACT_AFTER - 1)
HISTORY = 60
WINDOW = 5


def fill(target: ObjectStore, n: int, with_catalog: bool = True) -> tuple[str, str, int]:
    """``n`` runs in ``target``; the (repo, host) of the partition the lookups read, and its runs."""
    parts = store_rows.partitions(MODELS, HOSTS)
    repo, host = parts[0]
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(days=366, hours=1)  # a year, up to now
    table = store_rows.synthetic_runs(n - TAIL, parts, span_days=365, start=start)
    if with_catalog:
        catalog.write_catalog(target, table)
    else:
        rows = table.to_pylist()
        for r in rows:
            key = f"runs/model={r['model']}/host={r['host']}/{r['run_id']}.parquet"
            target.put_new(key, parquet_bytes([{k: v for k, v in r.items() if k in RUNS_SCHEMA.names}], RUNS_SCHEMA))
    mine = [r for r in table.to_pylist() if (r["repo_id"], r["host_name"]) == (repo, host)]
    for r in mine[-(HISTORY - TAIL):]:  # the records the history and the baseline read
        target.put_new(record_key(repo, host, r["run_id"]), store_rows.record_for(r).model_dump_json().encode())
    end = start + dt.timedelta(days=366)  # the tail: committed now, as landings are (none is a late commit)
    base = spark_run(day=1)
    for i in range(TAIL):
        rec = store_rows.record_for({"run_id": store_rows.run_id_at(end + dt.timedelta(minutes=i), 10_000_000 + i),
                                     "repo_id": repo, "host_name": host, "started_at": end + dt.timedelta(minutes=i)})
        rec = rec.model_copy(update={"points": base.points})
        store.append_run(rec, target)
    return repo, host, len(mine) + TAIL


def check_counts(target: ObjectStore, repo: str, host: str, expected: int, n: int) -> None:
    """The store reads back what it was filled with: the partition's runs, and 50 newest of all."""
    got = len(store.load_runs(target, model=repo, host=host))
    newest = len(select_runs(store.load_runs(target), None, None, 50))
    if got != expected or newest != min(50, n):
        raise SystemExit(f"the store read back {got} runs of {repo} on {host} (filled {expected}) and {newest} "
                         f"newest of {n} (expected {min(50, n)})")


def baseline_lookup(target: ObjectStore, repo: str, host: str, stats: store.ReadStats) -> Any:
    runs = store.load_runs(target, model=repo, host=host, stats=stats)
    current = store_rows.record_for({"run_id": "99991231T000000Z-ffffffff", "repo_id": repo, "host_name": host,
                                     "started_at": dt.datetime(9999, 1, 1, tzinfo=dt.UTC)})
    current = current.model_copy(update={"points": spark_run(day=1).points})
    same = runs[(runs["comparable_key"] == comparable_key_id(current.meta)) & (runs["status"] == "completed")]
    rows = same.tail(WINDOW).to_dict(orient="records")
    history = store._records_of(target, rows, stats)
    return compare(current, history)


def listing_one(target: ObjectStore, repo: str, host: str, stats: store.ReadStats) -> str:
    df = select_runs(store.load_runs(target, model=repo, host=host, stats=stats), repo, host, None)
    return render_table(df.assign(note="").to_dict(orient="records"))


def listing_newest(target: ObjectStore, stats: store.ReadStats) -> str:
    df = select_runs(store.load_runs(target, stats=stats), None, None, 50)
    return render_table(df.assign(note="").to_dict(orient="records"))


def operations(target: ObjectStore, repo: str, host: str) -> dict[str, Callable[[store.ReadStats], Any]]:
    def one(st: store.ReadStats) -> Any:
        return listing_one(target, repo, host, st)

    def newest(st: store.ReadStats) -> Any:
        return listing_newest(target, st)

    def baseline(st: store.ReadStats) -> Any:
        return baseline_lookup(target, repo, host, st)

    def history(st: store.ReadStats) -> Any:
        return store.load_records(target, model=repo, host=host, limit=HISTORY, stats=st)

    return {"listing, one model and host": one, "listing, newest 50": newest, "baseline lookup": baseline,
            "report history (60 records)": history}


def timed(fn: Callable[[store.ReadStats], Any], repeat: int) -> tuple[float, store.ReadStats]:
    times, last = [], store.ReadStats()
    for _ in range(repeat):
        last = store.ReadStats()
        t0 = time.perf_counter()
        fn(last)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), last


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--no-catalog-max", type=int, default=10_000, help="largest store measured without a catalog")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="roost-store-scale-"))
    print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; work dir {work}", flush=True)
    results: dict[tuple[str, str, int], tuple[float, store.ReadStats]] = {}
    s3 = None if args.skip_s3 else MotoS3(work / "moto").start()
    kinds = ["dir"] + ([] if s3 is None else ["s3"])
    try:
        for kind in kinds:
            for layout in ("catalog", "no catalog"):
                for n in sizes:
                    if layout == "no catalog" and (n > args.no_catalog_max or (kind == "s3" and n > 1000)):
                        continue
                    if kind == "dir":
                        target: ObjectStore = LocalStore(work / f"{layout}-{n}".replace(" ", "-"))
                    else:
                        assert s3 is not None
                        bucket = f"scale-{uuid.uuid4().hex[:8]}"
                        s3.create_bucket(bucket)
                        target = S3Store(bucket, "results", s3.credentials())
                    t0 = time.perf_counter()
                    # a store without a catalog stays without one (no run compacts it while it is filled)
                    catalog.COMPACT_AFTER = 16 if layout == "catalog" else 10**9
                    repo, host, expected = fill(target, n, with_catalog=layout == "catalog")
                    print(f"{kind} {layout} {n:>7,} runs: filled in {time.perf_counter() - t0:.1f} s", flush=True)
                    check_counts(target, repo, host, expected, n)
                    for name, fn in operations(target, repo, host).items():
                        results[(f"{kind}, {layout}", name, n)] = timed(fn, args.repeat)
    finally:
        if s3 is not None:
            s3.stop()
    write_rows(args.json_out, "bench_store_scale", report(results, sizes))
    return 0


def report(results: dict[tuple[str, str, int], tuple[float, store.ReadStats]], sizes: list[int]) -> list[Row]:
    """Print the table and the verdicts; the rows of the largest size (and the catalog's worth)."""
    heads = [f"{n:,} runs s" for n in sizes]
    print()
    print("| store | operation | " + " | ".join(heads) + f" | {sizes[-1] // sizes[0]}x runs: time x | "
          f"requests at {sizes[-1]:,} | kB at {sizes[-1]:,} |")
    print("|---|---|" + "---:|" * (len(sizes) + 3))
    verdicts = []
    rows: list[Row] = []
    for (where, name) in dict.fromkeys((w, o) for w, o, _ in results):
        cells, first = [], None
        for n in sizes:
            got = results.get((where, name, n))
            cells.append(f"{got[0]:.3f}" if got else "—")
            first = first if first is not None or got is None else got[0]
        last = results.get((where, name, sizes[-1]))
        ratio = f"{last[0] / first:.1f}" if last and first else "—"
        reqs = str(last[1].requests) if last else "—"
        kb = f"{last[1].bytes / 1000:.0f}" if last else "—"
        print(f"| {where} | {name} | " + " | ".join(cells) + f" | {ratio} | {reqs} | {kb} |")
        if last and "catalog" in where and "no catalog" not in where:
            limit = 0.5 if name == "baseline lookup" else 2.0 if name.startswith("listing") else None
            if limit is not None:
                verdicts.append(f"{'PASS' if last[0] < limit else 'FAIL'}: {where}, {name} at {sizes[-1]:,} runs "
                                f"{last[0]:.3f} s (target < {limit} s), x{ratio} over {sizes[-1] // sizes[0]}x runs")
            growth = f"x{ratio} over {sizes[-1] // sizes[0]}x runs, {last[1].requests} requests"
            rows.append(Row(f"{name}, {sizes[-1]:,} runs ({where.removesuffix(', catalog')})", "s", last[0],
                            target=f"< {limit:g} s" if limit is not None else "",
                            verdict=judged(last[0] < limit) if limit is not None else "not judged", detail=growth))
    # what the catalog buys: the newest 50 of the largest store measured without one, with and without it
    for kind in ("dir", "s3"):
        bare = [n for n in sizes if (f"{kind}, no catalog", "listing, newest 50", n) in results]
        if bare and (f"{kind}, catalog", "listing, newest 50", bare[-1]) in results:
            n = bare[-1]
            rows.append(Row(f"listing, newest 50, {n:,} runs ({kind}): with the runs catalog vs without", "s",
                            results[(f"{kind}, catalog", "listing, newest 50", n)][0], reference_name="no catalog",
                            reference=results[(f"{kind}, no catalog", "listing, newest 50", n)][0]))
    print()
    for v in verdicts:
        print(v)
    return rows


if __name__ == "__main__":
    sys.exit(main())
