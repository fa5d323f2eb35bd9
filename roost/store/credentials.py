"""How to reach an S3-compatible results store: the credentials, from a block or the AWS environment."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

from roost.settings import environment


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
        env = environment()
        key, secret = env.aws_access_key_id or "", env.aws_secret_access_key or ""
        endpoint = env.aws_endpoint_url_s3 or env.aws_endpoint_url or ""
        if not (key or secret or endpoint):
            return None
        token = env.aws_session_token
        return cls(access_key_id=key, secret_access_key=SecretStr(secret),
                   session_token=SecretStr(token) if token else None, endpoint_url=endpoint,
                   region=env.aws_region or env.aws_default_region or "",
                   allow_http=endpoint.startswith("http://"))
