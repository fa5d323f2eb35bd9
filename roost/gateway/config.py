"""The gateway's settings: its limits and timeouts, the trusted front end's header, who may read
``/metrics`` and how many forwarded users it labels (``roost gateway serve``'s options fill them in)."""

from __future__ import annotations

import os
import socket

from pydantic import BaseModel, Field, SecretStr

from roost.gateway.metrics import DEFAULT_METRICS_USERS


class GatewayConfig(BaseModel):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0, description="Largest request body accepted (413 above).")
    body_timeout_s: float = Field(default=30.0, gt=0, description="Time a client has to send its whole body (408).")
    client_timeout_s: float = Field(default=60.0, gt=0,
                                    description="A client that reads nothing for this long is cut off.")
    upstream_timeout_s: float = Field(default=900.0, gt=0,
                                      description="Longest silence from a backend (between bytes) before the request fails.")
    connect_timeout_s: float = Field(default=3.0, gt=0)
    commit_timeout_s: float = Field(default=10.0, gt=0,
                                    description="How long a completed request waits for its usage row's commit.")
    key_refresh_s: float = Field(default=1.0, gt=0, description="Revocations take effect within this time.")
    tokenize_after_s: float = Field(
        default=0.0, ge=0, description="When the prompt is counted by /tokenize: 0 at request start; > 0 only when "
        "the backend's own count has not arrived that long after the request was sent (and always, late, for a "
        "request that ends without it).")
    trusted_user_header: str = Field(default="x-openwebui-user-email",
                                     description="The header a trusted front end forwards its user in.")
    metrics_users: int = Field(default=DEFAULT_METRICS_USERS, ge=0, le=100_000, description="Distinct forwarded users labelled by "
                               "name in /metrics per process (later ones: `other`; 0: none, no e-mail in metrics).")
    instance: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    metrics_token: SecretStr | None = Field(
        default=None, description="Bearer token every client of /metrics (and /health's details) must send; "
        "None: served to loopback clients only (roost.gateway.access).")

    @property
    def trusted_user_header_bytes(self) -> bytes:
        """The trusted header's name as ASGI gives it (lower-case bytes)."""
        return self.trusted_user_header.lower().encode("latin-1")
