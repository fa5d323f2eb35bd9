"""roost's benchmark against ``vllm bench serve`` on a real vLLM CPU server (target: within 5%).

Generates the demo checkpoint, serves it with vLLM CPU (roost's process backend), then runs both
tools side by side on the same workload, rounds interleaved ABBA (``tests/support/agreement.py``
says how and why), and prints median TTFT, TPOT and output throughput of each tool with their
pooled and paired ratios, plus each client's CPU time per streamed token. Each ``--users`` level
is one table. The target: every paired ratio within 5% of 1. Pairs in which the server coalesced
tokens (a loaded machine) are set aside; if most pairs were, the level is reported as not judged.

    .venv/bin/python benchmarks/bench_vs_vllm.py [--users 1,8] [--pairs 10] [--output 64] [--free]
        [--vllm-url URL [--vllm-model NAME]] [--json OUT]

By default both clients run on the CPUs vLLM's worker is not bound to, at nice -10 with the server
(``quiet_clients``), as the agreement test does; ``--free`` leaves the scheduler to it. ``--vllm-url``
measures a vLLM already serving the demo model there (its key in ``VLLM_API_KEY``) instead of starting
one: what ``bash scripts/bench --quick`` does in CI with the test session's server. Both tools must
count every request's ``--output`` tokens (``ignore_eos``), or the run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402
from support.agreement import Agreement, Round, Workload, quiet_clients, side_by_side  # noqa: E402
from support.reference import VllmBenchServe  # noqa: E402

from roost.demo.model import generate_tiny_model  # noqa: E402
from roost.net import free_port  # noqa: E402
from roost.serve.base import ServeSpec  # noqa: E402
from roost.serve.health import wait_until_ready  # noqa: E402
from roost.serve.process import start_process_server  # noqa: E402

TARGET = 0.05
FIGURES = {"ttft": ("median TTFT", "ms", 1e3), "tpot": ("median TPOT", "ms", 1e3),
           "throughput": ("output throughput", "tok/s", 1.0)}


def _progress(users: int) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        print(f"  {users} users: round {done}/{total}", file=sys.stderr)

    return report


def check_counts(rounds: list[tuple[Round, Round]], output: int) -> None:
    """Both tools counted every request's output tokens as asked (``ignore_eos``): else one of them is wrong."""
    for pair in rounds:
        for r in pair:
            if any(n != output for n in r.output_lens) or not r.output_lens:
                raise SystemExit(f"{r.tool} counted {sorted(set(r.output_lens))} output tokens per request, "
                                 f"{output} asked")


def rows_of(agreement: Agreement, users: int) -> list[Row]:
    why = agreement.degenerate()
    out = []
    for r in agreement.rows:
        name, unit, scale = FIGURES[r.key]
        ok = abs(r.paired_ratio - 1) < TARGET
        out.append(Row(f"{name}, {users} user{'s' if users > 1 else ''} (paired ratio of {agreement.pairs} pairs)",
                       unit, r.roost * scale, r.vllm * scale, "vllm bench serve", f"within {100 * TARGET:.0f}%",
                       "not judged" if why else judged(ok), why, ratio=r.paired_ratio))
    out.append(Row(f"client CPU per streamed token, {users} user{'s' if users > 1 else ''}", "µs",
                   agreement.roost_cpu_us_per_token, agreement.vllm_cpu_us_per_token or None, "vllm bench serve"))
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", default="1,8", help="concurrent requests per round, comma-separated levels")
    ap.add_argument("--pairs", type=int, default=10, help="pairs of rounds per level (even: ABBA)")
    ap.add_argument("--output", type=int, default=64, help="output tokens per request")
    ap.add_argument("--input", type=int, default=128, help="vllm bench serve's --random-input-len")
    ap.add_argument("--free", action="store_true",
                    help="leave the clients unpinned and unprioritized (by default: support.agreement.quiet_clients)")
    ap.add_argument("--vllm-url", help="a vLLM serving the demo model (key: VLLM_API_KEY) instead of starting one")
    ap.add_argument("--vllm-model", default="tiny", help="its served model name (with --vllm-url)")
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-vs-vllm-"))
    # the demo model; with --vllm-url only its tokenizer is used (vllm bench serve draws its prompts with it)
    model = generate_tiny_model(work / "tiny", seed=0)
    server = None
    if args.vllm_url:
        key, url, served = os.environ.get("VLLM_API_KEY") or None, args.vllm_url.rstrip("/"), args.vllm_model
        print(f"measuring the vLLM at {url}", file=sys.stderr)
    else:
        key, served = "bench-" + os.urandom(6).hex(), "tiny"
        spec = ServeSpec(model_dir=model, served_model_name=served, port=free_port(),
                         vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048"], log_path=work / "vllm.log")
        print(f"serving the demo model with vLLM CPU (log: {spec.log_path}) ...", file=sys.stderr)
        server = start_process_server(spec, api_key=key, host_name="bench")
        url = str(server.base_url)
    tables = []
    rows: list[Row] = []
    try:
        if server is not None:
            wait_until_ready(server, api_key=key, timeout_s=900)
        with VllmBenchServe(api_key=key, result_dir=work / "vllm-bench") as vb:
            for users in [int(x) for x in args.users.split(",")]:
                w = Workload(base_url=url, model=served, api_key=key,
                             tokenizer=model, input_len=args.input, output_len=args.output, users=users)
                with contextlib.ExitStack() as stack:
                    if not args.free:
                        pinned = stack.enter_context(quiet_clients(url, [0, vb.proc.pid]))
                        print(f"clients pinned to CPUs {sorted(pinned) if pinned else 'none'}", file=sys.stderr)
                    agreement, rounds = side_by_side(vb, w, pairs=args.pairs, on_round=_progress(users))
                check_counts(rounds, args.output)
                rows += rows_of(agreement, users)
                verdict = "met" if agreement.worst() < TARGET else "MISSED"
                if why := agreement.degenerate():
                    verdict = f"NOT JUDGED: {why}"
                tables.append(f"{agreement.table()}\nworst paired deviation {100 * agreement.worst():.1f}% "
                              f"(target {100 * TARGET:.0f}%: {verdict})")
                print(tables[-1] + "\n", file=sys.stderr)  # each level as soon as it is measured
    finally:
        if server is not None:
            server.stop()
    print()
    print("\n\n".join(tables))
    write_rows(args.json_out, "bench_vs_vllm", rows)


if __name__ == "__main__":
    main()
