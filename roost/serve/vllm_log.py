"""Facts parsed from a vLLM server log: the KV-cache lines, load/compile milestones.

The lines (vLLM 0.2x-0.3x, GPU and CPU alike; the CPU build says "CPU KV cache size"):
    GPU KV cache size: 412,980 tokens
    Maximum concurrency for 262,144 tokens per request: 1.58x
    Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.
    Model loading took 65.53 GiB memory and 440.1 seconds

and the API server's access log, one line per HTTP request once the server answers
(``INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU)?\s*KV cache size:\s*([\d,]+)\s*tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x")
_BLOCK = re.compile(r"Setting attention block size to\s*(\d+)\s*tokens")
_LOAD = re.compile(r"Model loading took\s*([\d.]+)\s*GiB(?: memory)? and\s*([\d.]+)\s*s")
_ACCESS = re.compile(r'"(?:GET|POST|HEAD|PUT|DELETE|OPTIONS) \S* HTTP/[\d.]+" \d{3}')


def is_access_log(line: str) -> bool:
    """Is this one of the API server's per-request access-log lines (one per benchmark request)?"""
    return _ACCESS.search(line) is not None


class VllmLogFacts(BaseModel):
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None
    attention_block_size: int | None = None
    model_load_gib: float | None = None
    model_load_s: float | None = None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_vllm_log(text: str) -> VllmLogFacts:
    """The last occurrence of each line wins (a restarted engine logs them again)."""
    facts = VllmLogFacts()
    for m in _KV_TOKENS.finditer(text):
        facts.kv_cache_tokens = _int(m.group(1))
    for m in _MAX_CONC.finditer(text):
        facts.max_concurrency_len = _int(m.group(1))
        facts.max_concurrency = float(m.group(2))
    for m in _BLOCK.finditer(text):
        facts.attention_block_size = int(m.group(1))
    for m in _LOAD.finditer(text):
        facts.model_load_gib = float(m.group(1))
        facts.model_load_s = float(m.group(2))
    return facts
