"""`kl-bitexact publish`: post the sticky PR comment, set the status and gate the merge.

The steps, in order: read and validate the results (they come from a run that executed PR
code), find the pull request, get the baseline (a file, or the newest successful base-branch
run's artifact), resolve every blocker once, compare, then write: the one sticky comment,
the `kl-bitexact` commit status, the job summary. The exit code is the gate's.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from github import Github
from github.GithubObject import NotSet
from github.PullRequest import PullRequest

from kl_bitexact.commands import Command
from kl_bitexact.commands.common import add_input_arguments, add_policy_arguments, write_output
from kl_bitexact.compare import baseline
from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import Comparison, compare
from kl_bitexact.compare.gate import Decision, FailOn, Policy
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.publish import baseline_fetch, sticky
from kl_bitexact.publish import blocker_lookup as blocker_states
from kl_bitexact.publish.client import ClientSettings, Target, connect, resolve_target, translated
from kl_bitexact.registry import findings_file as findings
from kl_bitexact.report import render
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results

STATUS_CONTEXT = "kl-bitexact"
MAX_STATUS_DESCRIPTION = 140  # GitHub refuses longer status descriptions
_STATUS_STATE = {
    ExitCode.GATE_PASSED: "success",
    ExitCode.GATE_FAILED: "failure",
    ExitCode.COULD_NOT_RUN: "error",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser)
    parser.add_argument(
        "--pr", type=int, metavar="N", help="pull request number (default: from the GitHub event)"
    )
    parser.add_argument(
        "--sha",
        help="commit that was tested, for the status (default: the PR head the triggering "
        "event saw, else the PR's current head)",
    )
    _add_baseline_arguments(parser)
    _add_blocker_arguments(parser)
    parser.add_argument(
        "--comment-author",
        metavar="LOGIN",
        help="login the comment is posted as (needed with a personal access token; by "
        "default the comment of any bot, as GITHUB_TOKEN and GitHub Apps are, counts)",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help='keep a history line ("updated for <sha>") at the end of the comment',
    )
    add_policy_arguments(parser)


def _add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--baseline",
        type=Path,
        metavar="BASE.json",
        help="results of the base branch, for KL deltas",
    )
    source.add_argument(
        "--fetch-baseline",
        action="store_true",
        help="fetch the baseline from the newest successful run of the workflow on the "
        "PR's base branch (its results artifact)",
    )
    parser.add_argument(
        "--baseline-workflow",
        metavar="FILE",
        default=baseline_fetch.workflow_file(os.environ.get("GITHUB_WORKFLOW_REF")),
        help="workflow file name whose runs hold the baseline (default: this workflow)",
    )
    parser.add_argument(
        "--baseline-artifact",
        metavar="NAME",
        default=baseline_fetch.DEFAULT_ARTIFACT,
        help="artifact name holding results.json (default: %(default)s)",
    )


def _add_blocker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--blockers",
        type=Path,
        metavar="FILE",
        help="use these resolved blocker states instead of asking GitHub",
    )
    parser.add_argument(
        "--blockers-out",
        type=Path,
        metavar="FILE",
        help="write the resolved blocker states here (for `report --blockers`)",
    )


@dataclass(frozen=True)
class Published:
    comment: sticky.Outcome
    status_state: str
    status_description: str


def handle(args: argparse.Namespace) -> int:
    head = results_io.load_merged(args.results)
    found = findings.load(args.findings) if args.findings else ()
    target = _target(args, os.environ)
    client = connect(target, ClientSettings.from_env(os.environ))
    try:
        return _run(args, target, client, head, found)
    finally:
        client.close()


def _run(
    args: argparse.Namespace,
    target: Target,
    client: Github,
    head: results.Results,
    found: tuple[findings.Finding, ...],
) -> int:
    pull = _pull(client, target)
    comparison = compare(
        head,
        _baseline(args, client, target, pull.base.ref),
        blockers=_blocker_states(args, client, target, head),
        policy=Policy(FailOn(args.fail_on), args.strict, args.allow_unknown_blockers),
        default_repo=target.repository,
    )
    # The summary and annotations come first: if GitHub then refuses the comment (a
    # read-only token on a fork PR), the report is still on the run's page.
    for command in render.workflow_commands(comparison) if args.annotations else ():
        print(command)
    _write_summary(os.environ, render.job_summary(comparison, findings=found))
    published = _publish(args, target, client, pull, comparison, found)
    # Contract: `kl-bitexact action` (action.yml's publish step) reads the comment id here.
    print(
        f"kl-bitexact: comment {published.comment.action} (id {published.comment.comment_id}); "
        f"status {published.status_state}: {published.status_description}"
    )
    return int(comparison.decision.exit_code)


def _target(args: argparse.Namespace, env: Mapping[str, str]) -> Target:
    target = resolve_target(env, repository=args.repo, pr_number=args.pr, head_sha=args.sha)
    if target.pr_number is None:
        raise ConfigError(
            "no pull request number: this event is not about a pull request",
            hint="pass --pr N, or run on pull_request, issue_comment or workflow_run events",
        )
    return target


def _pull(client: Github, target: Target) -> PullRequest:
    where = f"{target.repository}#{target.pr_number}"
    with translated(f"reading pull request {where}", target.token):
        pull = client.get_repo(target.repository).get_pull(int(target.pr_number or 0))
        pull.head.sha  # noqa: B018 - fetch now, so a missing PR fails here, clearly
    return pull


def _baseline(args: argparse.Namespace, client: Github, target: Target, branch: str) -> Baseline:
    if not args.fetch_baseline:
        return baseline.load(args.baseline)
    if not args.baseline_workflow:
        raise ConfigError(
            "--fetch-baseline needs the workflow whose runs hold the baseline",
            hint="pass --baseline-workflow FILE.yml (GitHub Actions sets GITHUB_WORKFLOW_REF)",
        )
    return baseline_fetch.fetch(
        client,
        target.repository,
        args.baseline_workflow,
        branch,
        args.baseline_artifact,
        target.token,
    )


def _blocker_states(
    args: argparse.Namespace, client: Github, target: Target, head: results.Results
) -> dict[str, BlockerState]:
    if args.blockers is not None:
        return blocker_states.load(args.blockers)
    refs = blocker_states.refs_in(head, target.repository)
    states = blocker_states.resolve(refs, blocker_states.issue_fetcher(client, target.token))
    if args.blockers_out is not None:
        write_output(args.blockers_out, blocker_states.dumps(states))
    return states


def _publish(
    args: argparse.Namespace,
    target: Target,
    client: Github,
    pull: PullRequest,
    comparison: Comparison,
    found: tuple[findings.Finding, ...],
) -> Published:
    links = render.Links.from_env()
    budget = render.COMMENT_LIMIT - sticky.HISTORY_RESERVE
    body = render.comment(comparison, key=args.key, findings=found, links=links, budget=budget)
    sha = target.head_sha or pull.head.sha
    history = f"updated for {sha[:12]}" if args.history else None
    with translated(f"writing the sticky comment on #{target.pr_number}", target.token):
        outcome = sticky.upsert(
            pull, args.key, body, history_line=history, author=args.comment_author
        )
    state = _STATUS_STATE[comparison.decision.exit_code]
    description = verdict_line(comparison.decision)
    with translated(f"setting the {STATUS_CONTEXT} status on {sha[:12]}", target.token):
        client.get_repo(target.repository).get_commit(sha).create_status(
            state,
            target_url=links.run or NotSet,
            description=description,
            context=STATUS_CONTEXT,
        )
    return Published(outcome, state, description)


def verdict_line(decision: Decision) -> str:
    """One line for the commit status: the label and, when it failed, why."""
    line = decision.label
    if decision.reasons:
        line += ": " + ", ".join(decision.reasons)
    if len(line) > MAX_STATUS_DESCRIPTION:
        line = line[: MAX_STATUS_DESCRIPTION - 1] + "…"
    return line


def _write_summary(env: Mapping[str, str], summary: str) -> None:
    path = env.get("GITHUB_STEP_SUMMARY")
    if path:
        write_output(Path(path), summary, append=True)


COMMAND = Command(
    name="publish",
    summary="post the sticky PR comment and set the merge gate",
    description="Post or update the one sticky PR comment, set the `kl-bitexact` commit status, "
    "write the job summary and exit with the gate's code.",
    add_arguments=add_arguments,
    handler=handle,
)
