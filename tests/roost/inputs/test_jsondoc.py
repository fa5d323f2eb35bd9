"""roost.inputs.jsondoc: JSON from outside parsed with bounded depth and numbers, errors one line."""

from __future__ import annotations

import math

import pytest

from roost.errors import UserError
from roost.inputs.jsondoc import parse_json, parse_object


@pytest.mark.parametrize("raw, reason", [
    (b"[" * 100_000 + b"]" * 100_000, "depth"),
    (b'{"a": ' + b"9" * 5000 + b"}", "number"),
    (b'{"a": 1e400}', "number"),
    (b"\xff\xfe", "UTF-8"),
    (b'{"a": ', ""),
])
def test_what_cannot_be_parsed_safely_is_a_user_error_naming_where(raw: bytes, reason: str) -> None:
    with pytest.raises(UserError, match=f"config.json: not valid JSON.*{reason}.*; re-download it") as info:
        parse_json(raw, "config.json", "re-download it")
    assert "\n" not in str(info.value)


def test_python_literals_that_writers_emit_are_read() -> None:
    assert math.isnan(parse_json(b'{"eps": NaN}', "x", "")["eps"])
    assert parse_json(b'{"n": 18446744073709551615}', "x", "") == {"n": 2**64 - 1}


def test_an_object_is_required_where_one_is_expected() -> None:
    with pytest.raises(UserError, match="must be a JSON object, got list"):
        parse_object(b"[1]", "index.json", "fix it")
