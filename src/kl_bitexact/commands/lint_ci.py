"""`kl-bitexact lint-ci`: check that every registered suite really runs in CI."""

from __future__ import annotations

import argparse
from pathlib import Path

from kl_bitexact.commands import Command, not_built_yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="repository root (default: current directory)",
    )
    parser.add_argument(
        "--fix",
        action="store_true",
        help="register missing suites in the allowlist and workflow matrix",
    )


COMMAND = Command(
    name="lint-ci",
    summary="lint CI registration: every test's suite is allowlisted and dispatched",
    description="Read register_*_ci calls, allowlists and workflows; report every suite that "
    "would silently never run, and every registration that would break CI.",
    add_arguments=add_arguments,
    handler=not_built_yet("lint-ci", 8),
)
