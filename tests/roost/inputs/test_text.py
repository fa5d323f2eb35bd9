"""roost.inputs.text: what a message may echo of an outside value."""

from __future__ import annotations

from roost.inputs.text import one_line, redact_url, shown


def test_control_characters_are_escaped_so_a_message_stays_one_line() -> None:
    assert one_line("a\nroost: error: forged\r\x1b[31m\t\x00") == "a\\nroost: error: forged\\r\\x1b[31m\\t\\x00"
    assert one_line("caf\u00e9 \u2028") == "caf\u00e9 \\u2028"


def test_long_values_are_cut_and_say_how_much() -> None:
    out = shown("x" * 5000, 100)
    assert len(out) < 130 and out.endswith("(4,940 more characters)")
    assert shown("short") == "short"


def test_a_url_password_is_never_shown() -> None:
    assert redact_url("http://user:pw@host:8000/v1") == "http://user:***@host:8000/v1"
    assert redact_url("s3://AKIA:secret@bucket/prefix") == "s3://AKIA:***@bucket/prefix"
    assert redact_url("https://token@host/x") == "https://***@host/x"
    assert redact_url("http://host:8000") == "http://host:8000"
    assert "pw" not in redact_url("http://u:pw@[::1")  # a URL that does not parse still loses its userinfo
