"""JSON from outside (a config, an index, a server's answer) parsed with bounded depth and numbers.

``orjson`` refuses nesting deeper than 1024 and numbers beyond a double's range; what it refuses
only because of ``NaN``/``Infinity`` literals (which Python's writer emits) goes to the standard
library's parser, whose recursion and integer-size errors are caught here too. Every failure is a
:class:`~roost.errors.UserError` naming ``where``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from roost.errors import UserError


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # a literal beyond a double's range (1e400), not Python's own "Infinity"
        raise ValueError(f"number {text[:20]} is infinity when parsed as double")
    return value


def parse_json(raw: bytes | str, where: str, remedy: str) -> Any:
    """The JSON value in ``raw``; a UserError ``<where>: not valid JSON (...); <remedy>`` otherwise."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first = str(exc)
    try:
        return json.loads(raw, parse_float=_finite)
    except (ValueError, RecursionError, UnicodeDecodeError):
        pass
    reason = first.split(":")[0] if first else "malformed"
    raise UserError(f"{where}: not valid JSON ({reason}); {remedy}")


def parse_object(raw: bytes | str, where: str, remedy: str) -> dict[str, Any]:
    """The JSON object in ``raw`` (a UserError when it is not valid JSON or not an object)."""
    obj = parse_json(raw, where, remedy)
    if not isinstance(obj, dict):
        raise UserError(f"{where}: must be a JSON object, got {type(obj).__name__}; {remedy}")
    return obj
