"""``roost plan PATH --kv-cache-memory-bytes N``: predict vLLM's KV-cache sizing before serving.

Prints the block size, the "KV cache size: N tokens" and "Maximum concurrency" figures vLLM will log,
the smallest pool that holds one full-length request, and whether weights + pool fit the host.
Exit 0 when one full-length request fits the pool and the host budget, 1 when not, 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from roost.commands._common import echo_json, fail, user_errors


def plan(
    path: Annotated[Path, typer.Argument(help="Checkpoint directory (config.json + *.safetensors).")],
    kv_cache_memory_bytes: Annotated[
        int, typer.Option("--kv-cache-memory-bytes", help="KV pool in bytes, as passed to vLLM.", min=1)
    ],
    max_model_len: Annotated[
        int | None,
        typer.Option("--max-model-len", help="Tokens per request (default: the model's native window).", min=1),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Host profile: spark or cpu.")] = "spark",
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Predict vLLM's KV-cache sizing and check the fit for one checkpoint, pool and host."""
    # Imported here, not at module level: every roost command loads this module at start, and CLI
    # start time is measured (the plan pulls in the audit, pydantic models and orjson).
    from roost.hosts import get_host
    from roost.plan.inputs import PlanInputs
    from roost.plan.preflight import plan_checkpoint
    from roost.plan.report import audit_for_host

    target = get_host(host)
    inputs = PlanInputs(kv_cache_memory_bytes=kv_cache_memory_bytes, max_model_len=max_model_len)
    result = plan_checkpoint(audit_for_host(path, target), target, inputs)
    if as_json:
        echo_json(result.to_json())
    else:
        typer.echo(result.summary())
    refusal = result.refusal()
    if refusal is not None:
        raise fail(f"{path}: {refusal[1]}", 1)


def register(app: typer.Typer) -> None:
    app.command("plan", help="Predict vLLM's KV-cache size, concurrency and fit for a checkpoint.")(
        user_errors(plan)
    )
