"""URLs roost is given to ask over HTTP (a Hub endpoint, a server to benchmark): one check of what
makes one unusable, each caller naming the setting and the remedy."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from roost.inputs.text import shown


def http_url_problem(url: str, kind: str) -> str | None:
    """Why ``url`` cannot be asked over HTTP, or None: whitespace or a control character, a port that
    is not 1..65535, no or another scheme than ``http``/``https``, no host, or what httpx itself refuses
    (a hostname IDNA cannot encode...). ``kind`` names the URLs in the scheme's reason (``Hub``)."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return "it holds whitespace or a control character"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        why = shown(str(exc), 80)
        return f"the port is not a number in 1..65535: {why}" if "port" in why.lower() else \
            f"it does not parse as a URL: {why.lower()}"
    if not parts.scheme:
        return "no http:// or https:// scheme"
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {shown(parts.scheme, 20)!r}; only http:// and https:// are {kind} URLs"
    if not parts.hostname:
        return "no host"
    if port == 0:
        return "port 0; a port is a number in 1..65535"
    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        return f"httpx refuses it: {shown(str(exc), 100)}"
    return None
