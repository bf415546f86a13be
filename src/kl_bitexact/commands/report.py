"""`kl-bitexact report`: render results (and deltas against a baseline) as Markdown.

Exits with the gate's code (0 passes, 1 fails, 2 nothing executed) so a CI without the
GitHub integration can gate on it; `--fail-on never` makes it report-only.
"""

from __future__ import annotations

import argparse

from kl_bitexact.commands import Command, arguments, handlers
from kl_bitexact.commands.arguments import add_input_arguments, add_policy_arguments, path

# The work (its frozen Options, the comparison, the rendering) is report_work.py, imported
# when the work starts: `report --help` builds the arguments alone (issue 40).


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    parser.add_argument(
        "--baseline",
        type=path,
        metavar="BASE.json",
        help="results of the base branch, for KL deltas (a file that does not exist is an "
        "error; one that cannot be used is reported in the comment, not fatal)",
    )
    parser.add_argument(
        "--blockers",
        type=path,
        metavar="FILE",
        help='resolved blocker states, {"owner/repo#N": "open|merged|closed|unknown"}; '
        "without it every blocker is unknown",
    )
    parser.add_argument(
        "--out",
        type=path,
        metavar="FILE",
        help="write the Markdown here instead of standard output",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="do not trim to GitHub's 65,536-character comment limit",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the machine-readable verdict on standard output (the Markdown then "
        "goes only to --out)",
    )
    parser.add_argument(
        "--job-summary",
        type=path,
        metavar="FILE",
        help='append the job summary to FILE (in Actions: --job-summary "$GITHUB_STEP_SUMMARY")',
    )
    arguments.add_history_arguments(parser)
    add_policy_arguments(parser)


@handlers.cycle_collector_paused
def handle(args: argparse.Namespace) -> int:
    from kl_bitexact.commands import report_work

    options = report_work.Options.from_args(args)
    return int(report_work.report(options).decision.exit_code)


COMMAND = Command(
    name="report",
    summary="render results as the PR comment Markdown and decide the gate",
    description="Render one or more results.json files, with deltas against a baseline, as the "
    "Markdown of the sticky PR comment; exit with the gate's code.",
    add_arguments=add_arguments,
    handler=handle,
)
