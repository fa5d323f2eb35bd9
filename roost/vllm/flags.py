"""vLLM's command-line flags as its parser reads them, and which of them carry a secret.

vLLM's ``FlexibleArgumentParser`` spells ``_`` as ``-`` in a flag's name and, being an
``argparse`` parser with abbreviations allowed, expands an unambiguous prefix (``--api-k`` is
``--api-key``). A check on the arguments roost passes or records must read them the same way.
"""

from __future__ import annotations

import re

SECRET_FLAGS = ("--api-key", "--hf-token")
"""vLLM flags that carry a secret: refused in any argument list roost records, logs or passes on a command line."""

def vllm_flag(arg: str) -> str:
    """The flag an argument names as vLLM's parser reads it: the part before ``=`` or the first
    space, underscores spelled as dashes (vLLM's ``FlexibleArgumentParser`` accepts ``--api_key``)."""
    head = re.split(r"[=\s]", arg.strip(), maxsplit=1)[0]
    return "--" + head[2:].replace("_", "-") if head.startswith("--") else head


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
