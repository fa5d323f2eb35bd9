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

import urllib.parse
from pathlib import Path

from roost.errors import UserError
from roost.locations import StoreLocation, parse_store_location
from roost.settings import ROOST_RESULTS_STORE, ROOST_RESULTS_STORE_CREDENTIALS, results_dir
from roost.store.credentials import StoreCredentials
from roost.store.objects import LocalStore, ObjectStore

STORE_ENV = ROOST_RESULTS_STORE
CREDENTIALS_ENV = ROOST_RESULTS_STORE_CREDENTIALS


def parse_store_url(url: str, field: str = STORE_ENV) -> StoreLocation:
    """``url`` as a store location (``roost.locations.parse_store_location``); a UserError naming ``field``."""
    return parse_store_location(url, field)


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
