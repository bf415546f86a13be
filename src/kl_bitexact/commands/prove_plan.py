"""`kl-bitexact prove-plan`: which suites hold tests a PR adds or changes (the proof matrix).

Reads the head checkout's registered files (as `shard` does: kl-bitexact suite files and
Python test files registered with `register_<backend>_ci`) and their versions in the base
checkout, and prints a GitHub matrix with one entry per suite that has a new or changed
test: `{"include": [{"suite", "name": "proof-<suite>", "files", "tests"}]}`. `files` are the
suite's YAML files and those of its Python files with changes; `tests` the YAML test ids and
the Python units (node id prefixes: `file.py::Class::test`, `file.py::Class` or
`file.py`; registry/pychanges.py). Files are only read (YAML, Python's AST), never executed,
and only inside each checkout: a file that resolves outside it (a symlink) is not read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kl_bitexact.commands import Command
from kl_bitexact.commands.handlers import reads_python
from kl_bitexact.commands.repository import add_repository_arguments
from kl_bitexact.errors import ConfigError, did_you_mean
from kl_bitexact.registry import config, pychanges, repo
from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.suite import changes
from kl_bitexact.suite import load as suite_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base",
        type=Path,
        required=True,
        metavar="DIR",
        help="a checkout of the base revision (the PR's base commit)",
    )
    parser.add_argument(
        "--suite",
        action="append",
        required=True,
        metavar="NAME",
        help="registered suite name to look at; repeatable",
    )
    add_repository_arguments(parser)


@dataclass(frozen=True)
class Options:
    """What `prove-plan` was asked (the command line, or the action's inputs)."""

    base: Path
    suites: tuple[str, ...]
    root: Path
    config: Path | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(args.base, tuple(args.suite), args.root, args.config)


@dataclass(frozen=True)
class ProofPlan:
    """The proof matrix: one entry per suite with a new or changed test."""

    include: tuple[dict[str, Any], ...]

    def matrix(self) -> dict[str, list[dict[str, Any]]]:
        return {"include": list(self.include)}

    def lines(self) -> list[str]:
        """Each suite to prove and its tests, for a person reading the log."""
        return [f"{entry['suite']}: {', '.join(entry['tests'])}" for entry in self.include]


@reads_python
def handle(args: argparse.Namespace) -> int:
    planned = plan(Options.from_args(args))
    print(json.dumps(planned.matrix(), separators=(",", ":")))
    for line in planned.lines():
        print(line, file=sys.stderr)
    return 0


@reads_python
def plan(args: Options) -> ProofPlan:
    """The proof matrix (`kl-bitexact prove-plan`, and the action's prove-plan step)."""
    if not args.base.is_dir():
        raise ConfigError(
            f"--base {args.base}: not a directory", hint="check out the base revision there"
        )
    settings = config.load(args.root, args.config)
    state = repo.read(args.root, settings)
    unread = repo.unread_files(state)
    for path in unread:  # an escaping symlink: its suite is silently never proven otherwise
        say(
            f"{path}: resolves outside the checkout (a symlink), so it is not read: a suite "
            "registered there is not proven"
        )
    base = args.base.resolve()
    include = []
    for name in args.suites:
        members = _members(args.root, settings, state, name, unread)
        yaml_files = sorted({r.file for r in members if r.backend == SUITE_FILE_BACKEND})
        tests = _changed(args.root, yaml_files, base)
        python = _python_changes(
            args.root, sorted({r.file for r in members if r.backend != SUITE_FILE_BACKEND}), base
        )
        tests += [unit for units in python.values() for unit in units]
        if tests:
            files = yaml_files + sorted(python)
            include.append({"suite": name, "name": f"proof-{name}", "files": files, "tests": tests})
        elif members:
            say(f"suite {name}: no test added or changed against {args.base}: nothing to prove")
    return ProofPlan(tuple(include))


def say(line: str) -> None:
    print(f"prove-plan: {line}", file=sys.stderr)


def _members(
    root: Path, settings: config.RegistryConfig, state: repo.RepoState, name: str, unread: list[str]
) -> list[Registration]:
    """The enabled registrations of suite `name`; a name registered nowhere is an error
    (it printed an empty plan and passed: no new test was ever proven, issue 27)."""
    named = [r for r in state.registrations if r.suite == name]
    if not named:
        raise _unknown_suite(root, settings, state, name, unread)
    enabled = [r for r in named if r.enabled]
    if not enabled:
        say(f"suite {name}: every file registered to it is disabled: nothing to prove")
    return enabled


def _unknown_suite(
    root: Path, settings: config.RegistryConfig, state: repo.RepoState, name: str, unread: list[str]
) -> ConfigError:
    stray = repo.stray_suite_files(root, settings, name)
    read = ", ".join([*settings.suite_files, *settings.registered])
    if stray:
        return ConfigError(
            f"--suite {name}: defined in {', '.join(stray)}, outside the files prove-plan "
            f"reads ({read})",
            hint="move the suite file there, or add its folder to `registry.suite-files` in "
            ".kl-bitexact.yaml",
        )
    known = sorted({r.suite for r in state.registrations})
    not_read = f"; not read: {', '.join(unread)} (outside the checkout)" if unread else ""
    return ConfigError(
        f"--suite {name}: no file registers this suite ({read}){not_read}",
        hint=did_you_mean(name, known)
        or (f"registered suites: {_some(known)}" if known else "no suite is registered"),
    )


def _changed(root: Path, files: list[str], base: Path) -> list[str]:
    """Test ids new or changed in `files` (paths relative to `root`) against `base`."""
    suites = [s for file in files for s in suite_file.load(root / file)]
    paths = [Path(file) for file in files]
    return [change.test_id for change in changes.changed_tests(suites, paths, base)]


def _python_changes(root: Path, files: list[str], base: Path) -> dict[str, list[str]]:
    """The new and changed units of each registered Python file with any."""
    found = {}
    for file in files:
        before, why_not = repo.read_optional(base, file)
        if why_not:
            print(
                f"{file} on the base revision: {why_not}; its tests count as new", file=sys.stderr
            )
        after = repo.read_text(root, file)
        units = [change.test_id for change in pychanges.changed_units(file, after, before)]
        if units:
            found[file] = units
    return found


COMMAND = Command(
    name="prove-plan",
    summary="list the suites whose tests a PR adds or changes (the proof job matrix)",
    description="Compare the registered suite files and Python test files of the head "
    "checkout with the base checkout and print the proof matrix: one entry per suite with a "
    "new or changed test.",
    add_arguments=add_arguments,
    handler=handle,
)


def _some(names: list[str], shown: int = 8) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
