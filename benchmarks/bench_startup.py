"""Command-line start-up (issue 38): how long each ``roost`` command takes from exec to exit, against an
interpreter that does nothing.

Rows (each the median and best of ``--runs`` fresh processes, the commands interleaved round by round after
one warm-up round; wall time and the child's CPU time, user + system):
- ``python -c pass``:            the floor, the interpreter alone (with this venv's site-packages)
- ``import roost.cli``:          the command line's module (every command listed, none imported)
- ``roost --help``:              the top-level help
- ``roost download --help``:     one command's help
- ``roost audit DEMO``:          the audit of the embedded demo model (``roost.demo.model``, generated once
                                 in a scratch directory), read on disk
- ``roost plan DEMO --profile local``: the plan of the same checkpoint as the demo profile lands it
- ``roost gateway usage``:       the usage report on an empty scratch SQLite database

Each command runs as the console script does (``from roost.cli import main; main()``) and must exit 0.
Every row is set beside ``python -c pass``: the ratio and the difference (what roost adds).
Targets (issue 38): ``roost --help`` under 0.25 s and ``roost audit`` of the demo model under 0.3 s, judged on
the lower of the wall and CPU medians (on a shared machine CPU time is the fairer one).
``--baseline-commit SHA`` also times the ``roost`` package of that commit (``git archive``, nothing
checked out) in the same rounds: the before/after table below.

Measured on the 2-core VM of issue 38, shared (load average 4.2: other test sessions running a vLLM), 21
runs, ``--baseline-commit b7bb758`` (the code before the change) in the same rounds; medians in seconds,
wall / CPU:

    command                            before (b7bb758)    after            after / before (CPU)
    python -c pass                     0.014 / 0.012       0.014 / 0.012
    import roost.cli                   0.570 / 0.547       0.078 / 0.069    0.13
    roost --help                       0.743 / 0.704       0.277 / 0.231    0.33   (target 0.25: met)
    roost download --help              0.740 / 0.694       0.459 / 0.387    0.56
    roost audit DEMO                   0.733 / 0.662       0.268 / 0.229    0.35   (target 0.3: met)
    roost plan DEMO --profile local    0.692 / 0.650       0.383 / 0.353    0.54
    roost gateway usage (empty DB)     1.240 / 1.073       0.850 / 0.728    0.68

On the same machine quiet (load average 1.0, before any change): ``roost --help`` 0.53 s wall, ``roost audit``
0.49 s, ``import roost.cli`` 0.39 s; after, at load 1-3: ``roost --help`` 0.20 s, ``roost audit`` 0.22 s,
``roost plan`` 0.31 s. What is left of ``roost gateway usage``: ``roost.gateway.db`` imports
``roost.store.atomic`` at module level, which runs the ``roost.store`` package (pyarrow, numpy, the run
records): about half its start.

Usage: python benchmarks/bench_startup.py [--runs 15] [--baseline-commit SHA] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _git import archived_tree
from _table import Row, add_json_argument, judged, write_rows

REPO = Path(__file__).resolve().parents[1]
HELP_TARGET_S = 0.25
AUDIT_TARGET_S = 0.3

# What the console script `roost` runs, with the tree whose roost package is timed first on the path.
_ROOST = "import sys; sys.path.insert(0, {tree!r}); sys.argv[0] = 'roost'; from roost.cli import main; main()"
_IMPORT = "import sys; sys.path.insert(0, {tree!r}); import roost.cli"


@dataclass
class Timed:
    """One command's runs."""

    name: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def run(self, env: dict[str, str]) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(self.argv, capture_output=True, env=env, check=False, timeout=120)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            tail = r.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"{self.name}: exit {r.returncode}: {tail[0]}")
        self.wall.append(wall)
        self.cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    @property
    def judged_s(self) -> float:
        return min(self.median, self.cpu_median)


def commands(tree: Path, demo: Path, db: Path) -> list[Timed]:
    """The command lines timed, for the roost package under ``tree``."""
    roost = [sys.executable, "-c", _ROOST.format(tree=str(tree))]
    return [
        Timed("import roost.cli", [sys.executable, "-c", _IMPORT.format(tree=str(tree))]),
        Timed("roost --help", [*roost, "--help"]),
        Timed("roost download --help", [*roost, "download", "--help"]),
        Timed("roost audit DEMO", [*roost, "audit", str(demo)]),
        Timed("roost plan DEMO --profile local", [*roost, "plan", str(demo), "--profile", "local"]),
        Timed("roost gateway usage (empty DB)", [*roost, "gateway", "usage", "--db", f"sqlite:///{db}"]),
    ]




def demo_model(into: Path) -> Path:
    """The embedded demo's tiny checkpoint, generated as ``roost run`` does (in a child: this process
    stays free of numpy and tokenizers)."""
    code = "import sys; from pathlib import Path; from roost.demo.model import generate_tiny_model; " \
           "generate_tiny_model(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(into)], check=True, timeout=600)
    return into


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per command (default 15)")
    ap.add_argument("--baseline-commit", metavar="SHA", help="also time the roost package of this commit")
    add_json_argument(ap)
    return ap


def _line(name: str, t: Timed, floor: Timed, before: Timed | None) -> str:
    text = (f"{name:<34} {t.median:>8.3f} {min(t.wall):>7.3f} {t.cpu_median:>8.3f} {t.median / floor.median:>7.1f}x "
            f"{t.median - floor.median:>+8.3f}")
    if before is not None:
        text += f" {before.median:>9.3f} {before.cpu_median:>9.3f}"
    return text


def report(floor: Timed, now: list[Timed], before: list[Timed] | None) -> list[Row]:
    """Print the table and return the rows."""
    head = f"{'command':<34} {'wall med':>8} {'best':>7} {'cpu med':>8} {'vs pass':>8} {'+ pass s':>8}"
    print("\n" + head + (f" {'before med':>9} {'before cpu':>9}" if before else ""))
    print(_line("python -c pass", floor, floor, None))
    targets = {"roost --help": HELP_TARGET_S, "roost audit DEMO": AUDIT_TARGET_S}
    rows = []
    for i, t in enumerate(now):
        old = before[i] if before else None
        print(_line(t.name, t, floor, old))
        target = targets.get(t.name)
        detail = f"{t.median - floor.median:+.3f} s over python -c pass; best {min(t.wall):.3f} s, CPU median " \
                 f"{t.cpu_median:.3f} s" + (f"; before: {old.median:.3f} s" if old else "")
        rows.append(Row(f"{t.name} start-up, wall median", "s", t.median, floor.median, "python -c pass",
                        f"< {target} s (lower of wall and CPU medians)" if target else "",
                        judged(t.judged_s < target) if target else "not judged", detail))
    for t in now:
        if t.name in targets:
            verdict = "meets" if t.judged_s < targets[t.name] else "misses"
            print(f"{t.name}: {t.judged_s:.3f} s {verdict} the {targets[t.name]} s target")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.runs < 1:
        print("bench_startup: --runs must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="roost-bench-startup-") as tmp:
        scratch = Path(tmp)
        demo = demo_model(scratch / "demo")
        env = dict(os.environ, ROOST_HOME=str(scratch / "home"), HF_HUB_OFFLINE="1")
        env.pop("ROOST_GATEWAY_DB", None)
        floor = Timed("python -c pass", [sys.executable, "-c", "pass"])
        now = commands(REPO, demo, scratch / "usage.db")
        before = (commands(archived_tree(args.baseline_commit, scratch / "baseline"), demo, scratch / "usage-before.db")
                  if args.baseline_commit else None)
        every = [floor, *now, *(before or [])]
        print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; {args.runs} runs per command")
        for t in every:  # warm-up: byte-code compiled, page cache filled, the scratch databases created
            t.run(env)
            t.wall.clear()
            t.cpu.clear()
        for _ in range(args.runs):
            for t in every:
                t.run(env)
        rows = report(floor, now, before)
        write_rows(args.json_out, "bench_startup", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
