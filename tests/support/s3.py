"""An S3-compatible server on loopback for the shared-store tests: moto's server mode (``moto[server]``),
named as what it is, a stand-in for S3. It speaks S3's REST API (signed requests, ``ListObjectsV2``
with ``start-after``, ranged GETs, ``If-None-Match: *`` conditional PUTs answered 412), which is all the
results store uses. It runs as its own process (its request log in a file), so a test can stop it
(the store "unreachable") and workers in other processes reach it like a real endpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from pydantic import SecretStr

from roost.net import free_port
from roost.store.location import StoreCredentials
from support.processes import stop_group
from support.wait import http_ok, wait_started

ACCESS_KEY = "roost-test-access"
SECRET_KEY = "roost-test-secret-" + "s3" * 8
"""What the stand-in accepts (moto checks the signature's form, not the key); tests grep for it in logs."""


class MotoS3:
    """``with MotoS3(tmp) as s3: s3.create_bucket("team"); s3.credentials()``."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / f"moto-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> MotoS3:
        self.directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        wait_started("moto's server", self.proc, http_ok(f"{self.url}/moto-api/", below=500), log=self.log,
                     timeout_s=timeout_s, every_s=0.2)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, 20)
        self.proc = None

    def restart(self) -> None:
        """Start again on the same port (moto keeps its data in memory: a restart empties it)."""
        self.stop()
        self.start()

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.url, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                     region_name="us-east-1").create_bucket(Bucket=name)

    def credentials(self) -> StoreCredentials:
        return StoreCredentials(access_key_id=ACCESS_KEY, secret_access_key=SecretStr(SECRET_KEY),
                                endpoint_url=self.url, region="us-east-1", allow_http=True)

    def env(self) -> dict[str, str]:
        """The AWS_* variables a process (a worker, a shell) reaches this store with."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ENDPOINT_URL": self.url,
                "AWS_REGION": "us-east-1"}

    def __enter__(self) -> MotoS3:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
