"""Whether a checkpoint served with its vLLM arguments fits a host, and how fast it can decode there.

- ``load_weight_bytes``: the weights vLLM loads with the derived arguments (the vision tower is not
  built with ``--language-model-only``, the MTP draft is not loaded without ``--speculative-config``).
- ``fit_check``: weights + KV pool + the host's headroom against its memory budget;
  ``fit_findings`` says DOES_NOT_FIT_HOST (error) when they exceed it.
- ``decode_ceiling_tok_s``: the memory-bandwidth roofline for one decode stream, the host's bandwidth
  (decimal GB/s, as vendors publish it) over the weight bytes one decode step reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from roost.checkpoint.findings import Finding
from roost.checkpoint.layout import TensorClass
from roost.hosts import HostProfile
from roost.plan.args import ServeArgs
from roost.units import GB, GiB


class FitCheck(BaseModel):
    """Weights + KV pool + headroom against the host's budget for vLLM."""

    weight_bytes: int = Field(description="Weights vLLM loads (vision tower excluded with --language-model-only, MTP without spec decode).")
    kv_cache_memory_bytes: int
    headroom_bytes: int
    total_bytes: int
    usable_bytes: int
    free_bytes: int = Field(description="usable - total; negative when it does not fit.")
    fits: bool


def load_weight_bytes(bytes_by_class: Mapping[TensorClass, int], args: ServeArgs) -> int:
    """Weight bytes vLLM loads when served with ``args``."""
    total = sum(bytes_by_class.values())
    if args.language_model_only:
        total -= bytes_by_class.get("vision", 0)
    if args.speculative_config is None:
        total -= bytes_by_class.get("mtp", 0)
    return total


def fit_check(weight_bytes: int, kv_cache_memory_bytes: int, host: HostProfile) -> FitCheck:
    total = weight_bytes + kv_cache_memory_bytes + host.headroom_bytes
    return FitCheck(
        weight_bytes=weight_bytes,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        headroom_bytes=host.headroom_bytes,
        total_bytes=total,
        usable_bytes=host.usable_bytes,
        free_bytes=host.usable_bytes - total,
        fits=total <= host.usable_bytes,
    )


def fit_findings(fit: FitCheck, host: HostProfile) -> list[Finding]:
    """DOES_NOT_FIT_HOST (error) when weights + pool + headroom exceed the host's budget."""
    if fit.fits:
        return []
    return [Finding(
        code="DOES_NOT_FIT_HOST",
        severity="error",
        message=f"weights {fit.weight_bytes / GiB:.2f} GiB + KV pool {fit.kv_cache_memory_bytes / GiB:.2f} GiB + headroom "
        f"{fit.headroom_bytes / GiB:.2f} GiB exceed {host.name}'s {host.usable_bytes / GiB:.2f} GiB budget; "
        "use a quantized build or a bigger host",
    )]


def decode_ceiling_tok_s(decode_bytes_per_token: int, host: HostProfile) -> float:
    """Tokens per second one stream can decode at most: bandwidth / bytes read per token (0: unknown)."""
    return host.bandwidth_gb_s * GB / decode_bytes_per_token if decode_bytes_per_token else 0.0
