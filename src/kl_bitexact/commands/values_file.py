"""A command's options as a file of typed values: how the action hands `run` and `pytest`
their work in a child process (the token-free process that runs the PR's code) without
turning its validated inputs back into a command line for the child to parse again.

The file is JSON: `{"command": NAME, "options": {...}}`, the fields of that command's
frozen `Options` (paths as strings, enums as their values). The child decodes it into
the same dataclass, type-checked field by field, and calls the command's work with it:
`python -m kl_bitexact --values FILE` (cli.py).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from kl_bitexact.errors import ConfigError
from kl_bitexact.untrusted.jsonfile import read_bounded

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
        return msgspec.json.decode(raw, type=Values)
    except msgspec.DecodeError as error:
        raise _unreadable(path, error) from None


def options(path: Path, values: Values, options_type: type[T]) -> T:
    """`values.options` as `options_type`, each field checked against its annotation."""
    try:
        return msgspec.convert(values.options, options_type, dec_hook=_from_builtin)
    except msgspec.ValidationError as error:
        raise _unreadable(path, error) from None


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
