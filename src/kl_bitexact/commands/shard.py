"""`kl-bitexact shard`: split a suite's files into balanced partitions."""

from __future__ import annotations

import argparse
from pathlib import Path

from kl_bitexact.commands import Command, not_built_yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", required=True, metavar="NAME", help="suite to partition")
    parser.add_argument(
        "--partitions", type=int, required=True, metavar="N", help="number of shards"
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="repository root (default: current directory)",
    )
    parser.add_argument(
        "--durations",
        type=Path,
        nargs="*",
        metavar="RESULTS.json",
        help="measured durations that override est_time",
    )


COMMAND = Command(
    name="shard",
    summary="partition a suite's files into balanced shards (GitHub matrix JSON)",
    description="Partition a suite's test files into N shards that finish together, and print "
    "the GitHub Actions matrix.",
    add_arguments=add_arguments,
    handler=not_built_yet("shard", 8),
)
