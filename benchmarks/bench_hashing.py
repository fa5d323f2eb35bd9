"""Integrity hashing throughput vs ``sha256sum``, and the warm re-run of the download stage.

    .venv/bin/python benchmarks/bench_hashing.py [--gb 3] [--shards 4] [--replica-gb 70.3] [--cold] [--json OUT]

Part 1 writes ``--shards`` random shards (``--gb`` in total) and hashes the same files, in the same
run, with: ``sha256sum`` one file after another; ``sha256sum`` one process per core (``xargs -P``);
roost's hasher on one thread (1, 4 and 8 MiB reads); roost's hasher on one thread per core. Every
tool must agree on every digest. ``--cold`` evicts the shards from the page cache
(``posix_fadvise(DONTNEED)``, our files only) before each measurement; by default they are cached,
which measures hashing rather than the disk.

Part 2 builds a 35B-sized replica of sparse shards (``truncate``: no disk used), publishes it to a
local olah mirror (LFS objects hard-linked), runs the download stage once cold (it hashes every
byte in place: nothing to fetch) and then warm, several times: by branch (one refs call to the
mirror) and pinned to the commit (no network). Target: warm under 1 s.

Rows (``--json``): roost's hasher per CPU-second against ``sha256sum``'s (target: at least its rate, so
hashing keeps up with any disk ``sha256sum`` keeps up with), every core against ``sha256sum`` on every
core, and the warm re-runs. A digest on which the tools disagree fails the run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _table import Row, add_json_argument, judged, write_rows

from roost.hub.integrity import hash_files
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo
from roost.hub.snapshot import DownloadSpec, download_and_verify
from roost.units import MiB


def evict(paths: Sequence[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(paths: Sequence[Path]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 * MiB):
                pass


def write_shards(workdir: Path, total_bytes: int, n: int) -> list[Path]:
    paths = []
    size = total_bytes // n
    for i in range(n):
        p = workdir / f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        if not p.exists() or p.stat().st_size != size:
            with open(p, "wb") as f:
                left = size
                while left:
                    chunk = min(64 * MiB, left)
                    f.write(os.urandom(chunk))
                    left -= chunk
        paths.append(p)
    return paths


def sha256sum(paths: Sequence[Path], parallel: int) -> dict[Path, str]:
    if parallel <= 1:
        out = subprocess.run(
            ["sha256sum", *map(str, paths)], capture_output=True, text=True, check=True
        ).stdout
    else:
        out = subprocess.run(
            ["xargs", "-0", "-n", "1", "-P", str(parallel), "sha256sum"],
            input="\0".join(map(str, paths)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    digests = {}
    for line in out.splitlines():
        digest, name = line.split(maxsplit=1)
        digests[Path(name.lstrip("*"))] = digest
    return digests


def cpu_seconds() -> float:
    """CPU time (user + system) of this process's threads and of its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(
    fn: Callable[[], dict[Path, str]], paths: Sequence[Path], cold: bool, repeats: int
) -> tuple[float, float, dict[Path, str]]:
    """Best wall time, the CPU time of that run, and the digests."""
    best = (float("inf"), 0.0)
    result: dict[Path, str] = {}
    for _ in range(repeats):
        if cold:
            evict(paths)
        else:
            warm(paths)
        c0, t0 = cpu_seconds(), time.perf_counter()
        result = fn()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        if wall < best[0]:
            best = (wall, cpu)
    return best[0], best[1], result


def part1(workdir: Path, gb: float, shards: int, cold: bool, repeats: int) -> list[Row]:
    cores = os.cpu_count() or 1
    paths = write_shards(workdir, int(gb * 1e9), shards)
    total = sum(p.stat().st_size for p in paths)

    def roost(workers: int, chunk: int) -> Callable[[], dict[Path, str]]:
        return lambda: {p: d.sha256 for p, d in hash_files(paths, workers=workers, chunk_size=chunk).items()}

    runs: list[tuple[str, int, Callable[[], dict[Path, str]]]] = [
        ("sha256sum, one file after another", 1, lambda: sha256sum(paths, 1)),
        (f"sha256sum x{cores} (xargs -P{cores})", cores, lambda: sha256sum(paths, cores)),
        ("roost hash_files, 1 thread, 1 MiB reads", 1, roost(1, 1 * MiB)),
        ("roost hash_files, 1 thread, 4 MiB reads", 1, roost(1, 4 * MiB)),
        ("roost hash_files, 1 thread, 8 MiB reads", 1, roost(1, 8 * MiB)),
        (f"roost hash_files, {cores} threads, 4 MiB reads", cores, roost(cores, 4 * MiB)),
    ]
    rows = []
    reference: dict[Path, str] | None = None
    for name, workers, fn in runs:
        seconds, cpu, digests = timed(fn, paths, cold, repeats)
        if reference is None:
            reference = digests
        if {p.resolve(): d for p, d in digests.items()} != {p.resolve(): d for p, d in reference.items()}:
            raise SystemExit(f"{name} disagrees with {runs[0][0]} on a digest")
        rows.append((name, workers, seconds, total / seconds / 1e9, total / max(cpu, 1e-9) / 1e9))
    seq_rate = rows[0][3]
    ref_per_cpu = rows[0][4]  # sha256sum hashes one file on one core: its rate per CPU-second
    load = os.getloadavg()[0]
    print(
        f"\n## Hashing {shards} shards, {total / 1e9:.2f} GB total, {cores} cores (load average {load:.1f}), "
        f"{'cold (evicted before each run)' if cold else 'page-cached'}, best of {repeats}\n"
    )
    print(
        f"| {'tool':44} | {'cores':>5} | {'wall s':>7} | {'GB/s':>6} | {'GB per CPU-s':>12} | "
        f"{'per core vs sha256sum':>21} | {'wall vs sha256sum sequential':>28} |"
    )
    print(f"|{'-' * 46}|{'-' * 7}|{'-' * 9}|{'-' * 8}|{'-' * 14}|{'-' * 23}|{'-' * 30}|")
    for name, workers, seconds, rate, per_cpu in rows:
        print(
            f"| {name:44} | {workers:5d} | {seconds:7.2f} | {rate:6.3f} | {per_cpu:12.3f} | "
            f"{per_cpu / ref_per_cpu:20.2f}x | {rate / seq_rate:27.2f}x |"
        )
    print(
        "\n'GB per CPU-s' is bytes hashed per second of CPU time (user+system, all threads/children): the "
        "per-core rate, robust to other load on the machine. 'wall' ratios depend on that load."
    )
    print("\nAll tools agreed on every digest.")
    by_name = {r[0]: r for r in rows}
    one = by_name["roost hash_files, 1 thread, 4 MiB reads"]
    every = by_name[f"roost hash_files, {cores} threads, 4 MiB reads"]
    many = by_name[f"sha256sum x{cores} (xargs -P{cores})"]
    how = f"{total / 1e9:.2f} GB, {'cold' if cold else 'page-cached'}"
    return [
        Row(f"hashing rate per CPU-second, 1 thread ({how})", "GB/s", one[4], ref_per_cpu, "sha256sum",
            "at least sha256sum's", judged(one[4] >= ref_per_cpu)),
        Row(f"hashing, {cores} threads, wall ({how})", "GB/s", every[3], many[3], f"sha256sum x{cores}"),
    ]


def part2(workdir: Path, replica_gb: float, shards: int, repeats: int) -> list[Row]:
    src = workdir / "replica-src"
    local = workdir / "replica-local"
    mirrors = workdir / "replica-mirrors"
    for d in (src, local, mirrors):
        shutil.rmtree(d, ignore_errors=True)
    src.mkdir(parents=True)
    total = int(replica_gb * 1e9)
    base = total // shards
    for i in range(shards):
        size = base + (total - base * shards if i == shards - 1 else 0) + i * 4096  # distinct sizes
        with open(src / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as f:
            f.truncate(size)
    for name, text in [
        ("config.json", '{"architectures": ["Qwen3_5MoeForConditionalGeneration"]}\n'),
        ("tokenizer.json", '{"version": "1.0"}\n'),
        ("generation_config.json", "{}\n"),
        ("model.safetensors.index.json", '{"weight_map": {}}\n'),
    ]:
        (src / name).write_text(text)
    used_kb = int(subprocess.run(["du", "-sk", str(src)], capture_output=True, text=True).stdout.split()[0])
    apparent = sum(p.stat().st_size for p in src.iterdir())

    t0 = time.perf_counter()
    commit = publish_repo(src, mirrors, "bench/sparse-35b", lfs_store="hardlink")
    publish_s = time.perf_counter() - t0
    local.mkdir()
    for p in src.iterdir():  # the checkpoint is "already on disk": hard links, no copy
        os.link(p, local / p.name)

    spec = DownloadSpec(repo_id="bench/sparse-35b")
    with HubMirror(mirrors) as mirror:
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        cold = download_and_verify(spec, local, endpoint=mirror.endpoint)
        cold_s, cold_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        by_branch = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = download_and_verify(spec, local, endpoint=mirror.endpoint)
            by_branch.append(time.perf_counter() - t0)
            assert r.cached
        pinned = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = download_and_verify(spec.pinned(commit), local, endpoint="http://127.0.0.1:9")
            pinned.append(time.perf_counter() - t0)
            assert r.cached

    print(
        f"\n## Download stage on a 35B-sized sparse replica: {shards} shards, {apparent / 1e9:.1f} GB apparent, "
        f"{used_kb / 1e6:.3f} GB on disk\n"
    )
    print(f"| {'run':64} | {'seconds':>9} | {'target':>7} |")
    print(f"|{'-' * 66}|{'-' * 11}|{'-' * 9}|")
    print(f"| {'publish to the local mirror (hashes every shard)':64} | {publish_s:9.2f} | {'':>7} |")
    cold_label = (
        f"cold: hash every file in place ({cold.hashed_bytes / cold_s / 1e9:.2f} GB/s, "
        f"{cold.hashed_bytes / max(cold_cpu, 1e-9) / 1e9:.2f} GB per CPU-s)"
    )
    print(f"| {cold_label:64} | {cold_s:9.2f} | {'':>7} |")
    print(
        f"| {f'warm, by branch (1 refs call), median of {repeats}':64} | {statistics.median(by_branch):9.3f} | "
        f"{'< 1 s':>7} |"
    )
    print(
        f"| {f'warm, pinned commit (no network), median of {repeats}':64} | {statistics.median(pinned):9.4f} | "
        f"{'< 1 s':>7} |"
    )
    what = f"{shards} shards, {apparent / 1e9:.1f} GB"
    branch_s, pinned_s = statistics.median(by_branch), statistics.median(pinned)
    return [
        Row(f"download stage, warm by branch ({what})", "s", branch_s, target="< 1 s", verdict=judged(branch_s < 1)),
        Row(f"download stage, warm by pinned commit ({what})", "s", pinned_s, target="< 1 s",
            verdict=judged(pinned_s < 1)),
    ]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=3.0, help="total size of the random shards (part 1)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument(
        "--cold", action="store_true", help="evict the shards from the page cache before each run"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--replica-gb", type=float, default=70.3, help="apparent size of the sparse replica (part 2)"
    )
    ap.add_argument("--replica-shards", type=int, default=14)
    ap.add_argument("--skip-replica", action="store_true")
    ap.add_argument(
        "--workdir", type=Path, default=None, help="keep files here (default: a temp dir, removed)"
    )
    add_json_argument(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if shutil.which("sha256sum") is None:
        print("sha256sum not found", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="roost-bench-hash-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        rows = part1(workdir, args.gb, args.shards, args.cold, args.repeats)
        if not args.skip_replica:
            rows += part2(workdir, args.replica_gb, args.replica_shards, max(3, args.repeats))
        write_rows(args.json_out, "bench_hashing", rows)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
