"""`kl-bitexact report`: render results (and deltas against a baseline) as Markdown."""

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
        "--out",
        type=Path,
        metavar="FILE",
        help="write the Markdown here instead of standard output",
    )


COMMAND = Command(
    name="report",
    summary="render results as the PR comment Markdown",
    description="Render one or more results.json files, with deltas against a baseline, as the "
    "Markdown of the sticky PR comment.",
    add_arguments=add_arguments,
    handler=not_built_yet("report", 6),
)
