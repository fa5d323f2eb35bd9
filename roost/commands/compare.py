# ruff: noqa: RUF002  (typographic characters in user-facing text are deliberate)
"""``roost compare MODEL_A MODEL_B``: two models side by side from the results store, as the Ornith 1.5
recipe compares the new model with the one it replaced (``roost.report.compare``): aggregate throughput
per concurrency (median over repeats, min–max); GSM8K and MATH-500 accuracy (95 % Wilson interval) with the
truncation rate and the output tokens per answer (mean, median, p90); MMLU-Pro accuracy per category with
the unparsed rate. Prints the three tables and writes the three charts (PNG) into ``--out``.

A model is named by repo id, profile or served model name. Each model's run is its newest completed run on
the host that has evaluations (a landing), else its newest completed run. The host: ``--host``, else the
host of MODEL_A's newest completed run among the hosts where both have one.

``--json`` prints one object: ``host``; ``a`` and ``b`` (each ``repo_id``, ``served_model_name``,
``profile``, ``host``, ``run_id``, ``started_at``); ``throughput`` (``levels``: ``concurrency``, ``a``,
``b`` — each ``value``, ``low``, ``high`` or null — and ``ratio`` a/b; ``notes``); ``reasoning`` (one per
task: ``task``, ``title``, ``a``, ``b`` — each ``n``, ``accuracy``, ``truncated``, ``truncation_rate``,
``unparsed``, ``unparsed_rate``, ``output_tokens_mean``, ``output_tokens_median``, ``output_tokens_p90``,
or null — ``same_questions``, ``notes``); ``knowledge`` (``overall`` as a reasoning task, ``categories``:
``category``, ``a``, ``b`` — each ``n``, ``accuracy``, ``unparsed_rate``); ``notes`` (everything either
model lacks); ``charts`` ({name: path}). Rates and accuracies are fractions (0..1).

The store as ``roost results`` reads it (``--store``/``--credentials``, ``--dir``, the environment). Exit 0;
1 when the store does not answer; 2 for a model the store has no run of (the message lists the ones it
has), a model without a completed run, the same model twice, or a host without completed runs of both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from roost.commands._common import echo_json, user_errors
from roost.commands.results import CREDENTIALS_OPTION, STORE_OPTION, open_for_cli
from roost.errors import UserError
from roost.inputs.text import shown


def register(app: typer.Typer) -> None:
    app.command("compare", help="Two models side by side from the results store, as the recipe compares a new "
                "model with the one it replaced: throughput per concurrency, GSM8K/MATH-500 accuracy with "
                "truncation and output length, MMLU-Pro per category; tables, charts (PNG) and --json.")(
        user_errors(compare))


def _known(runs: Any) -> str:
    names = sorted(set(runs["repo_id"]) | set(runs["profile"]))
    return ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") if names else "none"


def _completed(runs: Any, model: str, arg: str) -> Any:
    """The completed runs of ``model`` (a UserError naming ``arg`` when it has none)."""
    from roost.report.compare_store import matching

    mine = matching(runs, model)
    if mine.empty:
        raise UserError(f"{arg} {shown(model)!r}: no runs for it in the results store; known: {_known(runs)}")
    done = mine[mine["status"] == "completed"]
    if done.empty:
        raise UserError(f"{arg} {shown(model)!r}: none of its {len(mine)} stored run(s) completed; land it "
                        "(roost run) before comparing")
    return done


def pick_host(a: Any, b: Any, host: str | None) -> str:
    """The host both are compared on: ``host`` if both have completed runs there, else the host of A's
    newest completed run among the hosts where both have one."""
    hosts_a, hosts_b = set(a["host_name"]), set(b["host_name"])
    if host is not None:
        for arg, hosts in (("MODEL_A", hosts_a), ("MODEL_B", hosts_b)):
            if host not in hosts:
                raise UserError(f"--host {shown(host)!r}: {arg} has no completed run there; it has: "
                                f"{', '.join(sorted(hosts))}")
        return host
    both = hosts_a & hosts_b
    if not both:
        raise UserError(f"no host has completed runs of both models (MODEL_A on {', '.join(sorted(hosts_a))}; "
                        f"MODEL_B on {', '.join(sorted(hosts_b))}): a comparison is of one host")
    return str(a[a["host_name"].isin(both)].iloc[-1]["host_name"])


def text_table(headers: list[str], rows: list[list[str]], right: list[int]) -> str:
    """Aligned plain-text columns (a report Table without its inline markup)."""
    def plain(s: str) -> str:
        return re.sub(r"\*\*|`", "", s)

    cells = [[plain(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths]), *(line(r) for r in cells[1:])])


def _print_text(cmp: Any, charts: dict[str, Path]) -> None:
    from roost.report.sections.comparison import knowledge_table, notes, reasoning_table, throughput_table

    a, b = cmp.a, cmp.b
    typer.echo(f"{a.repo_id} (run {a.run_id}) vs {b.repo_id} (run {b.run_id}) on {a.host}")
    for title, table in (("Aggregate throughput per concurrency", throughput_table(cmp)),
                         ("Reasoning and output length (GSM8K, MATH-500; MMLU-Pro overall)", reasoning_table(cmp)),
                         ("MMLU-Pro per category", knowledge_table(cmp))):
        typer.echo(f"\n{title}")
        typer.echo(text_table(table.headers, table.rows, table.align_right) if table.rows else "  (no data in either run)")
    said = notes(cmp)
    if said:
        typer.echo("\nNotes:")
        for n in said:
            typer.echo(f"- {n}")
    typer.echo("\nCharts: " + (", ".join(str(p) for p in charts.values()) if charts else "none (no data to draw)"))


def compare(
    model_a: Annotated[str, typer.Argument(metavar="MODEL_A", help="The first model (the new one): repo id, "
                                           "profile or served model name.")],
    model_b: Annotated[str, typer.Argument(metavar="MODEL_B", help="The model it is compared with (the one it "
                                           "replaced).")],
    host: Annotated[str | None, typer.Option("--host", help="Host both ran on (default: the host of MODEL_A's "
                                             "newest completed run where both have one).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON (keys: see docs/cli.md).")] = False,
    out: Annotated[Path, typer.Option("--out", help="Directory the charts (PNG) are written to.")] = Path("roost-compare"),
    results_dir: Annotated[Path | None, typer.Option("--dir", help="Results directory (default: $ROOST_RESULTS_DIR, "
                                                     "else ./results).")] = None,
    store_url: Annotated[str | None, STORE_OPTION] = None,
    credentials: Annotated[str | None, CREDENTIALS_OPTION] = None,
) -> None:
    """Compare two models' stored runs: tables, charts and, with --json, JSON."""
    from roost.report import compare_charts
    from roost.report.compare_store import compare_stored, stored_run
    from roost.report.sections.comparison import notes
    from roost.store import load_runs  # pyarrow and pandas: only when the command runs (CLI start time)

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {shown(str(out))}: not a directory; give a directory for the charts")
    store = open_for_cli(results_dir, store_url, credentials)
    runs = load_runs(store)
    a, b = _completed(runs, model_a, "MODEL_A"), _completed(runs, model_b, "MODEL_B")
    if set(a["repo_id"]) & set(b["repo_id"]):
        raise UserError(f"MODEL_A {shown(model_a)!r} and MODEL_B {shown(model_b)!r} name the same model; name two models")
    on = pick_host(a, b, host)
    rec_a = stored_run(str(a[a["host_name"] == on].iloc[-1]["repo_id"]), on, store)
    rec_b = stored_run(str(b[b["host_name"] == on].iloc[-1]["repo_id"]), on, store)
    if rec_a is None or rec_b is None:  # both have a completed run on the host: pick_host made sure
        raise UserError(f"no completed run of {'MODEL_A' if rec_a is None else 'MODEL_B'} on {on}")
    cmp = compare_stored(rec_a, rec_b, store)
    charts = compare_charts.render(cmp, out.expanduser())
    if as_json:
        echo_json({"host": on, **cmp.model_dump(mode="json"), "notes": notes(cmp),
                   "charts": {k: str(v) for k, v in charts.items()}})
    else:
        _print_text(cmp, charts)
