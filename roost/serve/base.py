"""What every serving backend takes and gives back."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from roost.errors import UserError

RestartPolicy = Literal["no", "always", "unless-stopped", "on-failure"]
"""Docker's restart policies for a server container: the seeds run ``unless-stopped`` for one meant to stay up."""

SECRET_FLAGS = ("--api-key", "--hf-token")
"""vLLM flags that carry a secret: refused in any argument list roost records, logs or passes on a command line."""


def check_vllm_args(args: list[str], *, source: str = "vLLM arguments") -> None:
    """Refuse an argument list that carries a secret (it would be stored with the run and logged)."""
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in SECRET_FLAGS:
            raise UserError(
                f"{source}: {flag} carries a secret, and vLLM arguments are stored with the run and logged; "
                "remove it: roost passes the API key through VLLM_API_KEY (or the roost-vllm-api-key Secret block) "
                "and the Hub token through HF_TOKEN (or a Prefect Secret block)"
            )


class ServeSpec(BaseModel):
    """How to start one vLLM server. Backend-independent; the backend decides how to run it."""

    model_dir: Path = Field(description="Local checkpoint directory (mounted read-only in a container).")
    served_model_name: str
    host: str = Field(default="127.0.0.1", description="Address the API listens on / is published to.")
    port: int = 8000
    vllm_args: list[str] = Field(default_factory=list, description="Extra vLLM CLI args from the plan and overrides.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment; never put secrets here.")
    log_path: Path | None = None

    def server_args(self) -> list[str]:
        """``--served-model-name`` (unless the plan's args already name it: they must agree) and ``vllm_args``."""
        args = list(self.vllm_args)
        check_vllm_args(args)
        named = [args[i + 1] if i + 1 < len(args) else "" for i, a in enumerate(args) if a == "--served-model-name"]
        for other in named:
            if other != self.served_model_name:
                raise UserError(
                    f"vLLM arguments serve the model as {other!r} but roost serves and benchmarks it as "
                    f"{self.served_model_name!r}: drop --served-model-name from the overrides, or set the "
                    "profile's served name instead"
                )
        return args if named else ["--served-model-name", self.served_model_name, *args]


class ServerHandle(Protocol):
    """A started vLLM server. ``stop()`` is idempotent and always safe to call."""

    base_url: str
    served_model_name: str

    def is_running(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def logs(self) -> str: ...

    def stop(self) -> None: ...
