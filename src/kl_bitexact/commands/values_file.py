"""A command's options as a file of typed values: how the action hands `run` and `pytest`
their work in a child process (the token-free process that runs the PR's code) without
turning its validated inputs back into a command line for the child to parse again.

The file is JSON: `{"command": NAME, "options": {...}}`, the fields of that command's
frozen `Options` (paths as strings, enums as their values). The child decodes it into
the same dataclass, type-checked field by field, and calls the command's work with it:
`python -m kl_bitexact --values FILE` (cli.py).

The file is read as strictly as the command line (issue 36): a key no option has (at any
level), a value outside the option's choices or range (the options' own `__post_init__`,
the rule the command line's types share), a NUL character in any text (no path or argument
can hold one), or nesting past the JSON readers' bound is refused - exit 2, the key named.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import tempfile
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from kl_bitexact.errors import ConfigError
from kl_bitexact.untrusted.jsonfile import check_depth, read_bounded, too_deep

# The top-level option that runs a command from such a file (cli.py reads it first).
FLAG = "--values"
# Options are a few paths and switches; the list of suite or test files is what grows.
MAX_BYTES = 4 * 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Values:
    """What a values file holds, still undecoded: the command's name and its options."""

    command: str
    options: dict[str, Any]


def encode(command: str, options: object) -> bytes:
    """The file's bytes for `command` with `options` (a frozen dataclass)."""
    fields = msgspec.to_builtins(options, enc_hook=_to_builtin)
    return json.dumps({"command": command, "options": fields}, indent=1).encode("utf-8")


def read(path: Path) -> Values:
    """The file's command and raw options; a file that is not one says which key is wrong."""
    raw = read_bounded(path, what="the values file", max_bytes=MAX_BYTES)
    try:
        values = msgspec.json.decode(raw, type=Values)
    except msgspec.DecodeError as error:
        raise _unreadable(path, error) from None
    except RecursionError:  # msgspec recurses into `options` (Any): was a traceback, exit 1
        raise too_deep(path, "kl-bitexact values file") from None
    check_depth(values.options, path, "kl-bitexact values file")
    return values


def options(path: Path, values: Values, options_type: type[T]) -> T:
    """`values.options` as `options_type`, each field checked against its annotation, its
    keys against the fields and its texts for NUL (then the options' own checks)."""
    problem = _unknown_key(values.options, options_type, "") or _nul_in(values.options, "")
    if problem:
        raise _unreadable(path, ValueError(problem))
    try:
        return msgspec.convert(values.options, options_type, dec_hook=_from_builtin)
    except msgspec.ValidationError as error:
        raise _unreadable(path, error) from None


def _unknown_key(value: object, wanted: object, at: str) -> str | None:
    """The first key of `value` that `wanted` (a dataclass, at any level) has no field for:
    msgspec drops such keys silently, and a misspelt option would be dropped with them."""
    if not (isinstance(value, dict) and dataclasses.is_dataclass(wanted)):
        return None
    names = [field.name for field in dataclasses.fields(wanted)]
    hints = typing.get_type_hints(wanted)
    for key, item in value.items():
        if key not in names:
            return f"unknown key `{at}{key}` (the options are {', '.join(names)})"
        if found := _unknown_key(item, hints[key], f"{at}{key}."):
            return found
    return None


def _nul_in(value: object, at: str) -> str | None:
    """Where a text holds a NUL character: no path, URL or argument can (it was an uncaught
    ValueError at the first open, exit 3)."""
    if isinstance(value, str):
        return f"`{at}` holds a NUL character" if "\0" in value else None
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        if any("\0" in str(key) for key in value):
            return f"a key of `{at or 'options'}` holds a NUL character"
        items = [(f"{at}.{key}" if at else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{at}[{index}]", item) for index, item in enumerate(value)]
    return next((found for key, item in items if (found := _nul_in(item, key))), None)


@contextmanager
def written(command: str, options: object) -> Iterator[Path]:
    """A temporary values file for one child process, removed once it has ended."""
    with tempfile.TemporaryDirectory(prefix="kl-bitexact-values-") as directory:
        path = Path(directory) / f"{command}.json"
        path.write_bytes(encode(command, options))
        yield path


def describe(command: str, options: Any) -> str:
    """One line for the step's log: the command and the options that differ from its
    defaults, as values (what `kl-bitexact COMMAND --help` calls them, with `_`)."""
    shown = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if value == _default(field):
            continue
        items = value if isinstance(value, tuple) else (value,)
        shown.append(f"{field.name}={' '.join(map(_shown, items))}")
    return f"kl-bitexact {command} ({', '.join(shown) or 'defaults'}; values handed over in a file)"


def _default(field: dataclasses.Field[Any]) -> object:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _shown(value: object) -> str:
    return str(value.value if isinstance(value, enum.Enum) else value)


def _unreadable(path: Path, error: Exception) -> ConfigError:
    # msgspec names the key (`$.options.repeat`) in its message.
    return ConfigError(
        f"{path}: not a kl-bitexact values file ({error})",
        hint="the file is written by the action for its own child process; run the command "
        "with its options instead (kl-bitexact COMMAND --help)",
    )


def _to_builtin(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(f"{type(value).__name__} has no place in a values file")


def _from_builtin(wanted: type, value: object) -> object:
    if wanted is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(f"{wanted} from {type(value).__name__}")
