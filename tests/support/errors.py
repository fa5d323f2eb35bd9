"""The one-line error: what roost says about unusable input, and how the tests hold it to that.

On the command line: exit code 2 (1 for a fault of the world, e.g. a Hub that does not answer), exactly one
line on stderr, starting ``roost: error: ``, and no traceback. In the code: an exception whose message is one
line (control characters escaped, as ``roost.inputs.text.one_line`` does) and not a page long.
"""

from __future__ import annotations

PREFIX = "roost: error: "


def assert_one_line_error(code: int, err: str, *fragments: str, want_code: int = 2, exact: bool = False) -> str:
    """``code`` is ``want_code`` and ``err`` one ``roost: error:`` line holding every fragment, with no traceback;
    the line. ``exact``: nothing around it either (not even a blank line), just the line and its newline."""
    assert code == want_code, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), err
    assert "Traceback" not in err, err
    if exact:
        assert err == lines[0] + "\n", repr(err)
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def assert_one_line_message(error: BaseException | str, *fragments: str, max_chars: int | None = None,
                            starts: str = "") -> str:
    """The message of ``error`` is one line as ``roost.inputs.text.one_line`` makes it (nothing left to escape),
    not empty, shorter than ``max_chars``, starting with ``starts`` and holding every fragment; the message."""
    from roost.inputs.text import one_line

    message = str(error)
    assert message and one_line(message) == message, f"not one line: {message!r}"
    if max_chars is not None:
        assert len(message) < max_chars, f"{len(message)}-character message"
    assert message.startswith(starts), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message
