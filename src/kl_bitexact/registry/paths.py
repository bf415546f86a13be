"""Repository-relative globs with `**`, for listing files and for matching a path."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
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
    """Files under `root` matching any of `globs` and none of `exclude`, sorted.

    Walks only below each glob's literal directory prefix with `os.scandir` (pathlib's glob
    and a Path per file cost more than the scan of a sglang-sized tree).
    """
    excluded = tuple(exclude)
    found: set[str] = set()
    for glob in globs:
        inside(root, glob)
        pattern = glob.removeprefix("./")
        base = _literal_prefix(pattern)
        for relative in _walk(os.path.join(root, base), base):
            if matches(relative, pattern) and not any(matches(relative, x) for x in excluded):
                found.add(relative)
    return sorted(found)


def _literal_prefix(glob: str) -> str:
    """The directories of `glob` before its first wildcard ("" for the root)."""
    parts = glob.split("/")[:-1]
    literal = []
    for part in parts:
        if any(char in part for char in "*?["):
            break
        literal.append(part)
    return "/".join(literal)


def _walk(directory: str, relative: str) -> Iterator[str]:
    """Repository-relative paths of the regular files below `directory` (symlinked
    directories are not followed, as pathlib's glob does not either)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        path = f"{relative}/{entry.name}" if relative else entry.name
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path, path)
        elif entry.is_file():
            yield path


def inside(root: Path, relative: str) -> Path:
    """`root / relative`, refusing paths that leave the repository."""
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ConfigError(
            f"{relative!r} is outside the repository",
            hint="give paths and globs relative to the repository root, without '..'",
        )
    return root / relative
