"""``bash scripts/bench`` (``benchmarks/run_all.py``): every benchmark of ``benchmarks/`` is in it, each one's
arguments in both modes are ones its script accepts, bad arguments are one line and exit 2, and the page it
writes keeps what it should. The benchmarks themselves run in ``test_bench_quick.py`` (slow)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
DOC = REPO / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def run_all() -> Iterator[ModuleType]:
    """``benchmarks/run_all.py`` as a module (it imports ``_table`` from its directory)."""
    import importlib

    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("run_all")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_every_benchmark_script_is_run_and_documented(run_all: Any) -> None:
    scripts = sorted(p.stem for p in BENCHMARKS.glob("bench_*.py"))
    assert sorted(b.name for b in run_all.BENCHMARKS) == scripts
    page = DOC.read_text()
    missing = [name for name in scripts if f"\n### {name}.py\n" not in page]
    assert missing == []
    for b in run_all.BENCHMARKS:  # a benchmark left out of quick mode says why
        assert (b.quick is None) == bool(b.why_not_quick), b.name


def test_each_benchmark_accepts_its_arguments_in_both_modes(run_all: Any) -> None:
    """Each script's own parser (``parser()``) takes the runner's arguments for it, full and quick, with
    ``--json`` (and ``--vllm-url`` for those that measure a vLLM): the full mode's wiring, which only the
    full run (a quiet machine, by hand) executes, is checked here. One process imports every script."""
    cases = []
    for b in run_all.BENCHMARKS:
        modes = [(False, None), (True, None)] + ([(True, "http://127.0.0.1:9")] if b.vllm else [])
        for quick, url in modes:
            if quick and b.quick is None:
                continue
            cases.append((b.name, [*b.argv(quick, url), "--json", "/tmp/rows.json"]))
    code = textwrap.dedent(f"""
        import importlib, sys
        sys.path.insert(0, {str(BENCHMARKS)!r})
        for name, argv in {cases!r}:
            args = importlib.import_module(name).parser().parse_args(argv)
            assert str(args.json_out) == "/tmp/rows.json", (name, args)
            if "--vllm-url" in argv:
                assert args.vllm_url == "http://127.0.0.1:9", (name, args)
        print("parsed", len({cases!r}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"parsed {len(cases)}" in r.stdout


@pytest.mark.parametrize("argv", [["--bogus"], ["--only", "nope"], ["--vllm-url", "http://127.0.0.1:9"],
                                  ["--quick", "--only"]])
def test_unusable_arguments_are_one_line_and_exit_2(argv: list[str]) -> None:
    r = subprocess.run(["bash", str(REPO / "scripts" / "bench"), *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("bench: "), r.stderr


def test_list_names_each_benchmark_and_what_quick_mode_leaves_out() -> None:
    r = subprocess.run(["bash", str(REPO / "scripts" / "bench"), "--list", "--quick"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(list(BENCHMARKS.glob("bench_*.py")))
    assert "bench_audit: python benchmarks/bench_audit.py --repeat 1" in lines
    assert any(line.startswith("bench_team_load: left out of quick mode (") for line in lines)


def _outcome(run_all: Any, name: str, rows: list[Any], *, broken: str = "", mode: str = "full") -> Any:
    return run_all.Outcome(run_all.BY_NAME[name], mode, seconds=3.0, rows=rows, broken=broken, load=0.5)


def test_the_page_gets_the_table_and_keeps_what_was_not_run(run_all: Any, tmp_path: Path) -> None:
    from _table import Row

    info = {"date": "2030-01-02", "commit": "abc1234", "cpus": 2}
    head, _, tail = run_all._region(DOC.read_text(), DOC)  # the docs' page, its table not measured yet
    template = f"{head}{run_all.BEGIN}\nNot measured yet.\n{run_all.END}{tail}"
    audit = Row("full audit, CPU median", "s", 0.071, 0.122, "code before issue 11", "ratio <= 0.67", "met",
                "0.044 s where it took 0.075 s")
    page = run_all.render(template, DOC, [
        _outcome(run_all, "bench_audit", [audit]),
        _outcome(run_all, "bench_hashing", [Row("hashing | rate", "GB/s", 1.41, 0.345, "sha256sum",
                                                "at least sha256sum's", "missed")]),
        _outcome(run_all, "bench_gateway", [], broken="exit 1: Traceback ... KeyError: 'x'"),
    ], False, info)
    assert page.startswith(head + run_all.BEGIN) and page.endswith(run_all.END + tail)  # the prose around it kept
    assert "Not measured yet." not in page
    assert ("| [audit](#bench_auditpy) | full audit, CPU median | 0.0710 s | 0.122 s (code before issue 11) | 0.582 | "
            "ratio <= 0.67 | met: 0.044 s where it took 0.075 s |") in page
    assert "| [hashing](#bench_hashingpy) | hashing \\| rate | 1.41 GB/s | 0.345 GB/s (sha256sum) | 4.09 |" in page
    assert "| **missed** |" in page
    assert "| [gateway](#bench_gatewaypy) | the run broke: exit 1: Traceback ... KeyError: 'x' |" in page
    assert "Measured in full mode, 2030-01-02, commit abc1234, 2 CPUs, load average 0.5 at the start: audit, " \
           "hashing, gateway. None in quick mode. Not measured: preflight," in page
    assert "**Broke**: gateway." in page

    # a later quick run of one benchmark replaces its rows only, and says it was quick
    later = run_all.render(page, tmp_path / "page.md", [
        _outcome(run_all, "bench_hashing", [Row("hashing rate", "GB/s", 1.2, 0.3, "sha256sum", "x", "met")],
                 mode="quick"),
        run_all.Outcome(run_all.BY_NAME["bench_team_load"], "left out"),
    ], True, {**info, "date": "2030-01-03"})
    assert "| [audit](#bench_auditpy) | full audit, CPU median | 0.0710 s |" in later
    assert "hashing \\| rate" not in later
    assert "| [hashing](#bench_hashingpy) | hashing rate | 1.20 GB/s | 0.300 GB/s (sha256sum) | 4.00 | x | " \
           "not judged (quick run) |" in later
    assert "full mode, 2030-01-02, commit abc1234, 2 CPUs, load average 0.5 at the start: audit, gateway" in later
    assert "quick mode (small workloads, targets not judged), 2030-01-03, commit abc1234, 2 CPUs, load average 0.5 " \
           "at the start: hashing" in later
    # the table's rows in the benchmarks' order, whichever run wrote them
    order = [later.index(f"(#{name}py)") for name in ("bench_audit", "bench_hashing", "bench_gateway")]
    assert order == sorted(order)


def test_a_page_without_the_markers_is_refused(run_all: Any, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="markers"):
        run_all.render("# Benchmarks\n\nno table here\n", tmp_path / "p.md", [], False, {})


def test_a_row_is_checked_and_written_whole(tmp_path: Path, run_all: Any) -> None:
    from _table import Row, read_rows, write_rows

    with pytest.raises(ValueError, match="verdict"):
        Row("x", "s", 1.0, verdict="passed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nan"):
        Row("x", "s", float("nan"))
    with pytest.raises(ValueError, match="without figures"):
        write_rows(tmp_path / "rows.json", "bench_x", [])
    write_rows(tmp_path / "rows.json", "bench_x", [Row("x", "ms", 2.0, 4.0, "y")])
    assert read_rows(tmp_path / "rows.json") == ("bench_x", [Row("x", "ms", 2.0, 4.0, "y", ratio=0.5)])
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"]
