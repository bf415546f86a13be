"""Paths kept inside a directory once symlinks are resolved (pure string work over
`os.path.realpath`): a repository's files may be symlinks, and a pull request decides what
they point at, so a reader checks before it opens (lint-ci, prove-plan) and a writer before
it writes (the proof run's copy of a head test file into the base checkout)."""

from __future__ import annotations

import os
from pathlib import Path


def escapes(real_root: str, path: str) -> bool:
    """True when `path`, every symlink in it resolved, is not under `real_root` (itself
    resolved: os.path.realpath(root))."""
    real = os.path.realpath(path)
    return real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep)


def outside_root(root: Path, relative: str) -> bool:
    """True when ROOT/relative resolves outside the root (a symlink in the way)."""
    return escapes(os.path.realpath(root), os.path.join(root, relative))
