"""Errors a user can cause or fix, each with the exit code the CLI maps it to.

Every message names the file or field at fault and says what to do; the CLI prints it as one
line (``roost: error: ...``) without a traceback.
"""

from __future__ import annotations

import logging


class RoostError(Exception):
    """Base class: an expected failure with a one-line explanation.

    ``failure_class`` and ``remediation`` name a failure roost classified (a cold load vLLM refused,
    a plan vLLM would refuse): the run record and the Slack message carry them.
    """

    exit_code: int = 1
    failure_class: str = ""
    remediation: str = ""


class UserError(RoostError):
    """Unusable input: a missing path, an unknown profile, a port in use, a bad revision... (exit 2)."""

    exit_code = 2


class CheckFailed(RoostError):
    """The input was usable but a check on it failed: an integrity mismatch, an error finding (exit 1)."""

    exit_code = 1


class StageFailed(RoostError):
    """A pipeline stage failed at run time (server died, health timeout...). Carries a stage name."""

    exit_code = 1

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


class HideRoostTracebacks(logging.Filter):
    """Drop the traceback from a log record whose exception is a :class:`RoostError`: its message
    already says what failed and what to do, and a traceback would read as a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RoostError):
            record.exc_info, record.exc_text = None, None
        return True


def hide_roost_tracebacks(*logger_names: str) -> None:
    """Install :class:`HideRoostTracebacks` on these loggers (once each)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, HideRoostTracebacks) for f in logger.filters):
            logger.addFilter(HideRoostTracebacks())
