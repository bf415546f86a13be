"""`kl-bitexact report`: render results (and deltas against a baseline) as Markdown.

Exits with the gate's code (0 passes, 1 fails, 2 nothing executed) so a CI without the
GitHub integration can gate on it; `--fail-on never` makes it report-only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kl_bitexact.commands import Command
from kl_bitexact.compare import baseline
from kl_bitexact.compare.comparison import Comparison, compare
from kl_bitexact.compare.gate import FailOn, Policy
from kl_bitexact.errors import ConfigError
from kl_bitexact.publish import blocker_lookup as blocker_states
from kl_bitexact.registry import findings_file as findings
from kl_bitexact.report import render
from kl_bitexact.results import io as results_io


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="BASE.json",
        help="results of the base branch, for KL deltas (missing or unreadable: reported, "
        "not fatal)",
    )
    parser.add_argument(
        "--blockers",
        type=Path,
        metavar="FILE",
        help='resolved blocker states, {"owner/repo#N": "open|merged|closed|unknown"}; '
        "without it every blocker is unknown",
    )
    parser.add_argument(
        "--out",
        type=Path,
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
        type=Path,
        metavar="FILE",
        help='append the job summary to FILE (in Actions: --job-summary "$GITHUB_STEP_SUMMARY")',
    )
    add_policy_arguments(parser)


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """What `report` and `publish` both read and render (results, findings, marker key)."""
    parser.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS.json",
        help="results of this run (several shards are merged)",
    )
    parser.add_argument(
        "--findings",
        type=Path,
        metavar="FILE",
        help="registration findings from `kl-bitexact lint-ci --format json`",
    )
    parser.add_argument(
        "--annotations",
        action="store_true",
        help="print workflow-command annotations (::error ...) on standard output first",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("GITHUB_WORKFLOW") or render.DEFAULT_KEY,
        help="key of the hidden comment marker (default: the workflow name, else %(default)s)",
    )


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fail-on",
        choices=[mode.value for mode in FailOn],
        default=FailOn.REGRESSION.value,
        help="what fails the gate (default: %(default)s)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="an unexpected green test fails the gate"
    )
    parser.add_argument(
        "--allow-unknown-blockers",
        action="store_true",
        help="a blocker whose state is unknown does not fail the gate",
    )
    parser.add_argument(
        "--repo",
        default=os.environ.get("GITHUB_REPOSITORY"),
        help="owner/repo that completes short #N blockers (default: $GITHUB_REPOSITORY)",
    )


def handle(args: argparse.Namespace) -> int:
    comparison = _compare(args)
    found = findings.load(args.findings) if args.findings else ()
    links = render.Links.from_env()
    if args.annotations:
        print("\n".join(render.workflow_commands(comparison)))
    budget = None if args.full else render.COMMENT_LIMIT
    body = render.comment(comparison, key=args.key, findings=found, links=links, budget=budget)
    if args.out:
        write_output(args.out, body)
    elif not args.json:
        sys.stdout.write(body)
    if args.job_summary:
        summary = render.job_summary(comparison, findings=found, links=links)
        write_output(args.job_summary, summary, append=True)
    if args.json:
        print(json.dumps(render.as_json(comparison), indent=2))
    return int(comparison.decision.exit_code)


def _compare(args: argparse.Namespace) -> Comparison:
    head = results_io.load_merged(args.results)
    policy = Policy(FailOn(args.fail_on), args.strict, args.allow_unknown_blockers)
    states = blocker_states.load(args.blockers) if args.blockers else None
    return compare(
        head, baseline.load(args.baseline), blockers=states, policy=policy, default_repo=args.repo
    )


def write_output(path: Path, text: str, *, append: bool = False) -> None:
    try:
        with path.open("a" if append else "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise ConfigError(f"{path}: cannot write ({error.strerror})") from None


COMMAND = Command(
    name="report",
    summary="render results as the PR comment Markdown and decide the gate",
    description="Render one or more results.json files, with deltas against a baseline, as the "
    "Markdown of the sticky PR comment; exit with the gate's code.",
    add_arguments=add_arguments,
    handler=handle,
)
