"""The results store on an S3-compatible object store (AWS S3, MinIO, R2, Ceph...), through ``obstore``.

Write-once is the store's own guarantee: every PUT carries ``If-None-Match: *`` (``mode="create"``),
so two workers writing the same key cannot both succeed and an existing object is never replaced
(S3 answers 412, raised as ``AlreadyStored``). A PUT is atomic: an object is visible only complete.

Every request is bounded (connect 5 s, whole request 30 s, at most 3 retries within 20 s), so a store
that does not answer fails the operation with ``StoreUnreachable`` in well under a minute instead of
hanging a run. Credentials come from :class:`roost.store.credentials.StoreCredentials` (a Prefect block
or the environment), never from the URL; error messages carry the URL and the key only.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from roost.secrets import redact
from roost.store.atomic import AlreadyStored
from roost.store.objects import MissingObject, ObjectInfo, ObjectStore, StoreError, StoreUnreachable

if TYPE_CHECKING:
    from roost.store.credentials import StoreCredentials

CONNECT_TIMEOUT_S = 5
REQUEST_TIMEOUT_S = 30
RETRIES = 3
RETRY_WINDOW_S = 20


class S3Store(ObjectStore):
    """``s3://bucket/prefix``: keys live under ``prefix/`` in ``bucket``."""

    def __init__(self, bucket: str, prefix: str, credentials: StoreCredentials | None = None, *,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 retries: int = RETRIES, retry_window_s: float = RETRY_WINDOW_S) -> None:
        from obstore.store import S3Store as _S3

        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.endpoint_url = credentials.endpoint_url if credentials is not None else ""
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        config: dict[str, Any] = {}
        self._secrets: list[str] = []
        if credentials is not None:
            if credentials.access_key_id:
                config["access_key_id"] = credentials.access_key_id
            secret = credentials.secret_access_key.get_secret_value()
            if secret:
                config["secret_access_key"] = secret
                self._secrets.append(secret)
            token = credentials.session_token.get_secret_value() if credentials.session_token else ""
            if token:
                config["session_token"] = token
                self._secrets.append(token)
            if credentials.endpoint_url:
                config["endpoint"] = credentials.endpoint_url
            if credentials.region:
                config["region"] = credentials.region
        client: dict[str, Any] = {"timeout": dt.timedelta(seconds=request_timeout_s),
                                  "connect_timeout": dt.timedelta(seconds=connect_timeout_s)}
        if credentials is not None and credentials.allow_http:
            client["allow_http"] = True
        retry: dict[str, Any] = {"max_retries": retries, "retry_timeout": dt.timedelta(seconds=retry_window_s)}
        try:
            self._store = _S3(bucket, prefix=self.prefix or None, config=config,  # type: ignore[arg-type]
                              client_options=client, retry_config=retry)  # type: ignore[arg-type]
        except Exception as exc:  # obstore refuses a configuration (a bad endpoint URL, region...)
            raise StoreError(f"results store {self.url}: {self._clean(exc)}") from None

    def _clean(self, exc: BaseException) -> str:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return redact(text, self._secrets)[:400]

    def _fail(self, exc: Exception, key: str, writing: bool = False) -> Exception:
        """obstore's exception as roost's (the original is dropped: it may carry request details)."""
        from obstore import exceptions as e

        where = f"{self.url}/{key}" if key else self.url
        message = self._clean(exc)
        if "NoSuchBucket" in str(exc) or (writing and isinstance(exc, e.NotFoundError | FileNotFoundError)):
            return StoreError(f"results store {self.url}: bucket {self.bucket!r} does not exist; create it or fix the URL")
        if isinstance(exc, e.NotFoundError | FileNotFoundError):  # obstore raises the builtin on a GET
            return MissingObject(f"{where}: no such object in the results store")
        if isinstance(exc, e.AlreadyExistsError | e.PreconditionError | FileExistsError):
            return AlreadyStored(f"{where} already exists; the results store never overwrites an object")
        if isinstance(exc, e.PermissionDeniedError | e.UnauthenticatedError | PermissionError):
            return StoreError(f"results store {self.url} refused the credentials ({type(exc).__name__}): check the "
                              "Roost Store Credentials block (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
        return StoreUnreachable(f"results store {self.url} did not answer ({type(exc).__name__}): {message}")

    def put_new(self, key: str, data: bytes) -> None:
        import obstore

        try:
            obstore.put(self._store, key, data, mode="create")
        except Exception as exc:
            failure = self._fail(exc, key, writing=True)
            if isinstance(failure, AlreadyStored) and self._holds(key, data):
                return  # a retried PUT whose first attempt landed (the client retries timeouts): stored once
            raise failure from None

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds exactly ``data``."""
        try:
            return self.get(key) == data
        except StoreError:
            return False

    def get(self, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self._store, key).bytes())
        except Exception as exc:
            raise self._fail(exc, key) from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        import obstore

        try:
            return bytes(obstore.get_range(self._store, key, start=start, end=end))
        except Exception as exc:
            raise self._fail(exc, key) from None

    def list_objects(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
        import obstore

        out: list[ObjectInfo] = []
        try:
            # obstore lists whole "directories" only: the rest of the prefix filters the names
            folder = prefix.rpartition("/")[0]
            stream = obstore.list(self._store, prefix=folder or None, offset=start_after, chunk_size=1000)
            for batch in stream:
                out += [ObjectInfo(m["path"], int(m["size"])) for m in batch
                        if m["path"].startswith(prefix) and not m["path"].rpartition("/")[2].startswith(".")]
        except Exception as exc:
            raise self._fail(exc, prefix) from None
        out.sort(key=lambda o: o.key)
        return out

    def list_dirs(self, prefix: str) -> list[str]:
        import obstore

        try:
            found = obstore.list_with_delimiter(self._store, prefix=prefix.rstrip("/") or None)
        except Exception as exc:
            raise self._fail(exc, prefix) from None
        return sorted(p.rstrip("/").rpartition("/")[2] for p in found["common_prefixes"])
