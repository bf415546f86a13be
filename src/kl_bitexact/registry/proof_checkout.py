"""The head's new and changed test files against a checkout of the base revision.

The proof of a registered Python test file (`kl-bitexact pytest --prove-base DIR`) runs the
units the head adds or changes (pychanges.py) with the base revision's engine: each head file
is written over its base version for the run and the base is put back afterwards, from a
journal that survives the run (head_files_in). Nothing is read or written through a symlink
that leaves either checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import pychanges, repo
from kl_bitexact.run import watchdog
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


# Beside the files it journals, in the base checkout: where the next proof run looks first.
JOURNAL_DIR = ".kl-bitexact-proof-journal"


@contextlib.contextmanager
def head_files_in(
    base: Path, files: Sequence[str], journaled: Callable[[Path], None] = lambda _: None
) -> Iterator[dict[str, str]]:
    """Each head file written over its base version for the run, and the base put back
    afterwards; yields the files that could not be placed, with why.

    Every replacement is journaled first (the original's copy and where it goes, in
    JOURNAL_DIR of the base checkout), so the base comes back however the run ends: by
    this block, by the run's watchdog when the run was SIGKILLed (`journaled` hands it the
    journal), or by the next proof run, which finds a journal left behind and puts it back
    before anything else (issue 30, item 6)."""
    journal = base / JOURNAL_DIR
    _recover(journal)
    journal.mkdir()
    journaled(journal)
    refused: dict[str, str] = {}
    entries: list[dict[str, object]] = []
    try:
        for number, file in enumerate(files):
            why_not = _unplaceable(base, file)
            if why_not:
                refused[file] = why_not
                continue
            entries.append(_journal_entry(base, journal, file, number))
            _write_journal(journal, entries)  # before the base's file is touched
            (base / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, base / file)
        yield refused
    finally:
        watchdog.restore_journal(str(journal))


def _journal_entry(base: Path, journal: Path, file: str, number: int) -> dict[str, object]:
    target = base / file
    backup = None
    if target.exists():
        backup = f"backup-{number}"
        shutil.copyfile(target, journal / backup)
    created = [str(d.relative_to(base)) for d in reversed(target.parents) if not d.exists()]
    return {"target": file, "backup": backup, "created": created}


def _write_journal(journal: Path, entries: list[dict[str, object]]) -> None:
    """Written whole and renamed into place: a run killed mid-write leaves the last one."""
    partial = journal / f"{watchdog.JOURNAL_FILE}.partial"
    partial.write_text(json.dumps(entries), encoding="utf-8")
    os.replace(partial, journal / watchdog.JOURNAL_FILE)


def _recover(journal: Path) -> None:
    """A journal an earlier proof run left (it and its watchdog were stopped before they
    could put the base back): put it back now, and say so."""
    if journal.is_symlink() or journal.is_file():
        journal.unlink()
    if not journal.is_dir():
        return
    restored = watchdog.restore_journal(str(journal))
    print(
        f"kl-bitexact: put back {len(restored)} base file(s) an interrupted proof run "
        f"left replaced: {', '.join(restored) or '(none)'}",
        file=sys.stderr,
    )


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
