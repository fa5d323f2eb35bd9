"""Keeping known secrets out of text that may reach a terminal, a log, a record or a message.

A server's error may echo the request it got: its headers as they are, URL-encoded, JSON-escaped or
base64-encoded (a header dump, a ``Basic`` credential). :func:`redact` removes a known secret in each
of those forms, and any credential an echoed ``Authorization`` value carries (a ``Bearer`` token, a
``Basic`` user:password pair), known to the caller or not (a URL's userinfo becomes one).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import quote, quote_plus, unquote

MASK = "***"
"""What a secret is replaced with."""

MIN_ENCODED = 12
"""The shortest encoded piece of a secret that is masked (shorter ones could be anything)."""

SHORT = 8
"""A secret shorter than this is masked where it stands as a word of its own only: masked inside
other words, a short key (``VLLM_API_KEY=test``) would garble every text it is removed from
(``latest`` -> ``la***``, a JSON field ``tokens`` -> ``to***ens`` for the key ``k``)."""

_SEP = r"(?:[ \t]+|%20|\+)"
_BEARER = re.compile(rf"(?<![A-Za-z])(Bearer{_SEP})([A-Za-z0-9._~+/=%-]{{8,}})")
_BASIC = re.compile(rf"(?<![A-Za-z])(Basic{_SEP})([A-Za-z0-9+/=_%-]{{8,}})")


def encoded_forms(secret: str) -> list[str]:
    """The forms ``secret`` takes inside an encoded text: URL-encoded, form-encoded, JSON-escaped, and
    base64 (standard and URL-safe alphabets) at each of the three alignments it can have in a longer
    encoded text (the 4-character groups made of its bytes only); each different from ``secret``."""
    raw = secret.encode("utf-8", "surrogatepass")
    out = [quote(secret, safe=""), quote_plus(secret, safe=""), json.dumps(secret)[1:-1]]
    for k in (0, 1, 2):
        encoded = base64.b64encode(b"\0" * k + raw).decode()
        core = encoded[4 if k else 0:(k + len(raw)) // 3 * 4]  # the groups nothing around it changes
        if len(core) >= MIN_ENCODED:
            out += [core, core.replace("+", "-").replace("/", "_")]
    return [f for i, f in enumerate(out) if f != secret and f not in out[:i]]


def _is_basic_credential(token: str) -> bool:
    """Does ``token`` (after ``Basic``) decode as base64 to a ``user:password`` pair?"""
    raw = unquote(token).rstrip("=")
    raw += "=" * (-len(raw) % 4)
    for alt in (None, b"-_"):
        try:
            decoded = base64.b64decode(raw, altchars=alt, validate=True)
            text = decoded.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if ":" in text and text.isprintable():
            return True
    return False


def _credential(m: re.Match[str]) -> str:
    return m.group(1) + MASK


def _basic(m: re.Match[str]) -> str:
    return m.group(1) + MASK if _is_basic_credential(m.group(2)) else m.group(0)


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret (as it is and in its encoded forms, :func:`encoded_forms`; one shorter
    than :data:`SHORT` where it is a word of its own), a webhook URL's path, and the credential of any
    ``Bearer`` or ``Basic`` authorization it echoes replaced by :data:`MASK`."""
    for s in sorted(secrets, key=len, reverse=True):
        if not s:
            continue
        if len(s) < SHORT:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", MASK, text)
            continue
        text = text.replace(s, MASK)
        if "://" in s:  # a webhook URL: its path is the secret part; redact it on its own too
            path = s.split("://", 1)[1].partition("/")[2]
            if len(path) >= 8:
                text = text.replace(path, MASK)
        for form in sorted(encoded_forms(s), key=len, reverse=True):
            text = text.replace(form, MASK)
    if "Bearer" in text:
        text = _BEARER.sub(_credential, text)
    if "Basic" in text:
        text = _BASIC.sub(_basic, text)
    return text
