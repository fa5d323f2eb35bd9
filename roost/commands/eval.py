"""``roost eval BASE_URL --model NAME --task gsm8k|math500|mmlu-pro``: accuracy of any OpenAI-compatible server.

Prompts, answer extraction and scoring: ``roost/eval/suites.py``; datasets and the sample:
``roost/eval/datasets.py``; the log a run resumes from: ``roost/eval/log.py``. Progress (questions
done, accuracy so far, ETA) goes to stderr; the summary, or with ``--json`` the scores, to stdout.
Exit 0 when the run completed, 1 when the server stopped answering (the log keeps every answer),
2 for unusable input.

The JSON: ``task``, ``model``, ``status``, ``n``, ``correct``, ``wrong``, ``accuracy``, ``ci_low``,
``ci_high`` (95 %, Wilson), ``unparsed``, ``truncated``, ``mean_output_tokens``, ``per_category``
(``{category: {n, correct, accuracy}}``), ``sampling``, ``seed``, ``limit``,
``per_category_sample``, ``dataset`` (``source``, ``revision``, ``files``, ``rows``), ``resumed``,
``elapsed_s``, ``error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from roost.commands._common import echo_json, user_errors
from roost.settings import environment, hub_token_env

if TYPE_CHECKING:
    from roost.eval.runner import EvalResult


def render(result: EvalResult) -> str:
    from roost.catalogue import ACCURACY, MEAN_OUTPUT_TOKENS, fmt_accuracy, fmt_value

    s = result.summary
    lines = [
        f"{result.task} on {result.model} at {result.base_url}: {s.n} questions "
        f"(dataset {result.dataset.source}@{result.dataset.revision[:16]})",
        f"{ACCURACY.title}: {fmt_accuracy(s.accuracy, s.ci_low, s.ci_high)}; {s.correct} correct, "
        f"{s.wrong} wrong, {s.unparsed} unparsed, {s.truncated} truncated; "
        f"{MEAN_OUTPUT_TOKENS.label} {fmt_value(s.mean_output_tokens, MEAN_OUTPUT_TOKENS.unit)}",
    ]
    if len(s.per_category) > 1:
        width = max(len(c) for c in s.per_category)
        lines += ["", f"{'category':<{width}} {'n':>5} {'correct':>8} {'accuracy':>9}"]
        for cat, c in s.per_category.items():
            lines.append(f"{cat:<{width}} {c.n:>5} {c.correct:>8} {fmt_accuracy(c.accuracy):>9}")
    if result.resumed:
        lines.append(f"note: {result.resumed} answers taken from the log, not asked again")
    return "\n".join(lines)


def eval_command(
    base_url: Annotated[str, typer.Argument(help="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")],
    model: Annotated[str, typer.Option("--model", help="Served model name (as /v1/models lists it).")],
    task: Annotated[str, typer.Option("--task", help="gsm8k, math500 or mmlu-pro.")],
    dataset: Annotated[str | None, typer.Option(
        "--dataset", help="A Parquet/JSONL file or directory in the task's upstream format, or a Hub dataset repo "
        "OWNER/NAME[@REV] (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE apply). Default: the task's upstream repo.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most N questions (a seeded draw).")] = None,
    per_category: Annotated[int | None, typer.Option(
        "--per-category", help="N questions per category (stratified). Default: 50 for mmlu-pro, all otherwise.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample and of each question's sampling.")] = 0,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="Requests in flight (default: 16; mmlu-pro 8).")] = None,
    max_tokens: Annotated[int | None, typer.Option(
        "--max-tokens", help="Per answer, reasoning included (default: 16384, capped to half the server's window).")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", help="Default: 0.6 (thinking mode).")] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="Default: 0.95.")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Default: 20.")] = None,
    thinking: Annotated[bool | None, typer.Option(
        "--thinking/--no-thinking", help="chat_template_kwargs.enable_thinking (default: on).", show_default=False)] = None,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", help="Bearer key for the server. Prefer VLLM_API_KEY, used when this option is absent.",
        show_default=False)] = None,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Per-question JSONL log; an existing log of the same settings is resumed.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress lines on stderr.")] = False,
) -> None:
    """Accuracy of a served model on GSM8K, MATH-500 or MMLU-Pro (Wilson interval, per category, resumable log)."""
    from pydantic import ValidationError

    from roost.errors import UserError
    from roost.eval.runner import EvalProgress, EvalSettings, run_eval
    from roost.hub._endpoint import resolve_token
    from roost.progress import terminal_progress
    from roost.vllm.client import normalize_base_url

    normalize_base_url(base_url)  # a bad URL is one line before the dataset is read
    try:
        settings = EvalSettings.for_task(task, dataset=dataset, limit=limit, per_category=per_category, seed=seed,
                                         concurrency=concurrency, max_tokens=max_tokens, temperature=temperature,
                                         top_p=top_p, top_k=top_k, thinking=thinking)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][-1]).replace("_", "-") if err["loc"] else "value"
        raise UserError(f"--{field}: {err['msg']}") from None
    env = environment()
    key = api_key if api_key is not None else env.vllm_api_key
    # the Hub token by the one precedence (no profile, so no Secret block): HF_TOKEN, else
    # HUGGING_FACE_HUB_TOKEN, checked here; else huggingface_hub's stored login, read only for a Hub dataset
    token = resolve_token() if hub_token_env() is not None else None
    terminal = terminal_progress(f"{settings.task} on {model}", unit="steps", mode="off" if quiet else None,
                                 interval_s=5.0, secrets=[key or ""])

    def progress(p: EvalProgress) -> None:
        terminal.update(p.done, p.total, status=p.describe())

    with terminal:
        result = run_eval(base_url, model, settings, api_key=key or None, log_path=log, progress=progress,
                          endpoint=env.hf_endpoint or None, token=token)
    if as_json:
        echo_json(result.as_json())
    else:
        typer.echo(render(result))


def register(app: typer.Typer) -> None:
    app.command("eval", help="Accuracy of a served model: GSM8K, MATH-500 or MMLU-Pro, resumable, per category.")(
        user_errors(eval_command)
    )
