"""vLLM's command-line flags as its parser reads them, and which of them carry a secret.

vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``, 0.24.0 and 0.32 alike) spells ``_``
as ``-`` in a flag's name (up to the first ``.``: ``--speculative_config.num_speculative_tokens`` is
``--speculative-config.num_speculative_tokens``, a key of the JSON flag) and, being an ``argparse``
parser with abbreviations allowed, expands an unambiguous prefix (``--api-k`` is ``--api-key``). Some
flags also have a short alias (``-sc`` is ``--speculative-config``). A check on the arguments roost
passes or records must read them the same way; :class:`roost.vllm.argv.VllmArgv` reads a whole list.
"""

from __future__ import annotations

import re

SECRET_FLAGS = ("--api-key", "--hf-token")
"""vLLM flags that carry a secret: refused in any argument list roost records, logs or passes on a command line."""

SHORT_ALIASES: dict[str, str] = {
    "-asc": "--api-server-count", "-q": "--quantization", "-pp": "--pipeline-parallel-size", "-n": "--nnodes",
    "-r": "--node-rank", "-tp": "--tensor-parallel-size", "-dcp": "--decode-context-parallel-size",
    "-pcp": "--prefill-context-parallel-size", "-dp": "--data-parallel-size", "-dpn": "--data-parallel-rank",
    "-dpr": "--data-parallel-start-rank", "-dpl": "--data-parallel-size-local", "-dpa": "--data-parallel-address",
    "-dpp": "--data-parallel-rpc-port", "-dpb": "--data-parallel-backend", "-dph": "--data-parallel-hybrid-lb",
    "-dpe": "--data-parallel-external-lb", "-dpm": "--data-parallel-multi-port-external-lb",
    "-ep": "--enable-expert-parallel", "-sc": "--speculative-config", "-dc": "--diffusion-config",
    "-cc": "--compilation-config", "-ac": "--attention-config",
}
"""The short aliases of vLLM's server flags (the same in 0.24.0 and 0.32: ``make_arg_parser``'s option strings)."""

UNIQUE_PREFIXES: dict[str, str] = {
    "--speculative-config": "--specu",
    "--kv-cache-memory-bytes": "--kv-cache-mem",
    "--language-model-only": "--la",
    "--no-language-model-only": "--no-la",
    "--served-model-name": "--ser",
    "--max-model-len": "--max-m",
    "--tool-call-parser": "--tool-c",
    "--enable-auto-tool-choice": "--enable-a",
}
"""For the flags roost reads, the shortest abbreviation vLLM expands to them: no other server flag of 0.24.0
or 0.32 starts with it (``--spec`` is ambiguous, ``--specu`` is ``--speculative-config``). Any longer prefix
is the flag too. Flags not listed are read only when spelled out: whether a prefix is unique depends on
every flag of the release (``--model`` is a flag of its own and a prefix of ``--model-impl``)."""


def vllm_flag(arg: str) -> str:
    """The flag an argument names as vLLM's parser reads it: the part before ``=`` or the first
    space, underscores spelled as dashes up to the first ``.`` (vLLM's ``FlexibleArgumentParser``
    accepts ``--api_key``; after a ``.`` come the keys of a JSON flag, spelled as they are)."""
    head = re.split(r"[=\s]", arg.strip(), maxsplit=1)[0]
    if not head.startswith("--"):
        return head
    name, dot, keys = head[2:].partition(".")
    return "--" + name.replace("_", "-") + dot + keys


def long_flag(name: str) -> str:
    """The long flag vLLM reads ``name`` (a :func:`vllm_flag`, without ``.keys``) as: its short alias
    expanded (``-sc``), an abbreviation of a flag in :data:`UNIQUE_PREFIXES` spelled out; else ``name``."""
    if name in SHORT_ALIASES:
        return SHORT_ALIASES[name]
    for flag, shortest in UNIQUE_PREFIXES.items():
        if name.startswith(shortest) and flag.startswith(name):
            return flag
    return name


def carries_secret(arg: str) -> str | None:
    """The secret flag ``arg`` reaches vLLM as, or None: exact, in ``_`` spelling, or as an
    abbreviation argparse expands (``--api-k``; vLLM's parser allows them)."""
    flag = vllm_flag(arg)
    if len(flag) <= 2:
        return None
    for secret in SECRET_FLAGS:
        if secret.startswith(flag):
            return secret
    return None
