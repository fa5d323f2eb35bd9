"""Which files of a Hub repository roost downloads: one set of patterns, used by every profile and
by ``roost download``.

Allowed: the weights (``*.safetensors`` and their index), every JSON file (config, generation,
quantization, processor and tokenizer configs), the tokenizer in its various forms, the chat
template, and small text files (``merges.txt``, ``vocab.txt``, the model card). Ignored: the
original and non-safetensors weight formats, which vLLM does not need and which can double the
download (``original/*`` holds a second full copy of some releases).
Matching follows huggingface_hub's ``allow_patterns`` / ``ignore_patterns`` rules.
"""

from __future__ import annotations

DEFAULT_ALLOW_PATTERNS: tuple[str, ...] = (
    "*.safetensors", "*.json", "tokenizer*", "*.jinja", "*.tiktoken", "*.model", "*.txt", "*.md",
)
DEFAULT_IGNORE_PATTERNS: tuple[str, ...] = (
    "original/*", "*.pth", "*.gguf", "*.bin", "*.pt", "*.onnx", "*.msgpack", "*.h5",
)
