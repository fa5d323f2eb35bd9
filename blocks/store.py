"""``StoreCredentialsBlock`` (block type ``roost-store-credentials``, "Roost Store Credentials"): how the
workers and the team's shells reach an S3-compatible results store, and which store a run uses.

The store itself is named by a URL (``roost.store.location``): ``ROOST_RESULTS_STORE`` on the worker, else
the host block's ``results_store``, else the worker's results directory. The credentials for an
``s3://`` URL are the block named by ``ROOST_RESULTS_STORE_CREDENTIALS``, else by the host block's
``results_store_credentials``, else the worker's ``AWS_*`` environment. The secret key and session
token are Secret fields: the UI masks them and they are never logged, stored or put in a parameter.
"""

from __future__ import annotations

from typing import ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr, ValidationError

from roost.errors import UserError
from roost.hosts import HostProfile
from roost.settings import environment
from roost.store.credentials import StoreCredentials
from roost.store.location import STORE_ENV, open_store
from roost.store.objects import ObjectStore

CREDENTIALS_SLUG = "roost-store-credentials"


class StoreCredentialsBlock(Block):
    """Credentials of an S3-compatible bucket holding the team's results (AWS S3, MinIO, R2, Ceph...)."""

    _block_type_name: ClassVar[str | None] = "Roost Store Credentials"
    _block_type_slug: ClassVar[str | None] = CREDENTIALS_SLUG
    _description: ClassVar[str | None] = (
        "Access to the S3-compatible bucket of a shared roost results store (ROOST_RESULTS_STORE or a host's "
        "results_store, e.g. s3://roost-team/results). Name it in a host block's results_store_credentials or "
        "in ROOST_RESULTS_STORE_CREDENTIALS.")

    access_key_id: str = Field(default="", description="Access key id (empty: the worker's AWS environment).")
    secret_access_key: SecretStr = Field(default=SecretStr(""), description="Secret access key.")
    session_token: SecretStr | None = Field(default=None, description="Session token of temporary credentials.")
    endpoint_url: str = Field(default="", description="An S3-compatible endpoint, e.g. http://minio.lan:9000 "
                              "(empty: AWS).")
    region: str = Field(default="", description="Region, e.g. us-east-1 (empty: the endpoint's default).")
    allow_http: bool = Field(default=False, description="Allow a plain-HTTP endpoint (a store on a private network).")

    def credentials(self) -> StoreCredentials:
        return StoreCredentials(access_key_id=self.access_key_id, secret_access_key=self.secret_access_key,
                                session_token=self.session_token, endpoint_url=self.endpoint_url,
                                region=self.region, allow_http=self.allow_http)


def load_credentials(name: str, field: str) -> StoreCredentials:
    """The credentials saved in the block ``name``; a UserError naming ``field`` when there is none."""
    try:
        block = StoreCredentialsBlock.load(name)
    except ValueError:
        raise UserError(f"{field}: no Roost Store Credentials block named {name!r} on the Prefect server: save one "
                        "(Blocks -> + -> Roost Store Credentials) or unset it to use the AWS_* environment") from None
    except RuntimeError as exc:
        invalid = exc.__cause__ if isinstance(exc.__cause__, ValidationError) else None
        if invalid is None:
            raise UserError(f"{field}: could not read the Roost Store Credentials block {name!r} "
                            f"({type(exc).__name__}): is PREFECT_API_URL right?") from None
        raise UserError(f"{field}: the Roost Store Credentials block {name!r} is invalid: fix it in the Prefect UI") from None
    except Exception as exc:  # the Prefect API did not answer (a connection refused, a timeout)
        raise UserError(f"{field}: could not read the Roost Store Credentials block {name!r} from the Prefect API "
                        f"({type(exc).__name__}): is PREFECT_API_URL right and the server up?") from None
    assert isinstance(block, StoreCredentialsBlock)
    return block.credentials()


def open_results_store(url: str, credentials_block: str = "", field: str = STORE_ENV) -> ObjectStore:
    """The store at ``url`` (empty: the local results directory), with the named block's credentials."""
    creds = load_credentials(credentials_block, f"{field} credentials") if credentials_block and url else None
    return open_store(url or None, creds, field)


def results_store_for(host: HostProfile | None = None) -> ObjectStore:
    """The store a run on ``host`` writes to: ``ROOST_RESULTS_STORE``, else the host's ``results_store``, else the
    local results directory; with the credentials block ``ROOST_RESULTS_STORE_CREDENTIALS`` names, else the
    host's ``results_store_credentials``."""
    env = environment()
    url = (env.roost_results_store or "").strip()
    credentials = (env.roost_results_store_credentials or "").strip()
    if url:
        return open_results_store(url, credentials, STORE_ENV)
    if host is not None and host.results_store:
        return open_results_store(host.results_store, credentials or host.results_store_credentials,
                                  f"host {host.name}: results_store")
    return open_store(None)
