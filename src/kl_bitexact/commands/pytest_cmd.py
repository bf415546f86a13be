"""`kl-bitexact pytest`: run existing pytest/unittest suites and turn them into results."""

from __future__ import annotations

import argparse
from pathlib import Path

from kl_bitexact.commands import Command, not_built_yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("kl-bitexact-results"),
        metavar="DIR",
        help="where results.json goes (default: %(default)s)",
    )
    parser.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        metavar="-- PYTEST_ARGS",
        help="arguments passed to pytest",
    )


COMMAND = Command(
    name="pytest",
    summary="run sglang-style pytest/unittest suites and recover their KL metrics",
    description="Run existing bit-exact test files with pytest and convert every test, and the "
    "KL and cache-hit lines it printed, into results.json.",
    add_arguments=add_arguments,
    handler=not_built_yet("pytest", 10),
)
