"""Reading a bounded JSON file that another job wrote, with errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError


def read_json(path: Path, *, what: str, max_bytes: int, hint: str | None = None) -> Any:
    """The parsed document at `path`; `what` names the kind of file in error messages."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read {what} ({error.strerror})", hint=hint) from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{path}: {len(raw)} bytes is over the {max_bytes}-byte limit for {what}")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: {what} is not JSON ({error})", hint=hint) from None
