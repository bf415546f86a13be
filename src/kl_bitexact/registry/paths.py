"""Repository-relative globs with `**`, for listing files and for matching a path."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.untrusted.confined import escapes, outside_root

__all__ = ["Listing", "escapes", "inside", "list_files", "matches", "outside_root"]


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


@dataclass(frozen=True)
class Listing:
    """What a set of globs matched: files to read, and paths refused because, symlinks
    resolved, they lie outside the root (never read: lint-ci reads only the repository)."""

    files: list[str]
    outside: list[str]


def list_files(root: Path, globs: Iterable[str], exclude: Iterable[str] = ()) -> Listing:
    """Files under `root` matching any of `globs` and none of `exclude`, sorted.

    Walks only below each glob's literal directory prefix with `os.scandir` (pathlib's glob
    and a Path per file cost more than the scan of a sglang-sized tree). Only symlinks (and
    each literal prefix, once) pay for resolving: plain entries cannot leave the root.
    """
    excluded = tuple(exclude)
    real_root = os.path.realpath(root)
    found: set[str] = set()
    outside: set[str] = set()
    for glob in globs:
        inside(root, glob)
        pattern = glob.removeprefix("./")
        base = _literal_prefix(pattern)
        if base and escapes(real_root, os.path.join(root, base)):
            outside.add(base)  # a symlinked directory: nothing below it is ours
            continue
        for relative, linked in _walk(os.path.join(root, base), base):
            if matches(relative, pattern) and not any(matches(relative, x) for x in excluded):
                refused = linked and escapes(real_root, os.path.join(root, relative))
                (outside if refused else found).add(relative)
    return Listing(sorted(found), sorted(outside))


def _literal_prefix(glob: str) -> str:
    """The directories of `glob` before its first wildcard ("" for the root)."""
    parts = glob.split("/")[:-1]
    literal = []
    for part in parts:
        if any(char in part for char in "*?["):
            break
        literal.append(part)
    return "/".join(literal)


def _walk(directory: str, relative: str) -> Iterator[tuple[str, bool]]:
    """Repository-relative paths of the regular files below `directory`, each with whether
    it is a symlink (symlinked directories are not followed, as pathlib's glob does not
    either)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        path = f"{relative}/{entry.name}" if relative else entry.name
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path, path)
        elif entry.is_file():
            yield path, entry.is_symlink()


def inside(root: Path, relative: str) -> Path:
    """`root / relative`, refusing paths that leave the repository."""
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ConfigError(
            f"{relative!r} is outside the repository",
            hint="give paths and globs relative to the repository root, without '..'",
        )
    return root / relative
