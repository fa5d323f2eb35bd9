"""A vLLM argument list, read and changed as vLLM's parser reads it: :class:`VllmArgv`.

Every module that asks whether a server runs with a flag, reads its value or changes it goes through
here, so ``--speculative_config``, ``--speculative-config=...``, ``-sc ...`` and
``--speculative-config.method mtp`` all count as what vLLM takes them for (``roost.vllm.flags``):

- a flag is ``--name value``, ``--name=value`` or a bare ``--name``; ``_`` and ``-`` are the same in its
  name; a short alias or an abbreviation vLLM expands counts as the flag (:func:`~roost.vllm.flags.long_flag`);
- the token after a flag is its value unless it looks like another option (``-x``; a negative number is
  a value), as argparse decides; roost cannot know which flags take no value, and a vLLM argument list
  never puts a bare word after one;
- ``--name.key value`` sets one key of a JSON flag: vLLM gathers those keys into one JSON value that it
  appends after every other argument, so they win over a whole ``--name '{...}'``;
- the last value of a flag wins; ``--no-name`` turns a boolean flag off (``argparse.BooleanOptionalAction``);
- one argument ``"--name value"`` (a space, no ``=``) is read as the flag with its value, as roost's
  secret check reads it (vLLM itself would refuse it as a stray positional).

Not read: ``--config file.yaml`` (vLLM splices the file's flags in) and short aliases with the value
glued on (``-tp2``); roost writes neither.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from roost.vllm.flags import long_flag, vllm_flag

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's: such a token is a value, not an option
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _is_option(arg: str) -> bool:
    text = arg.strip()
    return len(text) > 1 and text.startswith("-") and not _NEGATIVE_NUMBER.match(text)


@dataclass(frozen=True)
class _Occurrence:
    """One flag in the list: ``args[start:stop]``, the long flag, the JSON keys after a ``.``, the value."""

    start: int
    stop: int
    flag: str
    keys: tuple[str, ...]
    value: str | None


def _dotted_value(text: str) -> Any:
    """A ``--name.key`` value as vLLM reads it: JSON, else a human-readable integer (``1k``, ``2M``), else text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    m = _HUMAN_INT.fullmatch(text.strip())
    if m is not None:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." not in number:
            return int(number) * _BINARY[suffix]
    return text


def _merge(into: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    """Set ``keys`` (a path) in ``into``; a list extends the list already there (``--name.key+ a,b``)."""
    *path, last = keys
    for key in path:
        node = into.get(key)
        if not isinstance(node, dict):
            node = into[key] = {}
        into = node
    if isinstance(value, list) and isinstance(into.get(last), list):
        into[last] += value
    else:
        into[last] = value


class VllmArgv:
    """An immutable vLLM argument list; :meth:`set` and :meth:`remove` return a new one.

    ``list(argv)`` is the list itself; flags are asked for by their long name (``"--speculative-config"``).
    """

    __slots__ = ("_args",)

    def __init__(self, args: Iterable[str] = ()) -> None:
        self._args: tuple[str, ...] = tuple(args)

    def __iter__(self) -> Iterator[str]:
        return iter(self._args)

    def __len__(self) -> int:
        return len(self._args)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VllmArgv) and other._args == self._args

    def __hash__(self) -> int:
        return hash(self._args)

    def __repr__(self) -> str:
        return f"VllmArgv({list(self._args)!r})"

    def _occurrences(self) -> Iterator[_Occurrence]:
        args, i = self._args, 0
        while i < len(args):
            arg = args[i]
            if not _is_option(arg):
                i += 1
                continue
            name, _, keys = vllm_flag(arg).partition(".")
            parts = re.split(r"[=\s]", arg.strip(), maxsplit=1)
            stop, value = i + 1, parts[1].strip() if len(parts) == 2 else None
            if value is None and i + 1 < len(args) and not _is_option(args[i + 1]):
                stop, value = i + 2, args[i + 1]
            yield _Occurrence(i, stop, long_flag(name), tuple(keys.split(".")) if keys else (), value)
            i = stop

    def _of(self, flag: str) -> list[_Occurrence]:
        wanted = long_flag(vllm_flag(flag))
        return [o for o in self._occurrences() if o.flag == wanted]

    def has(self, flag: str) -> bool:
        """Does the list give ``flag`` (in any spelling, a ``.key`` of it included)?"""
        return bool(self._of(flag))

    def get(self, flag: str) -> str | None:
        """The value vLLM takes for ``flag``: the last one given (``""`` for a bare flag); the JSON vLLM
        builds from ``--flag.key value`` arguments when there are any; None when the flag is absent."""
        found = self._of(flag)
        dotted = [o for o in found if o.keys]
        if dotted:
            merged: dict[str, Any] = {}
            for o in dotted:
                raw, listed = o.value or "", o.keys[-1].endswith("+")  # "--name.key+ a,b" extends a list
                keys = (*o.keys[:-1], o.keys[-1][:-1]) if listed else o.keys
                _merge(merged, keys, raw.split(",") if listed else _dotted_value(raw))
            return json.dumps(merged)
        return (found[-1].value or "") if found else None

    def values(self, flag: str) -> list[str]:
        """Every value given for ``flag`` (not its ``.key`` arguments), in order; ``""`` for a bare one."""
        return [o.value or "" for o in self._of(flag) if not o.keys]

    def enabled(self, flag: str) -> bool | None:
        """A boolean flag as vLLM reads it: True for ``--flag``, False for ``--no-flag`` (the last one
        given wins), None when neither is given."""
        wanted, off = long_flag(vllm_flag(flag)), long_flag("--no-" + vllm_flag(flag)[2:])
        last = [o.flag for o in self._occurrences() if o.flag in (wanted, off)]
        return None if not last else last[-1] == wanted

    def remove(self, flag: str) -> VllmArgv:
        """The list without ``flag``: every spelling and ``.key`` of it, with its value; the rest in order."""
        drop = {i for o in self._of(flag) for i in range(o.start, o.stop)}
        return VllmArgv(a for i, a in enumerate(self._args) if i not in drop)

    def set(self, flag: str, value: str | None = None) -> VllmArgv:
        """The list with ``flag value`` (a bare ``flag`` for None) where ``flag`` first stood, every other
        spelling of it removed; appended at the end when the list did not give it."""
        found = self._of(flag)
        given = [flag] if value is None else [flag, value]
        if not found:
            return VllmArgv([*self._args, *given])
        drop = {i for o in found for i in range(o.start, o.stop)}
        out: list[str] = []
        for i, arg in enumerate(self._args):
            if i == found[0].start:
                out += given
            if i not in drop:
                out.append(arg)
        return VllmArgv(out)


__all__ = ["VllmArgv"]
