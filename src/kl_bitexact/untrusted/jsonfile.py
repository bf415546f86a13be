"""Reading a bounded JSON file that another job wrote, with errors that name the file.

Parsing is msgspec's (C): a `type` decodes and validates in the same pass. Syntax errors
name the line and column; validation errors are the caller's to word (`ValidationError`
carries the JSON path).

Bounded in every dimension an artifact can be hostile in: only a regular file (a FIFO or a
link to /dev/zero would block or never end), its size checked before reading, nesting at
most MAX_DEPTH deep (parsers and every reader after them recurse), integers of at most
MAX_INT_DIGITS digits where Python's json parses them (msgspec refuses past 64 bits).

Files are written where a run of PR code wrote before (a results directory, which a
self-hosted runner keeps for the next job), so writing never follows what is planted there
(issue 14, case 9): `replace_text` puts a new regular file in the path's place (a symlink
or a FIFO there is replaced, not written through), `open_append` appends only to a regular
file that is not a symlink.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from kl_bitexact.errors import ConfigError

_BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")

# No file we read nests deeper than about 6 levels or holds integers past 20 digits.
MAX_DEPTH = 64
MAX_INT_DIGITS = 100


def read_bounded(
    path: Path,
    *,
    what: str,
    max_bytes: int,
    hint: str | None = None,
    follow_symlinks: bool = True,
) -> bytes:
    """The bytes of the regular file at `path`; the size is checked before reading, so an
    oversized artifact is never loaded, and a FIFO or a device is refused unread. Without
    `follow_symlinks`, a symlink is refused too (an artifact's file is never a link)."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting.
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_symlinks:
            raise ConfigError(f"{path}: a symbolic link, not a {what}", hint=hint) from None
        raise ConfigError(f"{path}: cannot read {what} ({error.strerror})", hint=hint) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which refuses a directory itself
        os.close(fd)
        raise ConfigError(
            f"{path}: not a regular file ({_kind(info.st_mode)}), so not a {what}", hint=hint
        )
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_bytes:
            raise ConfigError(
                f"{path}: {info.st_size} bytes is over the {max_bytes}-byte limit for {what}"
            )
        try:
            # The size it has, then whatever it grew by (bounded too): read(max_bytes + 1)
            # alone would allocate the whole bound (64 MiB for results) for every file.
            raw = handle.read(info.st_size + 1)
            if len(raw) > info.st_size:
                raw += handle.read(max_bytes + 1 - len(raw))
        except OSError as error:
            raise ConfigError(f"{path}: cannot read {what} ({error.strerror})") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{path}: over the {max_bytes}-byte limit for {what}")
    return raw


def replace_text(path: Path, text: str) -> None:
    """Write `text` to a new regular file and rename it over `path`: a reader never sees half
    of it, and what a run left at `path` (a symlink to a file, a FIFO) is replaced, never
    written through.

    A stream the user names (`--out /dev/null`, `/dev/stdout`: a character device, or a
    link to one or to a pipe) is written to as before: renaming over it would replace the
    system's node itself when run as root. A block device, a socket or a directory is
    refused.
    """
    if _is_stream(path):
        _write_stream(path, text)
        return
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise ConfigError(f"{path}: cannot write ({error.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write ({error.strerror})") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _is_stream(path: Path) -> bool:
    """True for a character device, or a link to one or to a pipe; raises for what is no
    file to write; False for what `replace_text` replaces (nothing, a file, a FIFO, a link
    to a file or to nothing)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    linked = stat.S_ISLNK(mode)
    if linked:
        try:
            mode = path.stat().st_mode
        except OSError:
            return False  # a dangling link: replaced
    if stat.S_ISCHR(mode) or (linked and stat.S_ISFIFO(mode)):
        return True
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return False
    what = f"a link to {_kind(mode)}" if linked else f"not a regular file ({_kind(mode)})"
    raise ConfigError(f"{path}: {what}, so not written")


def _write_stream(path: Path, text: str) -> None:
    # O_NONBLOCK: a pipe nobody reads fails at once (ENXIO) instead of waiting forever.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise ConfigError(f"{path}: cannot write ({error.strerror})") from None


def open_append(path: Path) -> BinaryIO:
    """`path` opened to append bytes, created if missing; only a regular file that is not a
    symlink (a planted FIFO would block, a link would point the writes anywhere)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ConfigError(
                f"{path}: a symbolic link; kl-bitexact appends only to regular files",
                hint="remove the link (something planted it where this file belongs)",
            ) from None
        if error.errno == errno.ENXIO:  # a FIFO nobody reads
            raise ConfigError(f"{path}: not a regular file (a FIFO), so not written") from None
        raise ConfigError(f"{path}: cannot write ({error.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ConfigError(f"{path}: not a regular file ({_kind(mode)}), so not written")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


def append_text(path: Path, text: str) -> None:
    """Append `text` (UTF-8) to the regular file at `path` (see `open_append`)."""
    with open_append(path) as handle:
        try:
            handle.write(text.encode("utf-8"))
        except OSError as error:
            raise ConfigError(f"{path}: cannot write ({error.strerror})") from None


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a plain file")


def read_json(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> Any:
    """The parsed document at `path`; `what` names the kind of file in error messages."""
    raw = read_bounded(path, what=what, max_bytes=max_bytes, hint=hint)
    try:
        document = msgspec.json.decode(raw)
    except msgspec.ValidationError as error:  # a number beyond float range, e.g. 1e999
        raise ConfigError(f"{path}: {error} in this {what}") from None
    except msgspec.DecodeError as error:
        document = parse_refused(raw, error, path, what)
    except RecursionError:
        raise too_deep(path, what) from None
    check_depth(document, path, what)
    return document


def too_deep(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep: not a {what}")


class TooDeep(ValueError):
    """JSON text nested deeper than MAX_DEPTH (a ValueError, as the parsers' own errors)."""

    def __init__(self) -> None:
        super().__init__(f"nested more than {MAX_DEPTH} levels deep")


def loads(text: str | bytes) -> Any:
    """JSON text that is not a file (an action input, a JUnit property, an event payload)
    parsed with the file readers' bounds: nesting at most MAX_DEPTH, integers of at most
    MAX_INT_DIGITS digits. Every error is a ValueError (json.JSONDecodeError, TooDeep):
    Python's parser recurses, and past its recursion limit it raised RecursionError, which
    every caller took for a bug (exit 3)."""
    try:
        document = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise TooDeep() from None
    except _TooLong as long:
        raise ValueError(f"an integer of {long.digits} digits") from None
    if _deeper_than_allowed(document):
        raise TooDeep()
    return document


def check_depth(document: Any, path: Path, what: str) -> None:
    """Refuse a document nested deeper than MAX_DEPTH."""
    if _deeper_than_allowed(document):
        raise too_deep(path, what)


def _deeper_than_allowed(document: Any) -> bool:
    """Whether `document` nests deeper than MAX_DEPTH (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(node, dict):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)
    return False


def parse_refused(raw: bytes, error: msgspec.DecodeError, path: Path, what: str) -> Any:
    """The document msgspec refused to parse, when Python's json reads it, else the error.

    The one such case is an escaped lone surrogate (`"\\ud800"`): legal JSON grammar that
    Python's json reads (and writes, for such strings), so it must still load; the writers
    downstream replace it. Anything else is a syntax error, named with line and column.
    """
    if "surrogate" not in str(error):
        raise syntax_error(raw, error, path, what) from None
    try:
        return json.loads(raw, parse_int=_bounded_int)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise syntax_error(raw, error, path, what) from None
    except _TooLong as long:
        raise ConfigError(
            f"{path}: an integer of {long.digits} digits (the limit is {MAX_INT_DIGITS}): "
            f"not a {what}"
        ) from None
    except RecursionError:
        raise too_deep(path, what) from None


class _TooLong(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _bounded_int(text: str) -> int:
    """Python refuses past 4,300 digits with a ValueError; we refuse far earlier, by name."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLong(len(text))
    return int(text)


def syntax_error(raw: bytes, error: msgspec.DecodeError, path: Path, what: str) -> ConfigError:
    """A ConfigError for bytes that are not JSON: where, and why in words a user can act on."""
    reason = str(error).removeprefix("JSON is malformed: ")
    offset = _offset(reason, raw)
    if "UTF-8" in reason or not _is_utf8(raw[: offset + 4]):
        return ConfigError(f"{path}: not UTF-8 text, so not a {what}")
    line, column = _line_column(raw, offset)
    truncated = "truncated" in reason or offset >= len(raw.rstrip())
    why = (
        "the file ends early: truncated upload?"
        if truncated
        else _BYTE_OFFSET.sub("", reason).strip()
    )
    return ConfigError(
        f"{path}: invalid JSON at line {line} column {column} ({why}): this {what} is not JSON"
    )


def _offset(reason: str, raw: bytes) -> int:
    match = _BYTE_OFFSET.search(reason)
    return int(match.group(1)) if match else len(raw)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        # A multi-byte character cut by the slice end is not an encoding error.
        return error.start >= len(raw) - 3 and error.reason == "unexpected end of data"
    return True


def _line_column(raw: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of byte `offset`."""
    before = raw[:offset]
    line_start = before.rfind(b"\n") + 1
    return before.count(b"\n") + 1, len(before[line_start:].decode("utf-8", "replace")) + 1
