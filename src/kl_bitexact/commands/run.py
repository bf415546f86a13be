"""`kl-bitexact run`: run bit-exact suites against inference servers."""

from __future__ import annotations

import argparse
from pathlib import Path

from kl_bitexact.commands import Command, not_built_yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "suites",
        nargs="*",
        type=Path,
        metavar="SUITE.yaml",
        help="suite files; with none, the bundled example suite runs against the "
        "bundled reference server, started and stopped by this command",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("kl-bitexact-results"),
        metavar="DIR",
        help="where results.json, report.md and logs/ go (default: %(default)s)",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="use an already running server instead of launching the suite's command",
    )


COMMAND = Command(
    name="run",
    summary="run bit-exact suites and write results.json",
    description="Run bit-exact suites against an inference server: score every generated token "
    "while decoding and in a fresh prefill replay, compare, and count cache hits.",
    add_arguments=add_arguments,
    handler=not_built_yet("run", 4),
)
