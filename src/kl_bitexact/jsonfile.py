"""Reading a bounded JSON file that another job wrote, with errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError


def read_json(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> Any:
    """The parsed document at `path`; `what` names the kind of file in error messages.

    The size is checked before reading, so an oversized artifact is never loaded.
    """
    try:
        size = path.stat().st_size
        raw = path.read_bytes() if size <= max_bytes else b""
    except OSError as error:
        raise ConfigError(f"{path}: cannot read {what} ({error.strerror})", hint=hint) from None
    if size > max_bytes:
        raise ConfigError(f"{path}: {size} bytes is over the {max_bytes}-byte limit for {what}")
    return _parse(raw, path, what)


def _parse(raw: bytes, path: Path, what: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, so not a {what}") from None
    except json.JSONDecodeError as error:
        truncated = error.pos >= len(raw.rstrip())
        why = "the file ends early: truncated upload?" if truncated else error.msg
        raise ConfigError(
            f"{path}: invalid JSON at line {error.lineno} column {error.colno} ({why}): "
            f"this {what} is not JSON"
        ) from None
