"""The vLLM servers a test session started (their command line names the session's ``ROOST_HOME``)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any


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


def stop_group(proc: subprocess.Popen[Any], grace_s: float = 20.0) -> None:
    """Stop a process started in a session of its own (``start_new_session``) with its children:
    SIGTERM to the group, SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
