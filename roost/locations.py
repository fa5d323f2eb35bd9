"""Where results go, as a user writes it: the results store's URL and the results site's URL, parsed
and checked (plain parsing, no I/O: a host profile validates its fields with these, and the store
(``roost.store.location``) and the report (``roost.report.publish``) use what they return).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from roost.errors import UserError


class StoreLocation(BaseModel):
    """A parsed store URL."""

    kind: Literal["dir", "s3"]
    path: Path | None = None
    bucket: str = ""
    prefix: str = ""


def parse_store_location(url: str, field: str) -> StoreLocation:
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


def validate_results_url(url: str, field: str) -> str:
    """``url`` as a base URL ending in ``/``, or ``""`` when empty.

    An ``http``/``https`` URL with a host and no user name, password, query or fragment; anything
    else is a UserError naming ``field``. The value is not echoed when it carries credentials.
    """
    url = url.strip()
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise UserError(f"{field}: not a valid URL ({exc}); expected e.g. http://worker.tailnet:8765/") from None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UserError(f"{field}: must not contain a user name or password; give http(s)://host:port/ only")
    if parts.scheme not in ("http", "https"):
        raise UserError(f"{field} {url!r}: must be an http:// or https:// URL, e.g. http://worker.tailnet:8765/")
    if not parts.hostname:
        raise UserError(f"{field} {url!r}: has no host name, e.g. http://worker.tailnet:8765/")
    if parts.query or parts.fragment:
        raise UserError(f"{field} {url!r}: must not have a query or fragment")
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return f"{parts.scheme}://{parts.netloc}{path}"
