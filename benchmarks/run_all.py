"""Run every benchmark of ``benchmarks/`` one after another and write their figures as one table.

    bash scripts/bench [--quick] [--only NAME,...] [--out FILE] [--vllm-url URL] [--logs DIR] [--list]

Each benchmark runs in its own process with its own arguments for the mode (:data:`BENCHMARKS`) and
``--json``: it writes its rows (``benchmarks/_table.py``), which become the table between the markers of
``docs/benchmarks.md`` (``--out``: another file, the page around the table copied from the docs), with the
machine line: CPUs, load, date, commit and mode of each run. Benchmarks left out (``--only``) keep their
rows from the page. The page is replaced whole (a reader never sees half of it).

- full mode (default): the benchmarks as their docs describe them, with their targets judged: minutes to
  an hour; run it on a quiet machine. Its table is the one the README and the docs show.
- ``--quick``: every benchmark on a small workload, to prove it still runs and is right: it fails on a
  broken benchmark (an exception, a digest that differs, two tools that disagree on a count), never on a
  slow machine: its figures are reported, its targets not judged. The two benchmarks that are a landing
  (minutes each) are left out of it. ``--vllm-url URL`` (key: ``VLLM_API_KEY``) has the benchmarks that
  measure a vLLM use that server instead of starting their own (CI: the test session's).

Exit codes: 0 every benchmark ran (whatever its verdicts), 1 a benchmark broke (its log's tail is
printed; the table says so), 2 unusable arguments (one line).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from _table import Row, number, read_rows, with_unit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DOC = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- bench:begin: written by `bash scripts/bench` (benchmarks/run_all.py); edit the benchmarks, not this table -->"
END = "<!-- bench:end -->"
RUNS = re.compile(r"^<!-- bench:runs (\{.*\}) -->$", re.M)
QUICK_TIMEOUT_S = 600.0
FULL_TIMEOUT_S = 4 * 3600.0


@dataclass(frozen=True)
class Bench:
    """A benchmark script and its arguments in each mode."""

    name: str
    """The script's stem, ``benchmarks/<name>.py``; its section of the docs is ``## <name>.py``."""
    full: tuple[str, ...]
    """Its arguments in full mode: the run the docs describe and judge."""
    quick: tuple[str, ...] | None
    """Its arguments in quick mode; None: left out of it (:attr:`why_not_quick`)."""
    why_not_quick: str = ""
    vllm: bool = False
    """Measures a vLLM: takes ``--vllm-url`` (quick mode, with the runner's ``--vllm-url``)."""

    @property
    def script(self) -> Path:
        return HERE / f"{self.name}.py"

    @property
    def short(self) -> str:
        return self.name.removeprefix("bench_")

    @property
    def anchor(self) -> str:
        """The id MkDocs gives the heading ``## <name>.py`` (its toc slug drops the dot)."""
        return f"{self.name}py"

    def argv(self, quick: bool, vllm_url: str | None) -> list[str]:
        args = list(self.quick if quick and self.quick is not None else self.full)
        if quick and self.vllm and vllm_url:
            args += ["--vllm-url", vllm_url]
        return args


BENCHMARKS: tuple[Bench, ...] = (
    Bench("bench_audit", ("--baseline-commit", "bb85beb"), ("--repeat", "1")),
    Bench("bench_preflight", (), ("--replica", "tiny", "--repeat", "1", "--skip-download", "--skip-olah")),
    Bench("bench_hashing", (), ("--gb", "0.05", "--shards", "2", "--repeats", "1", "--replica-gb", "0.2",
                                "--replica-shards", "2")),
    Bench("bench_download", (), ("--quick",)),
    # quick: the process backend only; a container beside the Docker tests' nothing-left-behind checks would
    # be theirs to find
    Bench("bench_health_detect", (), ("--trials", "2", "--polls", "0.1", "--no-docker")),
    # quick: the default 64 output tokens (with 16, every roost round on the test session's server came in one chunk)
    Bench("bench_vs_vllm", (), ("--users", "1", "--pairs", "2", "--free"), vllm=True),
    Bench("bench_client_overhead", (), ("--streams", "4", "--short", "4", "--long", "32", "--repeats", "1",
                                        "--rate", "100")),
    Bench("bench_eval_overhead", (), ("--questions", "20", "--short", "0", "--concurrency", "8")),
    Bench("bench_gateway", ("--vllm",), ("--quick", "--rounds", "1", "--litellm", "none")),
    Bench("bench_gateway_connections", (), ("--requests", "5", "--header-mib", "4")),
    Bench("bench_orchestration", ("--via-deployment",), None,
          "landings through Prefect, minutes each; the landing tests run the same flow"),
    Bench("bench_store_scale", (), ("--sizes", "100,1000", "--repeat", "1", "--no-catalog-max", "100")),
    Bench("bench_team_load", (), None,
          "landings through a worker on PostgreSQL, minutes each; the landing tests run the same flow"),
    Bench("bench_startup", ("--baseline-commit", "b7bb758"), ("--runs", "3")),
)
BY_NAME = {b.name: b for b in BENCHMARKS}


# --- the command line ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints the usage too)
        print(f"bench: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="bash scripts/bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small workloads: proves every benchmark runs and is right; targets not judged")
    ap.add_argument("--only", metavar="NAME,...", help="these benchmarks (e.g. audit,bench_hashing); the others "
                    "keep their rows from the page")
    ap.add_argument("--out", type=Path, default=DOC, help=f"the page to write (default {DOC.relative_to(REPO)}; "
                    "a file that does not exist gets the docs' page around the table)")
    ap.add_argument("--vllm-url", metavar="URL", help="with --quick: the vLLM (serving the demo model as `tiny`; "
                    "key: VLLM_API_KEY) that benchmarks measuring a vLLM use instead of starting one")
    ap.add_argument("--logs", type=Path, help="keep each benchmark's output, rows and scratch files (tmp/) here "
                    "(default: a temp dir)")
    ap.add_argument("--list", action="store_true", help="print each benchmark's command in this mode and exit")
    return ap


def selected(only: str | None) -> list[Bench]:
    if not only:
        return list(BENCHMARKS)
    out = []
    for word in (w.strip() for w in only.split(",")):
        name = word.removesuffix(".py")
        name = name if name.startswith("bench_") else f"bench_{name}"
        if name not in BY_NAME:
            raise SystemExit(_usage(f"--only: no benchmark {word!r} (of: {', '.join(b.short for b in BENCHMARKS)})"))
        out.append(BY_NAME[name])
    return out


def _usage(message: str) -> int:
    print(f"bench: {message}", file=sys.stderr)
    return 2


# --- running ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    bench: Bench
    mode: str  # "full" | "quick" | "left out"
    seconds: float = 0.0
    rows: list[Row] | None = None
    broken: str = ""  # why, one line ("" when it ran)
    log: Path | None = None
    load: float = 0.0


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


class Progress:
    """One line per event when piped; on a terminal, a status line updated in place while a benchmark runs."""

    def __init__(self, total: int) -> None:
        self.total, self.tty = total, sys.stdout.isatty()

    def start(self, i: int, b: Bench, mode: str) -> None:
        if not self.tty:
            print(f"bench: [{i}/{self.total}] {b.name} ({mode}) ...", flush=True)

    def tick(self, i: int, b: Bench, mode: str, elapsed: float, log: Path) -> None:
        if self.tty:
            tail = ""
            with contextlib.suppress(OSError):
                tail = _last_line(log.read_text(errors="replace")[-2000:])
            width = max(20, os.get_terminal_size().columns - 1)
            line = f"[{i}/{self.total}] {b.name} ({mode}) {elapsed:4.0f} s  {tail}"
            print(f"\r{line[:width]:<{width}}", end="", flush=True)

    def done(self, i: int, o: Outcome) -> None:
        what = (f"broke after {o.seconds:.0f} s: {o.broken}" if o.broken else
                f"{o.seconds:.0f} s, {len(o.rows or [])} figures")
        prefix = "\r" if self.tty else ""
        width = os.get_terminal_size().columns - 1 if self.tty else 0
        print(f"{prefix}{f'bench: [{i}/{self.total}] {o.bench.name} ({o.mode}): {what}':<{width}}", flush=True)


def run_one(b: Bench, i: int, quick: bool, vllm_url: str | None, logs: Path, progress: Progress) -> Outcome:
    mode = "quick" if quick else "full"
    if quick and b.quick is None:
        return Outcome(b, "left out")
    log, out = logs / f"{b.name}.log", logs / f"{b.name}.json"
    out.unlink(missing_ok=True)
    scratch = logs / "tmp"  # what a benchmark leaves (work dirs it names in its output) stays with its log
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(scratch))
    if not (b.vllm and vllm_url):
        env.pop("VLLM_API_KEY", None)  # only a benchmark measuring the given server uses its key
    argv = [sys.executable, str(b.script), *b.argv(quick, vllm_url), "--json", str(out)]
    outcome = Outcome(b, mode, log=log, load=os.getloadavg()[0])
    progress.start(i, b, mode)
    t0 = time.monotonic()
    timeout = QUICK_TIMEOUT_S if quick else FULL_TIMEOUT_S
    with log.open("wb") as f:
        f.write(f"$ {' '.join(argv)}\n".encode())
        f.flush()
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env,
                                start_new_session=True)
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - t0
                    if elapsed > timeout:
                        _kill(proc)
                        rc = None
                        break
                    progress.tick(i, b, mode, elapsed, log)
        except BaseException:
            _kill(proc)
            raise
    outcome.seconds = time.monotonic() - t0
    text = log.read_text(errors="replace")
    if rc is None:
        outcome.broken = f"still running after {timeout:.0f} s (stopped)"
    elif rc != 0:
        outcome.broken = f"exit {rc}: {_last_line(text)}"
    else:
        try:
            name, rows = read_rows(out)
            outcome.rows = rows
            if name != b.name or not rows:
                outcome.broken = f"its --json file names {name!r} with {len(rows)} rows"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            outcome.broken = f"no rows in its --json file ({type(exc).__name__}: {exc})"
    progress.done(i, outcome)
    if outcome.broken:
        tail = "\n".join(text.splitlines()[-25:])
        print(f"--- {b.name}: the end of its output ({log}) ---\n{tail}\n---", flush=True)
    return outcome


def _kill(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


# --- the page -----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_lines(o: Outcome, quick: bool) -> list[str]:
    """The table rows of one benchmark's run."""
    b = o.bench
    first = f"[{b.short}](#{b.anchor})"
    if o.broken:
        return [f"| {first} | the run broke: {_cell(o.broken)} | — | — | — | — | **broken** |"]
    lines = []
    for r in o.rows or []:
        ref = "—" if r.reference is None else with_unit(r.reference, r.unit) + (
            f" ({r.reference_name})" if r.reference_name else "")
        ratio = "—" if r.ratio is None else number(r.ratio)
        if quick:
            verdict = "not judged (quick run)"
        else:
            verdict = {"met": "met", "missed": "**missed**", "not judged": "not judged"}[r.verdict]
        if r.detail:
            verdict += f": {r.detail}"
        lines.append(f"| {first} | {_cell(r.figure)} | {_cell(with_unit(r.roost, r.unit))} | {_cell(ref)} | {ratio} | "
                     f"{_cell(r.target or '—')} | {_cell(verdict)} |")
    return lines


def _region(page: str, where: Path) -> tuple[str, str, str]:
    """(before, the generated part, after) of a page; its markers must be there, once each."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise SystemExit(f"bench: {where} has not the table's markers once each ({BEGIN!r} ... {END!r})")
    head, rest = page.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    return head, body, tail


def kept_lines(body: str) -> dict[str, list[str]]:
    """The table rows of each benchmark in a page's generated part, by name."""
    out: dict[str, list[str]] = {}
    for line in body.splitlines():
        m = re.match(r"^\| \[[^\]]+\]\(#(\w+)py\) \|", line)
        if m and m.group(1) in BY_NAME:
            out.setdefault(m.group(1), []).append(line)
    return out


def kept_runs(body: str) -> dict[str, dict[str, Any]]:
    m = RUNS.search(body)
    if not m:
        return {}
    with contextlib.suppress(ValueError):
        runs = json.loads(m.group(1))
        if isinstance(runs, dict):
            return {k: v for k, v in runs.items() if k in BY_NAME and isinstance(v, dict)}
    return {}


def machine_line(runs: dict[str, dict[str, Any]]) -> str:
    """Who measured what: the runs grouped by mode, date, commit and CPUs, in the benchmarks' order."""
    groups: dict[tuple[str, str, str, int], list[str]] = {}
    loads: dict[tuple[str, str, str, int], list[float]] = {}
    broken = [BY_NAME[n].short for n in BY_NAME if runs.get(n, {}).get("status") == "broken"]
    for name in BY_NAME:
        r = runs.get(name)
        if r is None or r.get("mode") not in ("full", "quick"):
            continue
        key = (str(r["mode"]), str(r.get("date", "?")), str(r.get("commit", "?")), int(r.get("cpus", 0)))
        groups.setdefault(key, []).append(BY_NAME[name].short)
        loads.setdefault(key, []).append(float(r.get("load", 0.0)))
    parts = []
    for (mode, date, commit, cpus), names in groups.items():
        lo, hi = min(loads[(mode, date, commit, cpus)]), max(loads[(mode, date, commit, cpus)])
        load = f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"
        every = "every benchmark" if len(names) == len(BY_NAME) else ", ".join(names)
        how = "quick mode (small workloads, targets not judged)" if mode == "quick" else "full mode"
        parts.append(f"{how}, {date}, commit {commit}, {cpus} CPUs, load average {load} at the start: {every}")
    if not parts:
        return "Not measured yet: run `bash scripts/bench`."
    quick = any(r.get("mode") == "quick" for r in runs.values())
    missing = [BY_NAME[n].short for n in BY_NAME if n not in runs or runs[n].get("mode") not in ("full", "quick")]
    text = "Measured in " + "; ".join(parts) + "." + ("" if quick else " None in quick mode.")
    if missing:
        text += f" Not measured: {', '.join(missing)}."
    if broken:
        text += f" **Broke**: {', '.join(broken)}."
    return text


def commit() -> str:
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
        return r.stdout.strip() if r.returncode == 0 else ""

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    return sha + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def render(template: str, where: Path, outcomes: list[Outcome], quick: bool, run_info: dict[str, Any]) -> str:
    """The page: ``template`` with its generated part made from ``outcomes`` and the rows it kept."""
    head, body, tail = _region(template, where)
    lines, runs = kept_lines(body), kept_runs(body)
    for o in outcomes:
        if o.mode == "left out":
            continue  # its rows of an earlier run, if any, stay
        lines[o.bench.name] = table_lines(o, quick)
        runs[o.bench.name] = {**run_info, "mode": o.mode, "load": round(o.load, 2), "seconds": round(o.seconds, 1),
                              "status": "broken" if o.broken else "ok"}
    out = ["", "| benchmark | figure | roost | reference | ratio | target | verdict |",
           "|---|---|---|---:|---:|---|---|"]
    for b in BENCHMARKS:
        out += lines.get(b.name, [])
    out += ["", machine_line(runs), "", f"<!-- bench:runs {json.dumps(runs, sort_keys=True)} -->", ""]
    return head + BEGIN + "\n".join(out) + END + tail


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.vllm_url and not args.quick:
        return _usage("--vllm-url is for --quick: a full run measures a vLLM of its own")
    benches = selected(args.only)
    if args.list:
        for b in benches:
            if args.quick and b.quick is None:
                print(f"{b.name}: left out of quick mode ({b.why_not_quick})")
            else:
                print(f"{b.name}: python benchmarks/{b.name}.py {' '.join(b.argv(args.quick, args.vllm_url))}".rstrip())
        return 0
    out: Path = args.out.resolve()
    template_path = out if out.exists() else DOC
    template = template_path.read_text(encoding="utf-8")
    _region(template, template_path)  # before an hour of benchmarks: the page can take the table
    logs: Path = args.logs or Path(tempfile.mkdtemp(prefix="roost-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "full"
    run_info = {"date": f"{dt.datetime.now(dt.UTC):%Y-%m-%d}", "commit": commit(), "cpus": os.cpu_count() or 0}
    print(f"bench: {len(benches)} benchmarks, {mode} mode, {run_info['cpus']} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, commit {run_info['commit']}; logs in {logs}", flush=True)
    progress = Progress(len(benches))
    outcomes = []
    t0 = time.monotonic()
    for i, b in enumerate(benches, 1):
        o = run_one(b, i, args.quick, args.vllm_url, logs, progress)
        if o.mode == "left out":
            print(f"bench: [{i}/{len(benches)}] {b.name}: left out of quick mode ({b.why_not_quick})", flush=True)
        outcomes.append(o)
    write_atomically(out, render(template, template_path, outcomes, args.quick, run_info))
    broken = [o.bench.name for o in outcomes if o.broken]
    print(f"bench: {len(outcomes)} benchmarks in {time.monotonic() - t0:.0f} s"
          + "".join(f"; {o.bench.short} {o.seconds:.0f} s" for o in outcomes if o.mode != "left out"), flush=True)
    print(f"bench: wrote {out}" + (f"; broke: {', '.join(broken)}" if broken else ""), flush=True)
    return 1 if broken else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench: interrupted; the page is unchanged", file=sys.stderr)
        sys.exit(130)
