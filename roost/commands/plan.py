"""``roost plan PATH --kv-cache-memory-bytes N`` / ``roost plan PATH --profile P``: predict vLLM's
KV-cache sizing before serving; with a profile, the server's whole argument list too.

PATH may be ``hf://OWNER/NAME[@REVISION]`` (read from the Hub without downloading a weight byte; the
JSON adds ``repo_id``, ``commit`` and ``bytes_fetched``); ``--profile P`` with no PATH plans that
profile's repository and revision on the Hub.

Prints the block size, the KV cache size in tokens and the maximum concurrency vLLM will log (its
``KV_CACHE_SIZE`` and ``MAX_CONCURRENCY`` lines, ``roost.vllm.wordings``), the smallest pool that holds
one full-length request, and whether weights + pool fit the host.
Exit 0 when one full-length request fits the pool and the host budget, 1 when not, 2 for bad input.
"""

from __future__ import annotations

from typing import Annotated

import typer

from roost.commands._common import echo_json, fail, user_errors
from roost.errors import UserError


def plan(
    path: Annotated[str | None, typer.Argument(
        help="Checkpoint directory (config.json + *.safetensors), or hf://OWNER/NAME[@REVISION] to read it "
        "from the Hub without downloading it; with --profile and no PATH, the profile's repository.",
        show_default=False)] = None,
    kv_cache_memory_bytes: Annotated[
        int | None, typer.Option("--kv-cache-memory-bytes", help="KV pool in bytes, as passed to vLLM "
                                 "(default with --profile: the profile's).", min=1)
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option("--max-model-len", help="Tokens per request (default: the profile's, else the model's native window).",
                     min=1),
    ] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Plan as `land` would for this model profile: its pool, window, --max-num-seqs, "
        "--max-num-batched-tokens and overrides; vllm_args is then the server's whole argument list.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Host profile: spark, cpu... (default: the profile's, "
                                             "else spark).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Predict vLLM's KV-cache sizing and check the fit for one checkpoint, pool and host."""
    # Imported here, not at module level: every roost command loads this module at start, and CLI
    # start time is measured (the plan pulls in the audit, pydantic models and orjson).
    from roost.commands._target import audit_target
    from roost.hosts import get_host
    from roost.plan.inputs import PlanInputs
    from roost.plan.preflight import plan_checkpoint
    from roost.profiles import get_profile

    if profile is None and kv_cache_memory_bytes is None:
        raise UserError("give --kv-cache-memory-bytes N, or --profile P to plan as that profile lands")
    prof = get_profile(profile) if profile is not None else None
    target = get_host(host or (prof.host if prof is not None else "spark"))
    inputs = prof.plan_inputs() if prof is not None else PlanInputs()
    inputs = inputs.model_copy(update={k: v for k, v in (("kv_cache_memory_bytes", kv_cache_memory_bytes),
                                                         ("max_model_len", max_model_len)) if v is not None})
    result = plan_checkpoint(audit_target(path, prof, target), target, inputs)
    if as_json:
        echo_json(result.to_json())
    else:
        typer.echo(result.summary())
    refusal = result.refusal()
    if refusal is not None:
        raise fail(f"{result.path}: {refusal[1]}", 1)


def register(app: typer.Typer) -> None:
    app.command("plan", help="Predict vLLM's KV-cache size, concurrency and fit for a checkpoint.")(
        user_errors(plan)
    )
