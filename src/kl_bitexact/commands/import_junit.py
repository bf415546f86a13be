"""`kl-bitexact import-junit`: results.json from JUnit XML produced elsewhere."""

from __future__ import annotations

import argparse
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.commands.arguments import add_common_arguments
from kl_bitexact.commands.junit_import import import_and_write


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("junit_xml", type=Path, metavar="FILE.xml", help="JUnit XML from pytest")
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="the run's console output, for tests whose output the XML does not hold",
    )
    add_common_arguments(parser, "results.json")


def run_import(args: argparse.Namespace) -> int:
    results = args.out / "results.json"
    return import_and_write(args.junit_xml, args.log, results, args.min_cache_hit_ratio)


COMMAND = Command(
    name="import-junit",
    summary="turn JUnit XML (and its console log) from another run into results.json",
    description="Read JUnit XML written by pytest --junitxml elsewhere, recover the KL and "
    "cache-hit lines sglang's helpers printed (from the XML, or from --log when pytest did not "
    "capture them) and write DIR/results.json.",
    add_arguments=add_arguments,
    handler=run_import,
)
