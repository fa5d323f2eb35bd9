"""Which results store a run writes to and a reader reads: parsed from a URL, opened with credentials.

A store is named by a URL: a directory (``/srv/roost-results``, ``./results``, ``file:///mnt/team/results``:
on this machine, or a filesystem the team's workers share) or an S3-compatible bucket and prefix
(``s3://roost-team/results``). It is set, first match wins:

1. ``ROOST_RESULTS_STORE`` in the environment (and ``ROOST_RESULTS_STORE_CREDENTIALS``: the name of a
   Roost Store Credentials block, ``blocks/store.py``);
2. the host block's ``results_store`` (and ``results_store_credentials``);
3. the local results directory (``ROOST_RESULTS_DIR``, default ``./results``).

Credentials never go in the URL: a URL with a user or password (``s3://KEY:SECRET@bucket``) is refused,
so a secret cannot end up in a record, a log line or a Prefect parameter. For ``s3://`` they come from
the credentials block, else from the standard environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from roost.errors import UserError
from roost.settings import results_dir
from roost.store.objects import LocalStore, ObjectStore

STORE_ENV = "ROOST_RESULTS_STORE"
CREDENTIALS_ENV = "ROOST_RESULTS_STORE_CREDENTIALS"


class StoreCredentials(BaseModel):
    """How to reach an S3-compatible store (the fields of the Roost Store Credentials block)."""

    access_key_id: str = ""
    secret_access_key: SecretStr = SecretStr("")
    session_token: SecretStr | None = None
    endpoint_url: str = Field(default="", description="S3-compatible endpoint (MinIO, R2, Ceph...); empty: AWS.")
    region: str = ""
    allow_http: bool = Field(default=False, description="Allow a plain-HTTP endpoint (a store on a private network).")

    @classmethod
    def from_env(cls) -> StoreCredentials | None:
        """The standard AWS variables, when any is set."""
        env = os.environ
        key, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL", "")
        if not (key or secret or endpoint):
            return None
        token = env.get("AWS_SESSION_TOKEN")
        return cls(access_key_id=key, secret_access_key=SecretStr(secret),
                   session_token=SecretStr(token) if token else None, endpoint_url=endpoint,
                   region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION", ""),
                   allow_http=endpoint.startswith("http://"))


class StoreLocation(BaseModel):
    """A parsed store URL."""

    kind: Literal["dir", "s3"]
    path: Path | None = None
    bucket: str = ""
    prefix: str = ""


def parse_store_url(url: str, field: str = STORE_ENV) -> StoreLocation:
    """``url`` as a store location; a UserError naming ``field`` when it cannot be one."""
    text = url.strip()
    if not text:
        raise UserError(f"{field} is empty: give a directory or s3://BUCKET/PREFIX")
    if "://" not in text:
        return StoreLocation(kind="dir", path=Path(text).expanduser().resolve())
    parts = urllib.parse.urlsplit(text)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UserError(f"{field}: credentials never go in the store URL; save them in a Roost Store Credentials "
                        "block (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and give the URL without them")
    if parts.query or parts.fragment:
        raise UserError(f"{field}: a store URL takes no query or fragment (s3://BUCKET/PREFIX)")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UserError(f"{field}: file URLs name a local path (file:///PATH), not host {parts.netloc!r}")
        return StoreLocation(kind="dir", path=Path(urllib.parse.unquote(parts.path)).resolve())
    if parts.scheme == "s3":
        bucket = parts.netloc
        if not bucket or not all(c.isalnum() or c in "-._" for c in bucket):
            raise UserError(f"{field}: {bucket!r} is not a bucket name (s3://BUCKET/PREFIX)")
        prefix = parts.path.strip("/")
        if ".." in prefix.split("/"):
            raise UserError(f"{field}: the prefix may not contain '..'")
        return StoreLocation(kind="s3", bucket=bucket, prefix=prefix)
    raise UserError(f"{field}: unsupported store scheme {parts.scheme!r}: use a directory or s3://BUCKET/PREFIX")


def open_store(url: str | Path | None = None, credentials: StoreCredentials | None = None,
               field: str = STORE_ENV) -> ObjectStore:
    """The store at ``url`` (a path or URL); None: the local results directory."""
    if url is None or (isinstance(url, str) and not url.strip()):
        return LocalStore(results_dir())
    if isinstance(url, Path):
        return LocalStore(url)
    loc = parse_store_url(url, field)
    if loc.kind == "dir":
        assert loc.path is not None
        if loc.path.exists() and not loc.path.is_dir():
            raise UserError(f"{field} {loc.path}: not a directory; point it at a roost results directory")
        return LocalStore(loc.path)
    from roost.store.s3 import S3Store

    creds = credentials if credentials is not None else StoreCredentials.from_env()
    if creds is not None and creds.endpoint_url:
        endpoint = urllib.parse.urlsplit(creds.endpoint_url)
        if endpoint.username is not None or endpoint.password is not None or "@" in endpoint.netloc:
            raise UserError(f"{field}: the credentials' endpoint URL carries a user or password; give the endpoint "
                            "without them (the keys go in access_key_id and secret_access_key)")
    return S3Store(loc.bucket, loc.prefix, creds)
