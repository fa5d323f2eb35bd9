"""Secrets kept out of the HTTP client's log lines: the token and the endpoint's password.

At DEBUG, httpcore logs every answer's headers, which a server may fill with the request's own
``Authorization`` header. Each open :class:`~roost.hub._session.HubSession` registers its secrets
(:func:`guard_logs`, counted, so two clients with one token do not unregister each other) and a
filter on each of the HTTP client's loggers replaces them by ``***`` (:func:`release_logs` on close).
"""

from __future__ import annotations

import logging
import threading


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every secret in it replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


_LIVE_SECRETS: dict[str, int] = {}
_SECRETS_LOCK = threading.Lock()
_HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy", "hpack.hpack")
"""The HTTP client's loggers: at DEBUG, httpcore logs every answer's headers, which a server may fill
with the request's own ``Authorization`` header."""


class _ScrubSecrets(logging.Filter):
    """Replace the token and endpoint password of every open :class:`HubClient` in the HTTP client's log
    records (a filter on each logger that creates them: a parent's filter would not see them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _SECRETS_LOCK:
            secrets = list(_LIVE_SECRETS)
        if secrets:
            text = record.getMessage()
            clean = scrub(text, *secrets)
            if clean != text:
                record.msg, record.args = clean, None
        return True


def guard_logs(*secrets: str | None) -> None:
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ScrubSecrets) for f in logger.filters):
            logger.addFilter(_ScrubSecrets())
    with _SECRETS_LOCK:
        for s in secrets:
            if s:
                _LIVE_SECRETS[s] = _LIVE_SECRETS.get(s, 0) + 1


def release_logs(*secrets: str | None) -> None:
    with _SECRETS_LOCK:
        for s in secrets:
            if s and s in _LIVE_SECRETS:
                _LIVE_SECRETS[s] -= 1
                if not _LIVE_SECRETS[s]:
                    del _LIVE_SECRETS[s]

