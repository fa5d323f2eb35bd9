"""Shared CLI plumbing: error mapping and JSON output."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import BaseModel

from roost.errors import RoostError

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``roost: error: message`` on stderr and return the Exit to raise."""
    typer.echo(f"roost: error: {message}", err=True)
    return typer.Exit(code)


def user_errors(func: F) -> F:
    """Wrap a command so a RoostError becomes one stderr line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RoostError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


def echo_json(obj: BaseModel | dict[str, Any] | list[Any]) -> None:
    """Print a model or plain object as indented JSON on stdout."""
    if isinstance(obj, BaseModel):
        typer.echo(obj.model_dump_json(indent=2))
    else:
        typer.echo(json.dumps(obj, indent=2, default=str))
