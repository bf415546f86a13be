"""Repository-relative globs with `**`, for listing files and for matching a path."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from kl_bitexact.errors import ConfigError


@cache
def _pattern(glob: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", glob):
        if token == "**/":
            parts.append("(?:[^/]+/)*")
        elif token == "**":
            parts.append(".*")
        elif token == "*":
            parts.append("[^/]*")
        elif token == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


def matches(path: str, glob: str) -> bool:
    return _pattern(glob.removeprefix("./")).fullmatch(path) is not None


def list_files(root: Path, globs: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """Files under `root` matching any of `globs` and none of `exclude`, sorted."""
    excluded = tuple(exclude)
    found: set[str] = set()
    for glob in globs:
        inside(root, glob)
        for path in root.glob(glob.removeprefix("./")):
            relative = path.relative_to(root).as_posix()
            if path.is_file() and not any(matches(relative, pattern) for pattern in excluded):
                found.add(relative)
    return sorted(found)


def inside(root: Path, relative: str) -> Path:
    """`root / relative`, refusing paths that leave the repository."""
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ConfigError(
            f"{relative!r} is outside the repository",
            hint="give paths and globs relative to the repository root, without '..'",
        )
    return root / relative
