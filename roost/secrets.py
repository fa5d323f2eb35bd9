"""Keeping known secrets out of text that may reach a terminal, a log, a record or a message."""

from __future__ import annotations

MASK = "***"
"""What a secret is replaced with."""


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret (and a webhook URL's path) replaced by :data:`MASK`."""
    for s in sorted(secrets, key=len, reverse=True):
        if not s:
            continue
        text = text.replace(s, MASK)
        if "://" in s:  # a webhook URL: its path is the secret part; redact it on its own too
            path = s.split("://", 1)[1].partition("/")[2]
            if len(path) >= 8:
                text = text.replace(path, MASK)
    return text
