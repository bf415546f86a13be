"""The head's new and changed test files against a checkout of the base revision.

The proof of a registered Python test file (`kl-bitexact pytest --prove-base DIR`) runs the
units the head adds or changes (pychanges.py) with the base revision's engine: each head file
is written over its base version for the run and the base is put back afterwards. Nothing is
read or written through a symlink that leaves either checkout.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import pychanges, repo
from kl_bitexact.untrusted import confined


def changed_units(files: Sequence[str], base: Path) -> tuple[list[str], dict[str, str]]:
    """The new and changed units of the head's files, and the files that cannot be read
    (a symlink leaving the head checkout is never opened)."""
    units: list[str] = []
    refused: dict[str, str] = {}
    for file in files:
        after, why_not = repo.read_optional(Path.cwd(), file)
        if after is None:
            if not why_not:
                raise ConfigError(f"{file}: no such test file in the head checkout")
            refused[file] = f"the head's file {why_not}"
            units.append(file)
            continue
        before, _ = repo.read_optional(base, file)
        units += [change.test_id for change in pychanges.changed_units(file, after, before)]
    return units, refused


@contextlib.contextmanager
def head_files_in(base: Path, files: Sequence[str]) -> Iterator[dict[str, str]]:
    """Each head file written over its base version for the run, and the base put back
    afterwards (also on Ctrl-C); yields the files that could not be placed, with why."""
    refused: dict[str, str] = {}
    placed: list[tuple[Path, bytes | None, list[Path]]] = []
    try:
        for file in files:
            why_not = _unplaceable(base, file)
            if why_not:
                refused[file] = why_not
                continue
            target = base / file
            before = target.read_bytes() if target.exists() else None
            created = [d for d in reversed(target.parents) if not d.exists()]
            target.parent.mkdir(parents=True, exist_ok=True)
            placed.append((target, before, created))
            shutil.copyfile(file, target)
        yield refused
    finally:
        for target, before, created in reversed(placed):
            if before is None:
                target.unlink(missing_ok=True)
            else:
                target.write_bytes(before)
            for directory in reversed(created):
                with contextlib.suppress(OSError):  # pytest's __pycache__ may stay there
                    directory.rmdir()


def _unplaceable(base: Path, file: str) -> str:
    """Why the head's `file` cannot be written to the base checkout ("" if it can): never
    through a symlink, which could lead the write outside the checkout."""
    target = base / file
    if confined.outside_root(base, file):
        return "its path resolves outside the base checkout (a symlink), so it is not written"
    if target.is_symlink():
        return "it is a symlink on the base revision, so it is not overwritten"
    if target.exists() and not target.is_file():
        return "it is not a regular file on the base revision"
    return ""
