"""Which Hub, with which token, and how long to wait for it: checked before any request is made.

huggingface_hub is imported only where it is used (the stored token): importing it parses
``HF_ENDPOINT``, and an unusable value would fail there, before :func:`check_endpoint` could say why.

- :func:`resolve_endpoint` / :func:`resolve_token`: ``HF_ENDPOINT`` and ``HF_TOKEN`` (read at call
  time, through ``roost.settings``), else huggingface.co and the token ``hf auth login`` stored. Both
  are checked before any request: an endpoint that is not an ``http(s)://`` URL with a host (and a
  port in 1..65535) is a ``UserError`` naming the setting; a token with whitespace inside or control
  characters likewise (without showing it).
- :func:`hub_timeout`: every request is bounded in time: 10 s to connect, and 30 s
  (``HF_HUB_DOWNLOAD_TIMEOUT`` when set) for each read, 10 s for the first answer of an endpoint
  (:data:`FIRST_ANSWER_TIMEOUT_S`), so a server that accepts and never answers (3 tries, ~32 s), or
  a body that stalls midway, is a timeout, never a hang.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

import httpx

from roost.errors import UserError
from roost.inputs.text import redact_url, shown
from roost.inputs.urls import http_url_problem
from roost.settings import HF_ENDPOINT, environment, hub_token_env

DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
"""Seconds a request waits for the next bytes (an answer's head, or more of its body) before it is a
timeout; ``HF_HUB_DOWNLOAD_TIMEOUT`` (huggingface_hub's own setting) overrides it."""
FIRST_ANSWER_TIMEOUT_S = 10.0
"""Seconds an API call waits for an endpoint that has not answered yet (huggingface_hub's metadata timeout)."""
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


def resolve_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT`` read now (not at import), else huggingface.co; checked by
    :func:`check_endpoint` before any request is made."""
    if endpoint:
        return check_endpoint(endpoint, "the Hub endpoint")
    env = environment().hf_endpoint
    if env:
        return check_endpoint(env, HF_ENDPOINT)
    return DEFAULT_ENDPOINT


def check_endpoint(value: str, source: str = HF_ENDPOINT) -> str:
    """``value`` without a trailing ``/`` when it is a URL roost can ask: ``http`` or ``https``, a host,
    a port in 1..65535 if any, no query or fragment, and one httpx accepts; a UserError naming
    ``source`` (``HF_ENDPOINT``) and saying why otherwise. A password in it is never shown."""
    unset = ", or unset it to use https://huggingface.co" if source == HF_ENDPOINT else ""
    remedy = f"set it to the Hub's base URL, e.g. https://huggingface.co or http://127.0.0.1:8090{unset}"

    def bad(why: str) -> UserError:
        return UserError(f"{source} {shown(redact_url(value), 200)!r} is not a usable Hub URL ({why}): {remedy}")

    problem = http_url_problem(value, "Hub")
    if problem is not None:
        raise bad(problem)
    parts = urlsplit(value)
    if parts.query or parts.fragment:
        raise bad("it has a query or a fragment; the base URL has neither")
    return value.rstrip("/")


def resolve_token(token: str | None = None) -> str | None:
    """``token``, else ``HF_TOKEN``, else ``HUGGING_FACE_HUB_TOKEN``, else the token ``hf auth login`` stored;
    None for anonymous access (the tail of the one precedence, ``blocks.secrets.hub_token``).

    Surrounding whitespace is dropped (a token read from a file keeps its newline); a token with
    whitespace inside, control or non-ASCII characters is a UserError that does not show it."""
    if token:
        value, source = token, "the Hugging Face token given"
    elif (env_token := hub_token_env()) is not None:
        value, source = env_token
    else:
        from huggingface_hub import get_token  # here: huggingface_hub reads HF_ENDPOINT when imported

        value, source = get_token() or "", "the token stored by `hf auth login`"
    value = value.strip()
    if not value:
        return None
    if not _TOKEN_CHARS.fullmatch(value):
        raise UserError(
            f"{source} holds whitespace, a control character or a non-ASCII character, which no Hugging Face "
            "token has (the value is not shown): set it to the token alone"
        )
    return value


def hub_timeout() -> httpx.Timeout:
    """The timeouts of every Hub request: 10 s to connect, 30 s (``HF_HUB_DOWNLOAD_TIMEOUT``) per read."""
    raw = (environment().hf_hub_download_timeout or "").strip()
    read = READ_TIMEOUT_S
    if raw:
        try:
            read = float(raw)
        except ValueError:
            read = math.nan
        if not (math.isfinite(read) and 0 < read <= 3600):
            raise UserError(
                f"HF_HUB_DOWNLOAD_TIMEOUT={shown(raw, 40)!r} is not a number of seconds in (0, 3600]: set it "
                f"to e.g. 30, or unset it ({READ_TIMEOUT_S:.0f} s)"
            )
    return httpx.Timeout(read, connect=min(CONNECT_TIMEOUT_S, read))

