"""Shared CLI plumbing: error mapping and JSON output."""

from __future__ import annotations

import errno
import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import BaseModel

from roost.errors import RoostError
from roost.inputs.text import one_line

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``roost: error: message`` on stderr, as one line (a newline or a terminal escape in an
    echoed value is shown escaped), and return the Exit to raise."""
    typer.echo(f"roost: error: {one_line(message)}", err=True)
    return typer.Exit(code)


def user_errors(func: F) -> F:
    """Wrap a command so a RoostError becomes one stderr line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RoostError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except OSError as exc:  # a path the command was given that the system refuses (too long, not a dir...)
            if exc.filename is None:
                raise
            raise fail(os_error_text(exc), 2 if exc.errno in _PATH_ERRNOS else 1) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


_PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM,
                          errno.ELOOP, errno.EROFS, errno.EEXIST, errno.EINVAL})


def os_error_text(exc: OSError) -> str:
    """``<file>: <reason>`` for an OSError about a path (the path shown on one line, cut when long)."""
    from roost.inputs.text import shown

    where = shown(str(exc.filename), 120 if exc.errno == errno.ENAMETOOLONG else 300)
    return f"{where}: {exc.strerror or type(exc).__name__}; check the path"


def echo_json(obj: BaseModel | dict[str, Any] | list[Any]) -> None:
    """Print a model or plain object as indented JSON on stdout."""
    if isinstance(obj, BaseModel):
        typer.echo(obj.model_dump_json(indent=2))
    else:
        typer.echo(json.dumps(obj, indent=2, default=str))
