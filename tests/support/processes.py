"""The vLLM servers a test session started (their command line names the session's ``ROOST_HOME``)."""

from __future__ import annotations

import os
from pathlib import Path


def vllm_processes() -> list[str]:
    """Command lines of running vLLM API servers under this session's ``ROOST_HOME``."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "vllm.entrypoints" in cmd and os.environ["ROOST_HOME"] in cmd:
                out.append(cmd)
    return out
