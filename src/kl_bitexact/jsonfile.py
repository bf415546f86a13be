"""Reading a bounded JSON file that another job wrote, with errors that name the file.

Parsing is msgspec's (C): a `type` decodes and validates in the same pass. Syntax errors
name the line and column; validation errors are the caller's to word (`ValidationError`
carries the JSON path).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from kl_bitexact.errors import ConfigError

_BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")


def read_bounded(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> bytes:
    """The bytes at `path`; the size is checked before reading, so an oversized artifact
    is never loaded."""
    try:
        size = path.stat().st_size
        raw = path.read_bytes() if size <= max_bytes else b""
    except OSError as error:
        raise ConfigError(f"{path}: cannot read {what} ({error.strerror})", hint=hint) from None
    if size > max_bytes:
        raise ConfigError(f"{path}: {size} bytes is over the {max_bytes}-byte limit for {what}")
    return raw


def read_json(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> Any:
    """The parsed document at `path`; `what` names the kind of file in error messages."""
    raw = read_bounded(path, what=what, max_bytes=max_bytes, hint=hint)
    try:
        return msgspec.json.decode(raw)
    except msgspec.ValidationError as error:  # a number beyond float range, e.g. 1e999
        raise ConfigError(f"{path}: {error} in this {what}") from None
    except msgspec.DecodeError as error:
        return parse_refused(raw, error, path, what)


def parse_refused(raw: bytes, error: msgspec.DecodeError, path: Path, what: str) -> Any:
    """The document msgspec refused to parse, when Python's json reads it, else the error.

    The one such case is an escaped lone surrogate (`"\\ud800"`): legal JSON grammar that
    Python's json reads (and writes, for such strings), so it must still load; the writers
    downstream replace it. Anything else is a syntax error, named with line and column.
    """
    if "surrogate" not in str(error):
        raise syntax_error(raw, error, path, what) from None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise syntax_error(raw, error, path, what) from None


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
