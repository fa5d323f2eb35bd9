"""Which files of a Hub repository roost downloads: one set of patterns, used by every profile and
by ``roost download``.

Allowed: the weights (``*.safetensors`` and their index), every JSON file (config, generation,
quantization, processor and tokenizer configs), the tokenizer in its various forms, the chat
template, and small text files (``merges.txt``, ``vocab.txt``, the model card). Ignored: the
original and non-safetensors weight formats, which vLLM does not need and which can double the
download (``original/*`` holds a second full copy of some releases).
Matching follows huggingface_hub's ``allow_patterns`` / ``ignore_patterns`` rules (:func:`select`,
for a checkpoint and an evaluation dataset alike).
"""

from __future__ import annotations

from collections.abc import Sequence

from roost.errors import UserError
from roost.hub.answers import repo_path_fault
from roost.hub.integrity import HubFile
from roost.inputs.text import shown

DEFAULT_ALLOW_PATTERNS: tuple[str, ...] = (
    "*.safetensors", "*.json", "tokenizer*", "*.jinja", "*.tiktoken", "*.model", "*.txt", "*.md",
)
DEFAULT_IGNORE_PATTERNS: tuple[str, ...] = (
    "original/*", "*.pth", "*.gguf", "*.bin", "*.pt", "*.onnx", "*.msgpack", "*.h5",
)
OWN_DIRS = (".roost", ".cache")  # roost's and huggingface_hub's bookkeeping: never taken from a repo


def select(
    listing: Sequence[HubFile], repo_id: str, allow_patterns: Sequence[str] | None,
    ignore_patterns: Sequence[str] | None,
) -> list[HubFile]:
    """The files of ``listing`` the allow/ignore patterns select (huggingface_hub's rules), by path.

    A name no download directory can hold (``roost.hub.answers.repo_path_fault``: ``..``, absolute, a
    control character...) refuses the whole repository; roost's and huggingface_hub's own directories
    are never taken from it."""
    for f in listing:
        fault = repo_path_fault(f.path)
        if fault is not None:
            raise UserError(
                f"{repo_id} lists a file at {shown(repr(f.path))}, which {fault}; "
                "refusing to download this repository"
            )
    listing = [f for f in listing if f.path.split("/", 1)[0] not in OWN_DIRS]
    # here, not at import: importing huggingface_hub parses HF_ENDPOINT (checked before this runs)
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # public: in its lazy __all__

    return sorted(
        filter_repo_objects(
            listing,
            allow_patterns=list(allow_patterns) if allow_patterns else None,
            ignore_patterns=list(ignore_patterns) if ignore_patterns else None,
            key=lambda f: f.path,
        ),
        key=lambda f: f.path,
    )
