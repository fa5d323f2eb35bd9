"""Who may read the gateway's ``/metrics`` and the details of its ``/health``.

``/metrics`` names every gateway key and its traffic; ``/health``'s details list the models, the key
count and the backends. The gateway listens on every address (the tailnet, the LAN), so these are
not served to whoever reaches its port:

- with a metrics token (``ROOST_GATEWAY_METRICS_TOKEN``, or ``roost gateway serve --metrics-token-file``):
  every client, this host's included, must send ``Authorization: Bearer <token>`` (compared with
  :func:`hmac.compare_digest`); anything else is a 401;
- without one: only clients on a loopback address (127.0.0.0/8, ``::1``, ``::ffff:127.x``) are
  served, which is how ``roost monitor up``'s Prometheus (host networking) scrapes it; any other
  client gets a 403 saying so. The address is the one uvicorn gives (``scope["client"]``): a reverse
  proxy on this host that passes no ``X-Forwarded-For`` (uvicorn trusts it from 127.0.0.1 only) makes
  every client look local, so such a setup wants the token.

``/health`` answers everyone ``{"status": "ok"}`` (a remote liveness probe works) and adds its
details only for a client :func:`metrics_access` allows. The decision is pure (:func:`metrics_access`);
:func:`load_token` reads the token where ``serve`` gets it.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from pathlib import Path
from typing import Literal

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import Scope

from roost.errors import UserError
from roost.gateway.keys import bearer_token
from roost.gateway.metering import error_body
from roost.settings import ROOST_GATEWAY_METRICS_TOKEN

TOKEN_ENV = ROOST_GATEWAY_METRICS_TOKEN
TOKEN_FLAG = "--metrics-token-file"
TOKEN_RE = re.compile(r"[\x21-\x7e]{16,1024}")
"""A token: 16 to 1024 printable ASCII characters, no spaces (it travels in an HTTP header)."""
MAX_TOKEN_FILE = 64 * 1024

Access = Literal["allow", "unauthorized", "forbidden"]


def is_loopback(host: str | None) -> bool:
    """Is ``host`` (an ASGI ``scope["client"]`` address) a loopback address? 127.0.0.0/8, ``::1``,
    and IPv4 loopback mapped into IPv6 (``::ffff:127.0.0.1``); a name or nothing is not."""
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def same_token(given: str, token: SecretStr) -> bool:
    """Constant-time comparison of a presented token with the configured one."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               token.get_secret_value().encode("utf-8", "surrogatepass"))


def metrics_access(client_host: str | None, authorization: str | None, token: SecretStr | None) -> Access:
    """May this client read ``/metrics`` (and ``/health``'s details)? ``client_host``: the client's
    address (``scope["client"][0]``, None when unknown); ``authorization``: its ``Authorization`` header."""
    if token is not None:
        given = bearer_token(authorization)
        return "allow" if given is not None and same_token(given, token) else "unauthorized"
    return "allow" if is_loopback(client_host) else "forbidden"


def scope_access(scope: Scope, token: SecretStr | None) -> Access:
    """:func:`metrics_access` for an ASGI request's ``scope`` (its ``client`` and headers)."""
    client = scope.get("client")
    return metrics_access(client[0] if client else None, Headers(scope=scope).get("authorization"), token)


def refusal(access: Access) -> tuple[int, bytes, dict[str, str]]:
    """Status, OpenAI-style error body and headers of a refused ``/metrics`` (nothing about the gateway)."""
    if access == "unauthorized":
        return 401, error_body("missing or invalid metrics token: send `Authorization: Bearer <metrics token>`",
                               kind="authentication_error", code="invalid_metrics_token"), {"www-authenticate": "Bearer"}
    return 403, error_body(f"the gateway's metrics are served to this host only unless {TOKEN_ENV} is set on the "
                           "gateway (then to clients that send it as a bearer token)",
                           kind="permission_error", code="metrics_local_only"), {}


def check_token(value: str, source: str) -> SecretStr:
    """``value`` (surrounding whitespace and a final newline dropped) as the metrics token, or a
    UserError naming ``source`` (never the value)."""
    text = value.strip()
    if not TOKEN_RE.fullmatch(text):
        raise UserError(f"{source}: the metrics token must be 16-1024 printable ASCII characters without spaces "
                        "(e.g. `openssl rand -hex 32`)")
    return SecretStr(text)


def load_token(env_value: str | None, token_file: Path | None) -> SecretStr | None:
    """The metrics token ``serve`` runs with: ``ROOST_GATEWAY_METRICS_TOKEN`` (``env_value``), or the
    file given with ``--metrics-token-file`` (a regular file, read by :mod:`roost.inputs.files`);
    None when neither is set. Both at once is refused: which one applies would be a guess."""
    from roost.inputs.files import read_regular
    from roost.inputs.text import shown

    if env_value and token_file is not None:
        raise UserError(f"{TOKEN_FLAG} and {TOKEN_ENV} are both set: give the metrics token one way")
    if token_file is not None:
        try:
            data = read_regular(token_file, limit=MAX_TOKEN_FILE, what="the metrics token file",
                                remedy="give a file holding the token")
        except UserError as exc:
            raise UserError(f"{TOKEN_FLAG} {exc}") from None
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            text = "\x00"  # not a token: check_token refuses it
        return check_token(text, f"{TOKEN_FLAG} {shown(str(token_file))}")
    if env_value:
        return check_token(env_value, TOKEN_ENV)
    return None
