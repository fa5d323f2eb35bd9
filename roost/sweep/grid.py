"""A flag sweep's grid: ``--grid 'max-num-seqs=16,20,24' --grid 'max-num-batched-tokens=4096,8192'`` ->
every combination, each a :class:`Variant` landed with its flags as vLLM overrides (appended last, so
they win over the profile's own settings).

An axis names a vLLM flag without its dashes and the values it takes, comma-separated; ``on`` and
``off`` stand for a switch given or left out (``--grid enforce-eager=on,off``). Pure: strings in,
variants out; a malformed axis is a UserError naming it.
"""

from __future__ import annotations

import itertools
import re

from pydantic import BaseModel, Field

from roost.errors import UserError
from roost.vllm.flags import SECRET_FLAGS

MAX_VARIANTS = 64
"""A grid larger than this is refused: each variant is a cold load (minutes on a Spark)."""

_FLAG = re.compile(r"[a-z0-9][a-z0-9-]*")
_VALUE = re.compile(r"[A-Za-z0-9._:+\-/{}\"'\[\], ]+")


class Axis(BaseModel):
    flag: str = Field(description="The vLLM flag without its dashes, e.g. max-num-seqs.")
    values: list[str]


class Variant(BaseModel):
    """One point of the grid: its settings (flag -> value) and the vLLM overrides they make."""

    settings: dict[str, str]

    @property
    def name(self) -> str:
        """``max-num-seqs=16,max-num-batched-tokens=4096`` (grid order)."""
        return " ".join(f"{k}={v}" for k, v in self.settings.items()) or "(profile as it is)"

    @property
    def overrides(self) -> list[str]:
        out = []
        for flag, value in self.settings.items():
            if value == "on":
                out.append(f"--{flag}")
            elif value != "off":
                out.append(f"--{flag}={value}")
        return out


def _split(values: str) -> list[str]:
    """Comma-separated values; a comma inside braces, brackets or quotes belongs to its value (a JSON
    config such as speculative-config={"method":"mtp","num_speculative_tokens":1})."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in values:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    out.append(cur)
    return out


def parse_axis(spec: str) -> Axis:
    """``'max-num-seqs=16,20,24'`` -> Axis; a UserError saying what is wrong otherwise."""
    flag, eq, values = spec.strip().partition("=")
    flag = flag.strip().removeprefix("--")
    if not eq or not flag:
        raise UserError(f"--grid {spec!r}: write FLAG=V1,V2,... (e.g. --grid 'max-num-seqs=16,20,24')")
    if not _FLAG.fullmatch(flag):
        raise UserError(f"--grid {spec!r}: {flag!r} is not a vLLM flag name (lowercase letters, digits, dashes)")
    if f"--{flag}" in SECRET_FLAGS:
        raise UserError(f"--grid {spec!r}: --{flag} carries a secret, and a sweep's arguments are stored with each "
                        "run; roost passes the API key through VLLM_API_KEY or the roost-vllm-api-key Secret block")
    items = [v.strip() for v in _split(values)]
    if not items or any(not v for v in items):
        raise UserError(f"--grid {spec!r}: an empty value; give comma-separated values (e.g. 16,20,24)")
    bad = [v for v in items if not _VALUE.fullmatch(v)]
    if bad:
        raise UserError(f"--grid {spec!r}: value {bad[0]!r} has characters a vLLM flag value cannot have here")
    if len(set(items)) != len(items):
        raise UserError(f"--grid {spec!r}: a value is listed twice")
    return Axis(flag=flag, values=items)


def parse_grid(specs: list[str]) -> list[Axis]:
    """Every ``--grid`` value as an axis; one axis per flag; at most :data:`MAX_VARIANTS` combinations."""
    if not specs:
        raise UserError("a sweep needs at least one --grid FLAG=V1,V2,... (e.g. --grid 'max-num-seqs=16,20,24')")
    axes = [parse_axis(s) for s in specs]
    flags = [a.flag for a in axes]
    dup = next((f for f in flags if flags.count(f) > 1), None)
    if dup:
        raise UserError(f"--grid: {dup} is given twice; list all its values in one --grid {dup}=V1,V2,...")
    total = 1
    for a in axes:
        total *= len(a.values)
    if total > MAX_VARIANTS:
        raise UserError(f"--grid: {total} combinations; at most {MAX_VARIANTS} (each is a cold load): narrow an axis")
    return axes


def variants(axes: list[Axis]) -> list[Variant]:
    """Every combination, the first axis varying slowest."""
    return [Variant(settings=dict(zip([a.flag for a in axes], combo, strict=True)))
            for combo in itertools.product(*(a.values for a in axes))]
