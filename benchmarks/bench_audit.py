"""Audit time on a 35B-A3B-shaped replica (31,666 tensors in 14 shards) vs reading the same headers.

Rows (each the median and best of ``--repeat`` runs, in one process, interleaved). Wall time and
CPU time (``time.process_time``) are both reported: on a shared machine the CPU column is the one that
compares methods fairly; the target is judged on the median of whichever is lower.
- plain json:        open + 8-byte length + json.loads per shard (the floor: no validation at all)
- roost headers:     roost.checkpoint.safetensors_header.read_header per shard (validation included)
- roost checkpoint:  roost.checkpoint.model.read_checkpoint (config + index + headers + classification)
- roost audit:       roost.plan.report.audit_for_host (the above + the checks + vLLM args + host fit),
                     what ``roost audit`` and the audit task run
- safe_open keys:    safetensors.safe_open(...).keys() per shard
- safe_open meta:    safe_open + get_slice(k).get_dtype()/get_shape() per tensor (the same facts the audit reads)

The ratio columns put each row against ``safe_open keys`` (wall and CPU) and against ``roost headers``
(CPU), side by side. Target (issue 11): the full audit under 0.05 s, on the machine where the audit
before issue 11 took 0.075 s (0.030 s of it reading the headers): two thirds of that time. On another
machine (this 2-core one runs that code at 0.13-0.17 s) pass ``--baseline DIR``, a checkout of that
code (``git worktree add /tmp/before bb85beb``): both audits are then timed in fresh processes,
alternating, and the target is judged as the ratio of their CPU medians (at most 0.05 / 0.075).
``--baseline-commit bb85beb`` does the same from this repository's history (``git archive``, nothing
checked out): what ``bash scripts/bench`` runs. Every method must count the same tensors, or the run fails.

Usage: python benchmarks/bench_audit.py [--dir DIR] [--repeat 7] [--baseline DIR | --baseline-commit SHA]
    [--json OUT]
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test-only replicas: support.replicas

from _git import archived_tree
from _table import Row, add_json_argument, judged, write_rows
from safetensors import safe_open
from support.replicas import ornith_35b_a3b, write_replica

from roost.checkpoint.model import read_checkpoint
from roost.checkpoint.safetensors_header import read_header
from roost.hosts import SPARK
from roost.plan.report import audit_for_host

TARGET_S = 0.05  # the full audit; the code before issue 11 took 0.075 s on the machine this was set on
BEFORE_S = 0.075

# Times one tree's full audit in a fresh process: CPU seconds of each run after three warm-ups, as JSON.
# The tree before issue 11 named it roost.checkpoint.audit.audit_checkpoint.
_TIMER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from roost.hosts import SPARK
try:
    from roost.plan.report import audit_for_host as audit
except ImportError:
    from roost.checkpoint.audit import audit_checkpoint as audit
d, n = Path(sys.argv[2]), int(sys.argv[3])
for _ in range(3):
    audit(d, SPARK)
out = []
for _ in range(n):
    t0 = time.process_time()
    audit(d, SPARK)
    out.append(time.process_time() - t0)
print(json.dumps(out))
"""


def _timed_tree(tree: Path, d: Path, n: int) -> list[float]:
    r = subprocess.run([sys.executable, "-c", _TIMER, str(tree), str(d), str(n)],
                       capture_output=True, text=True, check=True, timeout=600)
    return list(json.loads(r.stdout.strip().splitlines()[-1]))


def against_baseline(baseline: Path, d: Path, repeat: int) -> Row:
    """This tree's audit and the baseline tree's, alternating in fresh processes, side by side."""
    here = Path(__file__).resolve().parents[1]
    times: dict[str, list[float]] = {"baseline": [], "this tree": []}
    for _ in range(3):
        times["baseline"] += _timed_tree(baseline, d, repeat)
        times["this tree"] += _timed_tree(here, d, repeat)
    base, now = statistics.median(times["baseline"]), statistics.median(times["this tree"])
    print(f"\n{'full audit, CPU s':<20} {'median':>8} {'best':>8}")
    for name, ts in times.items():
        print(f"{name:<20} {statistics.median(ts):>8.3f} {min(ts):>8.3f}")
    ratio, want = now / base, TARGET_S / BEFORE_S
    verdict = "meets" if ratio <= want else "misses"
    print(f"ratio {ratio:.2f} (best {min(times['this tree']) / min(times['baseline']):.2f}) {verdict} the target "
          f"{want:.2f}: {BEFORE_S * ratio:.3f} s on the machine where the baseline took {BEFORE_S} s")
    return Row("full audit, CPU median, against the code before issue 11 run alongside", "s", now, base,
               "code before issue 11", f"ratio <= {want:.2f} (0.05 s where that code took 0.075 s)",
               judged(ratio <= want), f"{BEFORE_S * ratio:.3f} s where it took {BEFORE_S} s")




def _shards(d: Path) -> list[Path]:
    return sorted(d.glob("*.safetensors"))


def plain_json(d: Path) -> int:
    n = 0
    for f in _shards(d):
        with open(f, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            n += len(json.loads(fh.read(size))) - 1
    return n


def roost_headers(d: Path) -> int:
    return sum(len(read_header(f).tensors) for f in _shards(d))


def roost_checkpoint(d: Path) -> int:
    return read_checkpoint(d).tensors.count


def roost_audit(d: Path) -> int:
    return audit_for_host(d, SPARK).tensor_count


def safe_open_keys(d: Path) -> int:
    n = 0
    for f in _shards(d):
        with safe_open(str(f), framework="np") as sf:
            n += len(list(sf.keys()))
    return n


def safe_open_meta(d: Path) -> int:
    n = 0
    for f in _shards(d):
        with safe_open(str(f), framework="np") as sf:
            for k in sf.keys():  # noqa: SIM118 - safe_open handles are not mappings
                s = sf.get_slice(k)
                s.get_dtype()
                s.get_shape()
                n += 1
    return n


ROWS: list[tuple[str, Callable[[Path], int]]] = [
    ("plain json (no validation)", plain_json),
    ("roost headers (validated)", roost_headers),
    ("roost checkpoint (read+classify)", roost_checkpoint),
    ("roost audit (full)", roost_audit),
    ("safe_open keys", safe_open_keys),
    ("safe_open keys+dtype+shape", safe_open_meta),
]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, help="An existing replica directory (default: build one in a temp dir).")
    ap.add_argument("--repeat", type=int, default=7)
    base = ap.add_mutually_exclusive_group()
    base.add_argument("--baseline", type=Path, help="A checkout of the code the target was set against.")
    base.add_argument("--baseline-commit", metavar="SHA",
                      help="The same, from this repository's history (e.g. bb85beb, the code before issue 11).")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="roost-bench-audit-") as tmp:
        d = args.dir or write_replica(ornith_35b_a3b(), Path(tmp) / "ornith-35b")
        shards = _shards(d)
        print(f"replica: {d} ({len(shards)} shards, {sum(f.stat().st_size for f in shards) / 1e9:.1f} GB apparent)")
        print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
        wall: dict[str, list[float]] = {name: [] for name, _ in ROWS}
        cpu: dict[str, list[float]] = {name: [] for name, _ in ROWS}
        counts: dict[str, int] = {}
        for name, fn in ROWS:  # warm the page cache and imports
            counts[name] = fn(d)
        if len(set(counts.values())) != 1:
            raise SystemExit(f"the methods disagree on the tensor count: {counts}")
        for _ in range(args.repeat):
            for name, fn in ROWS:
                c0, t0 = time.process_time(), time.perf_counter()
                fn(d)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        ref_w = statistics.median(wall["safe_open keys"])
        ref_c = statistics.median(cpu["safe_open keys"])
        hdr_c = statistics.median(cpu["roost headers (validated)"])
        print()
        print(f"{'method':<34} {'tensors':>8} {'wall med s':>10} {'wall best':>9} {'cpu med s':>9} {'cpu best':>8} "
              f"{'wall vs safe_open':>17} {'cpu vs safe_open':>16} {'cpu vs headers':>14}")
        for name, _ in ROWS:
            mw, mc = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"{name:<34} {counts[name]:>8,} {mw:>10.3f} {min(wall[name]):>9.3f} {mc:>9.3f} {min(cpu[name]):>8.3f} "
                  f"{mw / ref_w:>16.2f}x {mc / ref_c:>15.2f}x {mc / hdr_c:>13.2f}x")
        audit_med = min(statistics.median(wall["roost audit (full)"]), statistics.median(cpu["roost audit (full)"]))
        verdict = "meets" if audit_med < TARGET_S else "misses"
        print(f"\nroost audit median {audit_med:.3f} s {verdict} the {TARGET_S} s target on this machine "
              "(set where the audit before issue 11 took 0.075 s)")
        n = counts["roost audit (full)"]
        rows = [
            Row(f"validated header read, {len(shards)} shards, {n:,} tensors, CPU median", "s", hdr_c, ref_c,
                "safetensors safe_open keys"),
            # the 0.05 s target was set on another machine: judged against the code before it (--baseline)
            Row(f"full audit, {len(shards)} shards, {n:,} tensors, CPU median", "s",
                statistics.median(cpu["roost audit (full)"]), statistics.median(cpu["safe_open keys+dtype+shape"]),
                "safe_open keys+dtype+shape"),
        ]
        baseline = args.baseline or (archived_tree(args.baseline_commit, Path(tmp) / "baseline")
                                     if args.baseline_commit else None)
        if baseline:
            rows.append(against_baseline(baseline, d, args.repeat))
        write_rows(args.json_out, "bench_audit", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
