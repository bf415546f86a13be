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

from github.PullRequest import PullRequest

from kl_bitexact.commands import Command, arguments, handlers, input_files
from kl_bitexact.commands.arguments import add_input_arguments, add_policy_arguments
from kl_bitexact.commands.comment_inputs import CommentInputs
from kl_bitexact.commands.output import say_notice, write_output
from kl_bitexact.compare import baseline, excuses, history_dir
from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.compare.comparison import Comparison, compare
from kl_bitexact.compare.history import History
from kl_bitexact.errors import ConfigError
from kl_bitexact.publish import baseline_fetch, history_fetch, labeller, status, sticky
from kl_bitexact.publish import blocker_lookup as blocker_states
from kl_bitexact.publish.client import (
    ClientSettings,
    PullRequestTarget,
    Session,
    Target,
    open_session,
)
from kl_bitexact.registry import findings_file as findings
from kl_bitexact.report import render
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results
from kl_bitexact.suite.references import BlockerRef


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
    _add_history_arguments(parser)
    _add_blocker_arguments(parser)
    parser.add_argument(
        "--comment-author",
        metavar="LOGIN",
        help="login the comment is posted as; only its comments are ours (default: the "
        "token's own user, or github-actions[bot] for GITHUB_TOKEN; a GitHub App token "
        "needs its APP-SLUG[bot])",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help='keep a history line ("updated for <sha>") at the end of the comment',
    )
    add_policy_arguments(parser, publishes=True)


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
    parser.add_argument(
        "--baseline-event",
        action="append",
        metavar="EVENT",
        help="a run of this event on the base branch may give the baseline (repeatable; "
        "default: push). Runs of other events, runs of another repository's code (a fork "
        "PR whose branch has the same name) and commits not on the branch never do",
    )


def _add_history_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_history_arguments(parser)
    parser.add_argument(
        "--fetch-history",
        action="store_true",
        help="fetch the history: the results artifacts of the newest --history-runs runs "
        "of the baseline's workflow on the PR's base branch, chosen by the baseline's rules "
        "(--baseline-event; this repository's code; a commit on the branch), whatever their "
        "conclusion, each archive bounded as the baseline's; progress on stderr",
    )
    arguments.add_history_fetch_arguments(parser)


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
    parser.add_argument(
        "--blocker-repo",
        action="append",
        metavar="OWNER/NAME",
        help="also look blockers up in this repository, or those a glob matches (OWNER/*); "
        "repeatable (default: the repository owner's, OWNER/*; the repository itself always). "
        "References elsewhere are unknown: not looked up",
    )
    parser.add_argument(
        "--blocker-label",
        metavar="LABEL",
        default=excuses.DEFAULT_LABEL,
        help="a maintainer's label on the pull request that lets the blocked_by markers it "
        "adds excuse its red tests before the base branch has them (default: %(default)s); "
        "it counts only when someone other than the PR's author added it (the issue events "
        "say who); a marker naming the pull request itself never excuses",
    )
    parser.add_argument(
        "--max-blocker-lookups",
        type=_non_negative,
        default=blocker_states.DEFAULT_MAX_LOOKUPS,
        metavar="N",
        help="look up at most N distinct blocked_by references per run; the rest are unknown "
        "(default: %(default)s)",
    )


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


@dataclass(frozen=True)
class BaselineSource:
    """Where the base branch's results come from: a file, or a fetched artifact."""

    file: Path | None
    fetch: bool
    workflow: str | None
    artifact: str
    events: tuple[str, ...] = baseline_fetch.DEFAULT_EVENTS


@dataclass(frozen=True)
class HistorySource:
    """Where the base branch's recent runs come from: a directory, a fetch, or nowhere."""

    directory: Path | None
    fetch: bool
    runs: int
    cache: Path | None
    timeout_s: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> HistorySource:
        if args.fetch_history and args.history_dir is not None:
            raise ConfigError(
                "--fetch-history and --history-dir both give the history",
                hint="pass one: --history-dir DIR reads it offline, --fetch-history from GitHub",
            )
        return cls(
            args.history_dir,
            args.fetch_history,
            args.history_runs,
            args.history_cache,
            args.history_timeout,
        )


@dataclass(frozen=True)
class Options:
    """Everything `publish` was asked to do, read once from the command line."""

    shown: CommentInputs  # what report and publish both read and show
    pr: int | None
    sha: str | None
    baseline: BaselineSource
    base_history: HistorySource
    blockers: Path | None
    blockers_out: Path | None
    blocker_label: str
    blocker_repos: tuple[str, ...]
    max_blocker_lookups: int
    settings: ClientSettings  # timeouts, retries, pacing (KL_BITEXACT_GITHUB_*)
    comment_author: str | None
    history: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(
            shown=CommentInputs.from_args(args),
            pr=args.pr,
            sha=args.sha,
            baseline=BaselineSource(
                args.baseline,
                args.fetch_baseline,
                args.baseline_workflow,
                args.baseline_artifact,
                tuple(args.baseline_event or baseline_fetch.DEFAULT_EVENTS),
            ),
            base_history=HistorySource.from_args(args),
            blockers=args.blockers,
            blockers_out=args.blockers_out,
            blocker_label=args.blocker_label,
            blocker_repos=tuple(args.blocker_repo or ()),
            max_blocker_lookups=args.max_blocker_lookups,
            settings=ClientSettings.from_env(os.environ),
            comment_author=args.comment_author,
            history=args.history,
        )


@dataclass(frozen=True)
class Published:
    """What `publish` did: the comment (its id), the status, and the gate's exit code."""

    comment: sticky.Outcome
    status: status.Status
    exit_code: int

    def line(self) -> str:
        return (
            f"kl-bitexact: comment {self.comment.action} (id {self.comment.comment_id}); "
            f"status {self.status.state}: {self.status.description}"
        )


@handlers.cycle_collector_paused
def handle(args: argparse.Namespace) -> int:
    published = publish(Options.from_args(args), os.environ)
    print(published.line())
    return published.exit_code


def publish(options: Options, env: Mapping[str, str]) -> Published:
    """The work of `publish` (the command, and the action's publish step, in process): the
    token, the repository and the event come from `env`."""
    head = input_files.load_results(options.shown.results, options.shown.expected_shards)
    found = findings.load(options.shown.findings) if options.shown.findings else ()
    with open_session(
        env,
        settings=options.settings,
        repository=options.shown.repo,
        pr_number=options.pr,
        head_sha=options.sha,
    ) as session:
        return _run(options, _pull_request(session.target), session, head, found)


def _run(
    options: Options,
    target: PullRequestTarget,
    session: Session,
    head: results.Results,
    found: tuple[findings.Finding, ...],
) -> Published:
    pull = _pull(session, target)
    marked = target.head_sha or pull.head.sha
    proof = input_files.load_proof(options.shown.proof, options.shown.expected_proofs)
    tested = results_io.tested_commit([("results", head), ("proof", proof or results.Results())])
    # Before anything is fetched or written: results of another commit mark nothing.
    status.refuse_other_commit(tested, marked)
    base = _baseline(options.baseline, session, target, pull.base.ref)
    say_notice(baseline.notice(base))
    grant = _grant(options, session, target, pull)
    promised = excuses.promised(head, base.results, grant, target.repository)
    head = excuses.vetted(head, base.results, grant, target.repository)
    blockers = _blocker_states(options, session, target, head, public=_public(pull))
    comparison = compare(
        head,
        base,
        blockers=blockers.states,
        policy=options.shown.policy,
        default_repo=target.repository,
        proof=proof,
        blocker_reasons=blockers.reasons,
        history=_history(options, session, target.repository, pull.base.ref),
        promised=promised,
    )
    status.refuse_unbound_pass(tested, marked, comparison.decision)
    # The summary and annotations come first: if GitHub then refuses the comment (a
    # read-only token on a fork PR), the report is still on the run's page.
    for command in render.workflow_commands(comparison) if options.shown.annotations else ():
        print(command)
    _write_summary(os.environ, render.job_summary(comparison, findings=found))
    return _publish(options, target, session, pull, marked, comparison, found)


def _pull_request(target: Target) -> PullRequestTarget:
    """Publishing needs a pull request: an event about none (a push) is a usage error."""
    if target.pr_number is None:
        raise ConfigError(
            "no pull request number: this event is not about a pull request",
            hint="pass --pr N, or run on pull_request, issue_comment or workflow_run events",
        )
    return PullRequestTarget(target.repository, target.pr_number, target.head_sha)


def _pull(session: Session, target: PullRequestTarget) -> PullRequest:
    with session.translated(f"reading pull request {target}"):
        pull = session.client.get_repo(target.repository).get_pull(target.number)
        pull.head.sha  # noqa: B018 - fetch now, so a missing PR fails here, clearly
    return pull


def _baseline(
    source: BaselineSource, session: Session, target: PullRequestTarget, branch: str
) -> Baseline:
    if not source.fetch:
        return baseline.load(source.file)
    return baseline_fetch.fetch(
        session,
        target.repository,
        _workflow(source, "--fetch-baseline"),
        branch,
        source.artifact,
        events=source.events,
    )


def _history(options: Options, session: Session, repository: str, branch: str) -> History | None:
    source = options.base_history
    if not source.fetch:
        return input_files.history_from_dir(source.directory, source.runs)
    return _fetched_history(options, session, repository, branch)


def _fetched_history(options: Options, session: Session, repository: str, branch: str) -> History:
    """`branch`'s last runs, by the baseline's rules (its workflow, artifact and events),
    within the history's bounds, kept in its cache."""
    source = options.base_history
    workflow = _workflow(options.baseline, "--fetch-history")
    wanted = baseline_fetch.Wanted(
        repository, workflow, branch, options.baseline.artifact, options.baseline.events
    )
    bounds = history_fetch.Bounds(runs=source.runs, deadline_s=source.timeout_s)
    cache = source.cache or history_fetch.default_cache()
    return history_fetch.fetch(session, wanted, cache, bounds)


def branch_history(options: Options, env: Mapping[str, str]) -> History:
    """The history of the branch a run with no pull request tested (a push to main: the
    branch GITHUB_REF names), fetched as a pull request's base branch's is: the same runs,
    bounds and cache. The action's publish step gives it to `report` on such a run, so its
    gate tells new failures from known ones, and the cache it fills is the next pull
    request's. A GitHub that refuses is a note in the history; a fetch that cannot start
    (no token, no branch) raises."""
    branch = _tested_branch(env.get("GITHUB_REF", ""))
    with open_session(env, settings=options.settings, repository=options.shown.repo) as session:
        return _fetched_history(options, session, session.target.repository, branch)


def _tested_branch(ref: str) -> str:
    if not ref.startswith(history_dir.BRANCH_REF):
        raise ConfigError(
            f"GITHUB_REF {ref!r} names no branch",
            hint="a branch's history is fetched on a run of that branch (a push to it)",
        )
    return ref.removeprefix(history_dir.BRANCH_REF)


def _workflow(source: BaselineSource, option: str) -> str:
    if not source.workflow:
        raise ConfigError(
            f"{option} needs the workflow whose runs hold the baseline",
            hint="pass --baseline-workflow FILE.yml (GitHub Actions sets GITHUB_WORKFLOW_REF)",
        )
    return source.workflow


def _grant(
    options: Options, session: Session, target: PullRequestTarget, pull: PullRequest
) -> excuses.Grant:
    """This pull request, and whether the maintainers' label is on it and who put it there
    (only people with triage or write access can label a pull request; its author may be
    one of them). Who did is asked only when the label is there."""
    owner, repo = target.repository.split("/", 1)
    labels = pull.raw_data.get("labels")
    names = {label.get("name") for label in labels if isinstance(label, dict)} if labels else ()
    labelled = None
    if options.blocker_label in names:
        labelled = labeller.labelling(session, pull, options.blocker_label)
    return excuses.Grant(BlockerRef(owner, repo, target.number), options.blocker_label, labelled)


def _public(pull: PullRequest) -> bool:
    """Whether the PR (so its comment) is public: its repository says `private: false`;
    anything else counts as public, which shows less."""
    base = pull.raw_data.get("base")
    repo = base.get("repo") if isinstance(base, dict) else None
    return not (isinstance(repo, dict) and repo.get("private") is True)


def _blocker_states(
    options: Options,
    session: Session,
    target: PullRequestTarget,
    head: results.Results,
    *,
    public: bool,
) -> blocker_states.Resolved:
    if options.blockers is not None:
        return blocker_states.Resolved(blocker_states.load(options.blockers))
    refs = blocker_states.refs_in(head, target.repository)
    scope = blocker_states.Scope.of(
        target.repository, options.blocker_repos, options.max_blocker_lookups, public=public
    )
    fetch = blocker_states.issue_fetcher(session)
    private = blocker_states.privacy_fetcher(session)
    resolved = blocker_states.resolve(refs, fetch, scope, private)
    if options.blockers_out is not None:
        write_output(options.blockers_out, blocker_states.dumps(resolved.states))
    return resolved


def _publish(
    options: Options,
    target: PullRequestTarget,
    session: Session,
    pull: PullRequest,
    sha: str,
    comparison: Comparison,
    found: tuple[findings.Finding, ...],
) -> Published:
    links = render.Links.from_env()
    budget = render.COMMENT_LIMIT - sticky.HISTORY_RESERVE
    body = render.comment(
        comparison, key=options.shown.key, findings=found, links=links, budget=budget
    )
    history = f"updated for {sha[:12]}" if options.history else None
    with session.translated(f"writing the sticky comment on #{target.number}"):
        author = sticky.publishing_login(session.client, options.comment_author)
        attempts = sticky.Attempts(options.settings.retries + 1, options.settings.backoff_factor)
        outcome = sticky.upsert(
            pull, options.shown.key, body, history_line=history, author=author, create=attempts
        )
    verdict = status.of(comparison.decision)
    status.post(session, target, sha, verdict, links.run)
    return Published(outcome, verdict, int(comparison.decision.exit_code))


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
