"""The vLLM arguments a checkpoint needs, derived from what it declares and what it ships.

- ``--max-model-len``: the model's native window unless told otherwise.
- ``--kv-cache-memory-bytes``: the smallest pool reaching a target concurrency at that window, never
  below what one full-length request needs (vLLM refuses to start otherwise).
- ``--language-model-only``: only when the config declares a vision tower and the checkpoint ships none
  of its tensors (passing it with the tower present fails at weight load).
- ``--speculative-config '{"method":"mtp","num_speculative_tokens":1}'``: only when ``mtp.*`` tensors exist
  (a config's ``mtp_num_hidden_layers`` is a declaration, the index is the fact).
- ``--kv-cache-dtype fp8``: when the checkpoint was calibrated for an FP8 KV cache (ModelOpt
  ``kv_cache_quant_algo: FP8``).
- ``--served-model-name``.
- ``--max-num-seqs`` and ``--max-num-batched-tokens``: the profile's serving settings, when set (the
  scheduler's cap on running requests and on tokens per step; vLLM's defaults otherwise).
- ``--gpu-memory-utilization U`` in place of ``--kv-cache-memory-bytes``: a profile sized by utilization
  (the Ornith 1.5 recipe's "one 0.70-utilization vLLM server"); the pool is then vLLM's to size and
  ``kv_cache_memory_bytes`` holds roost's prediction of it (:mod:`roost.plan.pool`).
- ``--reasoning-parser``, ``--enable-auto-tool-choice --tool-call-parser``, ``--[no-]enable-prefix-caching``,
  ``--[no-]enable-chunked-prefill``: the profile's client-facing settings (what the recipe's client reads:
  ``message.reasoning``, ``tool_calls``), when set.

``parse_overrides`` reads the sizing flags back out of a profile's extra vLLM args, so the plan can
follow them. Whether the result fits a host is :mod:`roost.plan.fit`'s.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from roost.checkpoint.config import ModelConfigInfo
from roost.errors import UserError
from roost.inputs.text import shown
from roost.plan.inputs import PlanInputs, ServingSettings
from roost.plan.kv import KvModelSpec, KvRules, kv_model_from_config, pool_for_concurrency
from roost.units import GiB
from roost.vllm.argv import VllmArgv

MTP_SPECULATIVE_CONFIG: dict[str, Any] = {"method": "mtp", "num_speculative_tokens": 1}


class ServeArgs(ServingSettings):
    """The derived vLLM arguments, as fields and as an argv tail (``to_argv``); the profile's serving
    settings are :class:`ServingSettings`' fields."""

    served_model_name: str
    max_model_len: int
    kv_cache_memory_bytes: int
    language_model_only: bool = False
    speculative_config: dict[str, Any] | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None

    @property
    def num_speculative_tokens(self) -> int:
        return int(self.speculative_config["num_speculative_tokens"]) if self.speculative_config else 0

    def to_argv(self) -> list[str]:
        argv = [
            "--served-model-name",
            self.served_model_name,
            "--max-model-len",
            str(self.max_model_len),
        ]
        if self.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        else:
            argv += ["--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes)]
        if self.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.kv_cache_dtype != "auto":
            argv += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.language_model_only:
            argv.append("--language-model-only")
        if self.speculative_config is not None:
            argv += ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
        for flag, on in (("prefix-caching", self.enable_prefix_caching), ("chunked-prefill", self.enable_chunked_prefill)):
            if on is not None:
                argv.append(f"--enable-{flag}" if on else f"--no-enable-{flag}")
        if self.reasoning_parser is not None:
            argv += ["--reasoning-parser", self.reasoning_parser]
        if self.tool_call_parser is not None:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        return argv


def kv_cache_dtype_for(cfg: ModelConfigInfo) -> str:
    """``fp8`` when the checkpoint ships an FP8-calibrated KV cache, else ``auto`` (the model dtype)."""
    q = cfg.quantization or {}
    algo = q.get("kv_cache_quant_algo")
    if algo is None and isinstance(q.get("quantization"), dict):
        algo = q["quantization"].get("kv_cache_quant_algo")
    return "fp8" if isinstance(algo, str) and algo.upper().startswith("FP8") else "auto"


def serve_kv_model(cfg: ModelConfigInfo, rules: KvRules, *, mtp_tensor_count: int) -> KvModelSpec:
    """The KV spec of ``cfg`` served with the derived args (FP8 KV when calibrated, MTP when shipped)."""
    spec_tokens = MTP_SPECULATIVE_CONFIG["num_speculative_tokens"] if mtp_tensor_count > 0 else 0
    return kv_model_from_config(
        cfg, rules, kv_cache_dtype=kv_cache_dtype_for(cfg), num_speculative_tokens=int(spec_tokens)
    )


def derive_vllm_args(
    cfg: ModelConfigInfo,
    rules: KvRules,
    *,
    visual_tensor_count: int,
    mtp_tensor_count: int,
    served_model_name: str,
    max_model_len: int | None = None,
    kv_cache_memory_bytes: int | None = None,
    target_concurrency: float = 1.0,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    serving: ServingSettings | None = None,
) -> ServeArgs:
    """The vLLM arguments for this checkpoint. An explicit pool smaller than one full request is an error.
    ``serving``: the profile's client-facing settings (a utilization-sized pool, parsers, prefix caching,
    chunked prefill); with ``gpu_memory_utilization`` the pool given is the predicted one, not a pin."""
    if not served_model_name.strip():
        raise UserError("served model name must not be empty")
    window = max_model_len or cfg.max_position_embeddings
    if window > cfg.max_position_embeddings:
        raise UserError(
            f"--max-model-len {window:,} exceeds the model's native window ({cfg.max_position_embeddings:,} "
            "max_position_embeddings); lower it"
        )
    kv_model = serve_kv_model(cfg, rules, mtp_tensor_count=mtp_tensor_count)
    smallest = pool_for_concurrency(kv_model, rules, target_concurrency, window)
    if kv_cache_memory_bytes is None:
        pool = smallest
    else:
        one = pool_for_concurrency(kv_model, rules, 1.0, window)
        if kv_cache_memory_bytes < one:
            raise UserError(
                f"--kv-cache-memory-bytes {kv_cache_memory_bytes:,} cannot hold one {window:,}-token request; "
                f"vLLM needs at least {one:,} bytes ({one / GiB:.2f} GiB)"
            )
        pool = kv_cache_memory_bytes
    return ServeArgs(
        served_model_name=served_model_name,
        max_model_len=window,
        kv_cache_memory_bytes=pool,
        language_model_only=cfg.has_vision_config and visual_tensor_count == 0,
        speculative_config=dict(MTP_SPECULATIVE_CONFIG) if mtp_tensor_count > 0 else None,
        kv_cache_dtype=kv_cache_dtype_for(cfg),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        **(serving or ServingSettings()).model_dump(),
    )


class VllmOverrides(BaseModel):
    """The sizing-relevant flags found in extra vLLM args (a profile's ``vllm_overrides``; last one wins)."""

    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None


_VALUE_FLAGS = {
    "--max-model-len": "max_model_len",
    "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--dtype": "dtype",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--block-size": "block_size",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--gpu-memory-utilization": "gpu_memory_utilization",
}
_INT_FIELDS = {"max_model_len", "kv_cache_memory_bytes", "block_size", "max_num_seqs", "max_num_batched_tokens"}


MAX_OVERRIDE_INT = 2**53
"""The largest integer a sizing override may take (beyond any memory, window or batch a host has)."""


def parse_overrides(argv: list[str]) -> VllmOverrides:
    """Pick ``--max-model-len``, ``--kv-cache-memory-bytes``, ``--dtype``, ``--kv-cache-dtype``,
    ``--block-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--gpu-memory-utilization``,
    ``--[no-]enforce-eager`` and ``--[no-]enable-prefix-caching`` out of an argv, read as vLLM reads it
    (:class:`~roost.vllm.argv.VllmArgv`: ``--f v``, ``--f=v`` and one argument ``--f v``, in vLLM's ``_``
    spelling too; the last one wins). A flag given without a value, or a sizing value that is not a whole
    number from 1 to 2**53, is a UserError naming the flag: vLLM would refuse it after the download, the
    plan refuses it before."""
    given = VllmArgv(argv)
    found: dict[str, Any] = {}
    for flag, field in _VALUE_FLAGS.items():
        for raw in given.values(flag):  # each one checked, the last one kept
            value = raw.strip()
            if not value:
                raise UserError(f"vLLM override {flag} has no value")
            if field in _INT_FIELDS:
                found[field] = _whole_number(flag, value)
            elif field == "gpu_memory_utilization":
                found[field] = _share(flag, value)
            else:
                found[field] = value
    for flag, field in (("--enable-prefix-caching", "enable_prefix_caching"), ("--enforce-eager", "enforce_eager")):
        if (on := given.enabled(flag)) is not None:  # ``--no-<flag>`` turns it off; the last one wins
            found[field] = on
    return VllmOverrides(**found)


def served_as(inputs: PlanInputs, *, native_window: int, default_name: str) -> tuple[str, int]:
    """The model name a server answers to and the window it serves, for ``inputs``: the one rule the
    audit, the plan and the landing share. The name is the profile's (else ``default_name``: the
    directory's); the window is the overrides' ``--max-model-len`` (the last one wins, as in vLLM), else
    the profile's ``max_model_len``, else ``native_window`` (the config's max_position_embeddings)."""
    overrides = parse_overrides(list(inputs.vllm_overrides))
    return (inputs.served_model_name or default_name,
            overrides.max_model_len or inputs.max_model_len or native_window)


def _share(flag: str, value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        share = float("nan")
    if not 0 < share <= 1:  # NaN fails too
        raise UserError(f"vLLM override {flag} {shown(value, 60)!r} is not a share of memory above 0 and at most 1")
    return share


def _whole_number(flag: str, value: str) -> int:
    text = value.replace("_", "")
    if not text.isdigit() or len(text) > 17:
        raise UserError(f"vLLM override {flag} {shown(value, 60)!r} is not a whole number from 1 to 2**53")
    n = int(text)
    if not 1 <= n <= MAX_OVERRIDE_INT:
        raise UserError(f"vLLM override {flag} {n:,} must be from 1 to 2**53")
    return n
