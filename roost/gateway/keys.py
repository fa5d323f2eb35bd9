"""Gateway keys: their format, how they are stored and compared, and who they name (pure).

A key is ``rk-`` and 43 URL-safe characters (256 random bits). The database keeps only its SHA-256
(a key this random needs no slow hash: nothing can be guessed from the digest), looked up by digest
and compared with :func:`hmac.compare_digest`. A key is shown once, when it is made.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata
from typing import Literal
from urllib.parse import unquote_to_bytes

from pydantic import BaseModel, Field

from roost.errors import UserError

KeyKind = Literal["user", "device", "app"]
KINDS: tuple[KeyKind, ...] = ("user", "device", "app")
PREFIX = "rk-"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")


class Principal(BaseModel):
    """Who a valid key names (what a request is attributed to)."""

    name: str
    kind: KeyKind
    trusted: bool = Field(default=False, description="May forward its own user's e-mail in the trusted header.")


def new_key() -> str:
    """A fresh key (shown once)."""
    return PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    """The stored form of ``key``: its SHA-256, hex."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def same_digest(a: str, b: str) -> bool:
    """Constant-time comparison of two digests."""
    return hmac.compare_digest(a.encode(), b.encode())


def check_name(name: str, field: str = "NAME") -> str:
    """A key name as given, or a UserError saying what a name may contain."""
    if not NAME_RE.match(name):
        raise UserError(f"{field} {name[:60]!r}: a key name is 1-128 letters, digits or . _ @ + - "
                        "(starting with a letter or digit)")
    return name


def check_kind(kind: str) -> KeyKind:
    if kind not in KINDS:
        raise UserError(f"--kind {kind[:30]!r}: use one of {', '.join(KINDS)}")
    return kind  # type: ignore[return-value]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


_EXT_VALUE = re.compile(rb"(?i)utf-8'[a-z0-9-]*'((?:%[0-9a-f]{2}|[a-z0-9!#$&+.^_`|~-])*)")
MAX_USER = 320
"""Characters of a forwarded user kept (an e-mail address is at most 320)."""


def forwarded_user(raw: bytes | None) -> str | None:
    """The user a trusted front end names in its header, as text: an RFC 8187 ``UTF-8''...`` value
    percent-decoded, else the raw bytes as UTF-8 (aiohttp, Open WebUI's client, sends them so) or, when
    they are not UTF-8, as Latin-1; NFC-normalized so one person is one string however it was
    composed, control characters dropped, at most :data:`MAX_USER` characters. None when empty."""
    if raw is None:
        return None
    value = raw.strip()
    ext = _EXT_VALUE.fullmatch(value)
    if ext is not None:
        value = unquote_to_bytes(ext.group(1))
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = value.decode("latin-1")
    text = "".join(ch for ch in unicodedata.normalize("NFC", text) if unicodedata.category(ch) != "Cc").strip()
    return text[:MAX_USER] or None
