"""The answers the gateway writes itself, as raw ASGI: a whole response, a refusal before anything is
forwarded, its own failure, and the one log line of a bug (type and place, never a client's data)."""

from __future__ import annotations

import logging
import os

from starlette.types import Send

from roost.gateway.metering import error_body

log = logging.getLogger("roost.gateway")


class Refused(Exception):
    """A request refused before anything was forwarded."""

    def __init__(self, status: int, message: str, reason: str, *, kind: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.reason, self.kind, self.code, self.param = status, message, reason, kind, code, param
        self.close = close


async def respond(send: Send, status: int, body: bytes, *, close: bool = False,
                  content_type: bytes = b"application/json", extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """A whole response in two ASGI messages, its length declared (``close``: the connection is closed
    after it, as after a refusal whose body may not have been read)."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())] + (extra or [])
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def unauthorized() -> bytes:
    """The 401 body: the same for a missing, a wrong and a revoked key (none is told from another)."""
    return error_body("missing or invalid API key: send `Authorization: Bearer <your gateway key>`",
                      kind="authentication_error", code="invalid_api_key")


def gateway_error() -> bytes:
    """The body of the gateway's own failure (a bug), which says nothing of its cause."""
    return error_body("the gateway failed on this request; it was not billed as completed", kind="api_error",
                      code="gateway_error")


def log_failure(when: str, exc: BaseException) -> None:
    """One line for a bug met while handling a request: the exception's type and where it was raised
    (no message, no values: they may hold a client's data)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}" if tb is not None else "?"
    log.error("gateway error %s: %s at %s", when, type(exc).__name__, where)
