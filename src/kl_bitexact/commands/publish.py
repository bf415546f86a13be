"""`kl-bitexact publish`: post the sticky PR comment, set the status and gate the merge."""

from __future__ import annotations

import argparse
from pathlib import Path

from kl_bitexact.commands import Command, not_built_yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS.json",
        help="results of this run (several shards are merged)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="BASE.json",
        help="results of the base branch, for KL deltas",
    )
    parser.add_argument(
        "--pr", type=int, metavar="N", help="pull request number (default: from the GitHub event)"
    )
    parser.add_argument(
        "--fail-on",
        choices=("regression", "failure", "never"),
        default="regression",
        help="what fails the gate (default: %(default)s)",
    )


COMMAND = Command(
    name="publish",
    summary="post the sticky PR comment and set the merge gate",
    description="Post or update the one sticky PR comment, set the `kl-bitexact` commit status, "
    "write the job summary and exit with the gate's code.",
    add_arguments=add_arguments,
    handler=not_built_yet("publish", 7),
)
