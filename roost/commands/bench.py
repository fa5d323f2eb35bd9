"""``roost bench BASE_URL --model NAME``: benchmark any OpenAI-compatible server.

Runs the single-stream prompt-length sweep and the concurrency sweep of ``roost/bench/sweep.py``
(definitions: ``roost/catalogue.py``). Progress goes to stderr; the table, or with ``--json``
the points, to stdout. Exit 0 when the run completed (points with request errors included), 1
when the server stopped answering (what was measured is still printed), 2 for unusable input.

The JSON: ``base_url``, ``model``, ``status``, ``max_model_len``, ``errors``, ``notes``, ``knee``
(``concurrency``, ``output_tok_s``, ``peak_concurrency``, ``peak_output_tok_s``, ``tolerance``,
``saturated``) and ``points``: :class:`~roost.records.BenchPoint` dumps, each metric a
distribution (``"ttft_s": {"count", "mean", "median", "min", "max", "p10", "p90", "p99"}``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from roost.bench.settings import MAX_STREAMS, MAX_TOKENS
from roost.catalogue import DECODE, KNEE, OUTPUT_THROUGHPUT, TTFT, fmt_value
from roost.commands._common import user_errors
from roost.errors import UserError
from roost.inputs.text import shown
from roost.secrets import redact
from roost.settings import environment

if TYPE_CHECKING:
    from roost.bench.sweep import BenchResult, BenchSettings


def parse_int_list(text: str, option: str, *, allow_max: bool = False, limit: int = MAX_TOKENS) -> list[int]:
    """``"512,2048"`` -> ``[512, 2048]``; ``""`` -> ``[]``; ``max`` -> 0 (the largest the window admits)."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if allow_max and part.lower() == "max":
            out.append(0)
            continue
        try:
            value = int(part.replace("_", ""))
        except ValueError:
            raise UserError(f"{option}: {shown(part, 40)!r} is not a whole number (expected e.g. 512,2048)") from None
        if not 1 <= value <= limit:
            raise UserError(f"{option}: {shown(part, 40)} must be from 1 to {limit:,}")
        out.append(value)
    return out


def _num(value: float | None) -> str:
    """A table cell: the number as every output prints it, the unit being in the column head."""
    return fmt_value(value, "")


def render(result: BenchResult) -> str:
    window = fmt_value(result.max_model_len, "tokens") if result.max_model_len else "unknown"
    lines = [f"{result.model} at {result.base_url} (window {window})", ""]
    head = (f"{'kind':<13} {'prompt':>7} {'users':>5} {TTFT.label + ' p50 (' + TTFT.unit + ')':>12} "
            f"{DECODE.label + ' p50 [min-max]':>27} {OUTPUT_THROUGHPUT.label:>22} {'req':>4} {'err':>4}")
    if result.points:
        lines += [head, "-" * len(head)]
    for p in result.points:
        if p.skipped:
            lines.append(f"{p.kind:<13} {p.prompt_tokens:>7} {p.concurrency:>5}  skipped: {p.skip_reason}")
            continue
        d = p.decode_tok_s
        spread = f"{_num(d.median)} [{_num(d.min)}-{_num(d.max)}]"
        lines.append(
            f"{p.kind:<13} {p.prompt_tokens:>7} {p.concurrency:>5} {_num(p.ttft_s.median):>12} "
            f"{spread:>27} {_num(p.output_tok_s.median):>22} {p.requests:>4} {p.errors:>4}"
        )
    if result.knee is not None:
        lines += ["", f"{KNEE.label}: {result.knee.describe()}"]
    lines += [f"note: {n}" for n in result.notes]
    lines += [f"error: {e}" for e in result.errors]
    return "\n".join(lines)


def bench(
    base_url: Annotated[str, typer.Argument(help="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")],
    model: Annotated[str, typer.Option("--model", help="Served model name (as /v1/models lists it).")],
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="Bearer key for the server. Prefer the VLLM_API_KEY environment variable, which is used when "
            "this option is absent: a key on the command line is visible to every user in `ps`.",
            show_default=False,
        ),
    ] = None,
    prompt_lengths: Annotated[
        str | None,
        typer.Option("--prompt-lengths", help="Single-stream sweep, prompt tokens incl. chat template; 'max' = the "
                     "largest the window admits; '' = no sweep. (default: 512,2048,8192,32768,131072,250000,max)"),
    ] = None,
    output_tokens: Annotated[int | None, typer.Option("--output-tokens", help="max_tokens per request (ignore_eos). (default: 256)")] = None,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Concurrency sweep levels; '' = no sweep. (default: 1,16,20,24)")
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs", help="The server's --max-num-seqs, added as a level.")] = None,
    concurrency_prompt_tokens: Annotated[
        int | None, typer.Option("--concurrency-prompt-tokens", help="Prompt tokens in the concurrency sweep. (default: 512)")
    ] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Steps per point (median, min, max). (default: 3)")] = None,
    warmup: Annotated[int | None, typer.Option("--warmup", help="Unmeasured requests first. (default: 2)")] = None,
    thinking: Annotated[bool, typer.Option("--thinking/--no-thinking", help="chat_template_kwargs.enable_thinking.")] = False,
    max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="Served window (default: ask the server).")] = None,
    output: Annotated[Path | None, typer.Option("--output", help="Also write the full result (every request) as JSON here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the points as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress lines on stderr.")] = False,
) -> None:
    """Benchmark an OpenAI-compatible server: TTFT and decode tok/s against prompt length, aggregate tok/s against users."""
    # Imported here, not at module level: the benchmark engine pulls in httpx, and every roost
    # command's start time pays for what roost/cli.py imports.
    from roost.bench.sweep import run_benchmark
    from roost.progress import terminal_progress

    settings = _settings(prompt_lengths=prompt_lengths, concurrency=concurrency, output_tokens=output_tokens,
                         max_num_seqs=max_num_seqs, concurrency_prompt_tokens=concurrency_prompt_tokens,
                         repeats=repeats, warmup=warmup, thinking=thinking, max_model_len=max_model_len)
    key = api_key if api_key is not None else environment().vllm_api_key

    # bars on a terminal; piped or in CI, a line every 10 s or 10 %; nothing with --quiet
    terminal = terminal_progress(f"benchmark of {model}", unit="steps", mode="off" if quiet else None,
                                 secrets=[key or ""])

    def progress(message: str, fraction: float) -> None:
        done, points = settings.points_done(fraction)
        terminal.update(done, points, status=message)  # points measured of all

    if output is not None:
        check_writable(output)  # before a request is sent, not after the benchmark ran
    with terminal:
        result = run_benchmark(base_url, model, settings, api_key=key or None, progress=progress)
    _fail_when_nothing_measured(result)

    def scrubbed(text: str) -> str:  # a server may echo the key back in what it answered
        return redact(text, [key or ""])

    if output is not None:
        _write_atomic(output, scrubbed(result.model_dump_json(indent=2)))
    if as_json:
        typer.echo(scrubbed(json.dumps(bench_json(result), indent=2, default=str)))
    else:
        typer.echo(scrubbed(render(result)))
    if result.failed:
        raise typer.Exit(1)


def _settings(*, prompt_lengths: str | None, concurrency: str | None, **values: Any) -> BenchSettings:
    """The benchmark settings of the command's options: the two sweeps parsed from their lists, the rest
    as given (None: the default)."""
    from roost.bench.sweep import make_settings

    if prompt_lengths is not None:
        values["prompt_lengths"] = parse_int_list(prompt_lengths, "--prompt-lengths", allow_max=True)
    if concurrency is not None:
        values["concurrency"] = parse_int_list(concurrency, "--concurrency", limit=MAX_STREAMS)
    return make_settings(**values)


def _fail_when_nothing_measured(result: BenchResult) -> None:
    """A run in which no request succeeded is a failed run, whatever the server answered: say why."""
    if not result.failed and not any(r.ok for r in result.requests):
        result.status = "failed"  # nothing was measured, whatever the server answered
        first = next((r.error for r in result.requests if r.error), "") or \
            next((p.skip_reason for p in result.points if p.skip_reason), "no request was sent")
        result.errors.append(f"none of the {len(result.requests)} requests succeeded (first error: {first})")


def bench_json(result: BenchResult) -> dict[str, Any]:
    """What ``--json`` prints (the module docstring lists its keys)."""
    return {
        "base_url": result.base_url,
        "model": result.model,
        "status": result.status,
        "max_model_len": result.max_model_len,
        "errors": result.errors,
        "notes": result.notes,
        "knee": result.knee.model_dump() if result.knee else None,
        "points": [p.model_dump(mode="json") for p in result.points],
    }


def check_writable(path: Path) -> None:
    """Refuse an ``--output`` that cannot be written (a directory, a missing parent that cannot be made)."""
    if path.is_dir():
        raise UserError(f"--output {shown(str(path))}: is a directory; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--output {shown(str(path))}: cannot create its directory ({exc.strerror}); pick a writable path") from None
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"--output {shown(str(path))}: its directory is not writable; pick a writable path")


def _write_atomic(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"--output {shown(str(path))}: cannot write ({exc.strerror}); pick a writable path") from None


def register(app: typer.Typer) -> None:
    app.command("bench", help="Benchmark any OpenAI-compatible server (TTFT, decode tok/s, aggregate tok/s, knee).")(
        user_errors(bench)
    )
