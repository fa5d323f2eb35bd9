"""Client overhead per question of an accuracy run: roost's runner against lm-evaluation-harness's
own API client, both asking the same GSM8K-format questions of the same scripted server.

The server is ``tests/support/eval_server.py``'s ScriptedServer (FAKE: instant answers, each the
right ``#### N`` for its question), run in this process; each client runs in its own subprocess
(imports excluded from the figures, everything from reading the dataset to the final scores
included), so its CPU is the client's alone:

- roost: ``run_eval`` on a generated GSM8K JSONL (``--questions``, default 2,000) at
  ``--concurrency`` in flight (default 64), no log;
- lm-eval: ``simple_evaluate`` with model ``local-chat-completions`` (``base_url`` the server's
  ``/v1/chat/completions``, ``num_concurrent`` the same), the installed ``gsm8k`` task YAML with its
  dataset pointed at the same JSONL (``dataset_path: json``, ``data_files``) and zero-shot, chat
  template applied, no sample log.

Figures per client: questions/s (questions over the run's wall time) and CPU per question
(``time.process_time()`` of the client process around the run, all its threads). Both runs must
score 100% (the server answers every question right), or the benchmark stops. The server is
GIL-bound on this process, so questions/s measures the pair; CPU per question is the client's
overhead. Each client runs a short (``--short``, 200) and a long (``--questions``) run; the
marginal figures, between the two, cancel the fixed costs of a run (lm-eval builds its task and
dataset, roost reads the dataset and lists the models), which the whole-run figures include::

    marginal CPU per question = (cpu(long) - cpu(short)) / (questions(long) - questions(short))

``--repeats`` runs the two clients interleaved, and the table shows the median. Usage::

    .venv/bin/python benchmarks/bench_eval_overhead.py [--questions 2000] [--short 200] [--concurrency 64]
        [--json OUT]

Target: roost's client CPU per question at most lm-eval's, judged on the whole run and the marginal figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402

MODEL = "scripted"
_QUESTION = re.compile(r"Ann has (\d+) apples and buys (\d+) more")


def write_dataset(path: Path, n: int) -> None:
    """``n`` GSM8K-format rows (``question``, ``answer`` ending in ``#### N``)."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            a, b = 3 + i % 97, 5 + i // 97
            f.write(json.dumps({
                "question": f"Question {i}: Ann has {a} apples and buys {b} more. How many apples does she have now?",
                "answer": f"She has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
            }) + "\n")


def script(body: dict[str, Any]) -> Any:
    """The server's instant, right answer to a question (FAKE: see tests/support/eval_server.py)."""
    from support.eval_server import Reply, question_of

    m = _QUESTION.search(question_of(body))
    if m is None:
        return Reply(content="I do not know.")
    a, b = int(m.group(1)), int(m.group(2))
    return Reply(content=f"Ann has {a} apples and buys {b} more: {a} + {b} = {a + b}.\n#### {a + b}",
                 completion_tokens=24)


# --- the clients (each in its own process) ----------------------------------------------------------

def run_roost(url: str, data: Path, concurrency: int) -> dict[str, Any]:
    from roost.eval.runner import EvalSettings, run_eval

    settings = EvalSettings.for_task("gsm8k", dataset=str(data), concurrency=concurrency, max_tokens=256)
    c0, t0 = time.process_time(), time.perf_counter()
    result = run_eval(url, MODEL, settings)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"n": result.summary.n, "accuracy": result.summary.accuracy, "wall_s": wall, "cpu_s": cpu}


def lm_eval_task(data: Path) -> dict[str, Any]:
    """The installed gsm8k task config (by lm-eval's own loader), its dataset the local JSONL, zero-shot."""
    import lm_eval
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg: dict[str, Any] = load_yaml(Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml",
                                    resolve_func=False)
    for key in ("tag", "dataset_name", "training_split", "fewshot_split"):
        cfg.pop(key, None)
    cfg.update(task="gsm8k_local", dataset_path="json", dataset_kwargs={"data_files": {"test": str(data)}},
               num_fewshot=0)
    return cfg


def run_lm_eval(url: str, data: Path, concurrency: int) -> dict[str, Any]:
    import logging

    from lm_eval import simple_evaluate

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    task = lm_eval_task(data)
    model_args = {"model": MODEL, "base_url": f"{url}/v1/chat/completions", "num_concurrent": concurrency,
                  "max_retries": 1, "tokenized_requests": False, "tokenizer_backend": None, "max_gen_toks": 256}
    c0, t0 = time.process_time(), time.perf_counter()
    out = simple_evaluate(model="local-chat-completions", model_args=model_args, tasks=[task],
                          apply_chat_template=True, log_samples=False, verbosity="WARNING")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert out is not None
    scores = out["results"]["gsm8k_local"]
    return {"n": int(out["n-samples"]["gsm8k_local"]["effective"]), "accuracy": scores["exact_match,strict-match"],
            "wall_s": wall, "cpu_s": cpu}


def child(args: argparse.Namespace) -> None:
    run = {"roost": run_roost, "lm-eval": run_lm_eval}[args.client]
    result = run(args.url, Path(args.data), args.concurrency)
    result["process_cpu_s"] = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    print("RESULT " + json.dumps(result), flush=True)


def measure(client: str, url: str, data: Path, concurrency: int, work: Path) -> dict[str, Any]:
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_DATASETS_CACHE=str(work / "hf-datasets"),
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, __file__, "--client", client, "--url", url, "--data", str(data),
                           "--concurrency", str(concurrency)], capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{client} client failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    if result["n"] != data_rows(data) or result["accuracy"] != 1.0:
        raise SystemExit(f"{client} client did not score every question right: {result}")
    return result


def data_rows(data: Path) -> int:
    return sum(1 for line in data.read_text(encoding="utf-8").splitlines() if line.strip())


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=2000, help="questions of the long run")
    ap.add_argument("--short", type=int, default=200,
                    help="questions of the short run (fixed costs cancel); 0: no short run, whole-run figures only")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--client", choices=["roost", "lm-eval"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.client:
        child(args)
        return
    if not 0 <= args.short < args.questions:
        raise SystemExit("--short must be between 0 and --questions")

    from support.eval_server import ScriptedServer

    work = Path(tempfile.mkdtemp(prefix="bench-eval-overhead-"))
    sizes = {"short": args.short, "long": args.questions} if args.short else {"long": args.questions}
    data = {k: work / f"test-{n}.jsonl" for k, n in sizes.items()}
    for k, n in sizes.items():
        write_dataset(data[k], n)
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {"roost": [], "lm-eval": []}
    with ScriptedServer(script, model=MODEL, max_model_len=4096) as server:
        for i in range(args.repeats):
            for client in runs:  # interleaved, so that machine load drifts hit both alike
                pair = {}
                for k in sizes:
                    before = len(server.requests)
                    r = pair[k] = measure(client, server.url, data[k], args.concurrency, work)
                    if len(server.requests) - before != sizes[k]:
                        raise SystemExit(f"{client}: {len(server.requests) - before} requests for {sizes[k]} questions")
                    print(f"  round {i + 1}/{args.repeats} {client}: {r['n']} questions in {r['wall_s']:.2f} s, "
                          f"{r['cpu_s']:.2f} s CPU", file=sys.stderr)
                runs[client].append(pair)

    n_long, dn = args.questions, args.questions - args.short

    def fig(client: str, f: Callable[[dict[str, Any], dict[str, Any]], float]) -> float:
        return float(statistics.median(f(p.get("short", {}), p["long"]) for p in runs[client]))

    rows = [
        ("questions/s, whole run", "{:.0f}", lambda s, x: n_long / x["wall_s"]),
        ("questions/s, marginal", "{:.0f}", lambda s, x: dn / (x["wall_s"] - s["wall_s"])),
        ("client CPU ms/question, whole run", "{:.2f}", lambda s, x: 1e3 * x["cpu_s"] / n_long),
        ("client CPU ms/question, marginal", "{:.2f}", lambda s, x: 1e3 * (x["cpu_s"] - s["cpu_s"]) / dn),
        ("fixed cost per run: wall s", "{:.1f}", lambda s, x: s["wall_s"] - args.short * (x["wall_s"] - s["wall_s"]) / dn),
        ("fixed cost per run: CPU s", "{:.1f}", lambda s, x: s["cpu_s"] - args.short * (x["cpu_s"] - s["cpu_s"]) / dn),
        ("client process CPU s, long run, imports included", "{:.1f}", lambda s, x: x["process_cpu_s"]),
    ]
    if not args.short:  # the figures of the long run alone
        rows = [r for r in rows if "marginal" not in r[0] and "fixed cost" not in r[0]]
    print(f"\nclient overhead per question: GSM8K-format questions, {args.concurrency} in flight, scripted instant "
          f"answers; whole run = {n_long} questions"
          f"{f', marginal = between {args.short} and {n_long}' if args.short else ''} (median of {args.repeats})\n")
    print("| figure | roost run_eval | lm-eval local-chat-completions | ratio roost/lm-eval |")
    print("|---|---|---|---|")
    for label, fmt, f in rows:
        ours, theirs = fig("roost", f), fig("lm-eval", f)
        ratio = f"{ours / theirs:.2f}" if ours > 0 and theirs > 0 else "-"  # a fixed cost can come out < 0: noise
        print(f"| {label} | {fmt.format(ours)} | {fmt.format(theirs)} | {ratio} |")
    out: list[Row] = []
    for label, unit in (("client CPU ms/question, whole run", "ms"), ("client CPU ms/question, marginal", "ms"),
                        ("questions/s, whole run", "/s")):
        of = next((fn for name, _, fn in rows if name == label), None)
        if of is None:  # no short run: no marginal figure
            continue
        ours, theirs = fig("roost", of), fig("lm-eval", of)
        what = (f"{label.replace(' ms/question', ' per question')} ({args.concurrency} in flight, "
                f"{n_long if 'whole' in label else f'{args.short} to {n_long}'} questions)")
        if unit == "ms":
            noise = ours <= 0 or theirs <= 0  # a marginal below 0: the two runs' noise exceeds their difference
            out.append(Row(what, unit, ours, theirs, "lm-eval local-chat-completions", "at most lm-eval's",
                           "not judged" if noise else judged(ours <= theirs),
                           "a marginal figure below 0: noise" if noise else ""))
        else:
            out.append(Row(what.replace("questions/s, ", "questions per second, "), unit, ours, theirs,
                           "lm-eval local-chat-completions"))
    write_rows(args.json_out, "bench_eval_overhead", out)


if __name__ == "__main__":
    main()
