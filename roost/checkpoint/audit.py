"""Audit a checkpoint from its safetensors headers and config alone, before any GPU minute is spent.

``audit_checkpoint(path)`` reads the checkpoint once (:func:`~roost.checkpoint.model.read_checkpoint`:
config, index, every shard's header, never tensor data) and runs the checks
(:data:`~roost.checkpoint.checks.CHECKS`), each returning findings with stable codes. It knows
nothing of hosts: the vLLM arguments, the fit on a host and the report ``roost audit`` prints are
:mod:`roost.plan`'s (:func:`roost.plan.report.audit_for_host`).

Unusable input (no directory, no config, corrupt header, traversal in the index...) raises
:class:`~roost.errors.UserError` (exit 2). Problems the audit can describe (a missing shard, an index
naming a tensor its shard lacks, a layer gap) are findings with severity ``error`` (exit 1).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from roost.checkpoint.checks import CHECKS, Check
from roost.checkpoint.files import CheckpointFiles
from roost.checkpoint.findings import Finding
from roost.checkpoint.model import Checkpoint, read_checkpoint


@dataclass(frozen=True, slots=True)
class CheckpointAudit:
    """A checkpoint, what the checks found in it, and how long reading and checking took."""

    checkpoint: Checkpoint
    findings: list[Finding]
    seconds: float


def audit_checkpoint(
    path: Path | CheckpointFiles,
    checks: tuple[Check, ...] = CHECKS,
    *,
    expected_headers: Mapping[str, str] | None = None,
) -> CheckpointAudit:
    """Read the checkpoint (a directory, or the files a Hub preflight fetched: headers and config only)
    and run ``checks`` on it. ``expected_headers``: the header digests a preflight read (HEADER_CHANGED)."""
    t0 = time.perf_counter()
    ck = read_checkpoint(path, expected_headers)
    findings = [f for check in checks for f in check(ck)]
    return CheckpointAudit(ck, findings, time.perf_counter() - t0)
