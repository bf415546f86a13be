"""`kl-bitexact prove-plan`: which suites hold tests a PR adds or changes (the proof matrix).

Reads the head checkout's registered suite files (as `shard` does) and their versions in
the base checkout, and prints a GitHub matrix with one entry per suite that has a new or
changed test: `{"include": [{"suite", "name": "proof-<suite>", "files", "tests"}]}`. Only
files are read (YAML), nothing is executed. Only kl-bitexact suite files are looked at:
`run --prove-base` proves suite YAML tests, not registered Python test files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.commands.common import add_repository_arguments
from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import config, repo
from kl_bitexact.registry.model import SUITE_FILE_BACKEND
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


def handle(args: argparse.Namespace) -> int:
    if not args.base.is_dir():
        raise ConfigError(
            f"--base {args.base}: not a directory", hint="check out the base revision there"
        )
    state = repo.read(args.root, config.load(args.root, args.config))
    include = []
    for name in args.suite:
        files = sorted(
            {
                r.file
                for r in state.registrations
                if r.suite == name and r.enabled and r.backend == SUITE_FILE_BACKEND
            }
        )
        tests = _changed(args.root, files, args.base.resolve())
        if tests:
            include.append({"suite": name, "name": f"proof-{name}", "files": files, "tests": tests})
    print(json.dumps({"include": include}, separators=(",", ":")))
    for entry in include:
        print(f"{entry['suite']}: {', '.join(entry['tests'])}", file=sys.stderr)
    return 0


def _changed(root: Path, files: list[str], base: Path) -> list[str]:
    """Test ids new or changed in `files` (paths relative to `root`) against `base`."""
    suites = [s for file in files for s in suite_file.load(root / file)]
    paths = [Path(file) for file in files]
    return [change.test_id for change in changes.changed_tests(suites, paths, base)]


COMMAND = Command(
    name="prove-plan",
    summary="list the suites whose tests a PR adds or changes (the proof job matrix)",
    description="Compare the registered suite files of the head checkout with the base "
    "checkout and print the proof matrix: one entry per suite with a new or changed test.",
    add_arguments=add_arguments,
    handler=handle,
)
