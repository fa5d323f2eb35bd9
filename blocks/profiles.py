"""``ModelProfileBlock`` (block type "Model Profile"): what to land, as a Prefect block. It is a
``roost.profiles.ModelProfile`` (fields, defaults, descriptions and validation declared there, once)
that Prefect can register, save and load, as prefect-docker's ``DockerHost`` is both the settings and
the block.

Block document names allow only lowercase letters, digits and dashes, so a profile's document is
named ``profile_document_name(profile.name)``: ``ornith-1.5-35b-a3b-nvfp4`` is stored as
``ornith-1-5-35b-a3b-nvfp4``. The profile keeps its own name in the ``name`` field.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from prefect.blocks.core import Block

from roost.plan.inputs import ServingSettings
from roost.profiles import PROFILES, ModelProfile


def profile_document_name(profile_name: str) -> str:
    """The block document name for a profile: lowercase, every other character a dash."""
    doc = re.sub(r"[^a-z0-9-]", "-", profile_name.strip().lower())
    return re.sub(r"-{2,}", "-", doc).strip("-")


class ModelProfileBlock(ModelProfile, Block):
    """A model to land: Hub repo and revision, served name, download patterns, vLLM overrides, benchmark settings."""

    _block_type_name: ClassVar[str | None] = "Model Profile"
    _block_type_slug: ClassVar[str | None] = "model-profile"
    _description: ClassVar[str | None] = (
        "A model roost lands: the Hub repo and revision, the served model name, which files to download, "
        "vLLM argument overrides and the benchmark settings."
    )

    SERVING_AFTER: ClassVar[str] = "max_num_batched_tokens"
    """The form shows the five serving settings (inherited, so declared first) after this field, beside
    the other vLLM sizes: a profile's form opens with its name and Hub repository."""

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Prefect's schema, the form's order (``position``) as :attr:`SERVING_AFTER` says."""
        schema = super().model_json_schema(*args, **kwargs)
        props: dict[str, Any] = schema["properties"]
        serving = [k for k in ServingSettings.model_fields if k in props]
        own = [k for k in props if k not in serving]
        cut = own.index(cls.SERVING_AFTER) + 1
        order = own[:cut] + serving + own[cut:]
        schema["properties"] = {k: {**props[k], "position": n} for n, k in enumerate(order)}
        return schema

    def to_profile(self) -> ModelProfile:
        """The plain ``ModelProfile`` (the flows compare and copy profiles; a block carries Prefect's state)."""
        return ModelProfile.model_validate({k: getattr(self, k) for k in ModelProfile.model_fields})

    @classmethod
    def from_profile(cls, profile: ModelProfile) -> ModelProfileBlock:
        return cls.model_validate(profile, from_attributes=True)


def builtin_profile_documents() -> dict[str, ModelProfileBlock]:
    """The documents ``roost setup`` saves: the Ornith 1.0 35B, Ornith 1.0 9B and Ornith 1.5 35B-A3B NVFP4
    recipes and the local demo."""
    return {profile_document_name(name): ModelProfileBlock.from_profile(p) for name, p in PROFILES.items()}
