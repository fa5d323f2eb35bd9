"""What an error message may echo of an outside value.

A path or a value a user typed can hold a newline (which would split roost's one-line error in two),
terminal escape sequences, or thousands of characters; a URL can hold a password. :func:`shown`
makes any value safe to put in one line; :func:`redact_url` removes the userinfo's password.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_SHOWN = 300
"""Characters of one value a message echoes at most (the rest is elided, its length said)."""


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")


def one_line(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x1b``...): it prints as one line."""
    return _CONTROL.sub(_escape, text)


def shown(value: str, limit: int = MAX_SHOWN) -> str:
    """``value`` as a message echoes it: one line, at most ``limit`` characters (with the length elided)."""
    text = one_line(value)
    if len(text) > limit:
        keep = max(limit - 40, 20)
        return f"{text[:keep]}…({len(text) - keep:,} more characters)"
    return text


def redact_url(url: str) -> str:
    """``url`` with its userinfo's password replaced by ``***`` (``http://user:***@host/``); a value that
    does not parse as a URL is returned with anything before an ``@`` in its authority cut out."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return re.sub(r"//[^/@]*@", "//***@", url)
    if "@" not in netloc:
        return url
    userinfo, _, hostport = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}" if ":" in userinfo else f"***@{hostport}"))
