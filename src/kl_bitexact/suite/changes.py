"""Which tests of the head's suite files are new or changed against the base revision.

The proof of new tests (docs/suites.md) runs exactly these on the base revision's engine.
A test is new when no base suite file (the same paths under the base checkout) defines its
id; changed when its definition differs once parsed (check parameters, prompts, or its
suite's server). Comparing parsed specs, not text, ignores comments and formatting. A base
file that resolves outside the base checkout (a symlink) is not read: its tests count as new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.errors import ConfigError
from kl_bitexact.suite import load as suite_file
from kl_bitexact.suite.model import ServerSpec, Suite, TestSpec
from kl_bitexact.untrusted import confined


@dataclass(frozen=True)
class Change:
    test_id: str
    kind: str  # "new" | "changed"


def changed_tests(
    head: Sequence[Suite], head_paths: Sequence[Path], base_root: Path
) -> list[Change]:
    """The new and changed tests of `head` (loaded from `head_paths`, relative to the
    current directory) against the same paths under `base_root`."""
    base = _base_definitions(head_paths, base_root)
    changes = []
    for suite in head:
        for test in suite.tests:
            test_id = f"{suite.name}::{test.name}"
            before = base.get(test_id)
            if before is None:
                changes.append(Change(test_id, "new"))
            elif before != (suite.server, test):
                changes.append(Change(test_id, "changed"))
    return changes


def _base_definitions(
    head_paths: Sequence[Path], base_root: Path
) -> dict[str, tuple[ServerSpec, TestSpec]]:
    definitions: dict[str, tuple[ServerSpec, TestSpec]] = {}
    for path in head_paths:
        relative = _relative(path)
        base_path = base_root / relative
        if confined.outside_root(base_root, str(relative)):
            continue  # a symlink leaving the base checkout is never opened: all tests new
        if not base_path.is_file():
            continue  # a new file: every test in it is new
        try:
            suites = suite_file.load(base_path)
        except ConfigError:
            continue  # the base cannot read it: every test counts as new
        for suite in suites:
            for test in suite.tests:
                definitions[f"{suite.name}::{test.name}"] = (suite.server, test)
    return definitions


def _relative(path: Path) -> Path:
    if not path.is_absolute():
        return path
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        raise ConfigError(
            f"{path}: outside the current directory, so its base version cannot be found",
            hint="run from the head checkout's root with suite paths relative to it",
        ) from None
