"""The work of `kl-bitexact report` (commands/report.py), apart from its arguments: its frozen
`Options` and `report`, which the command's handler and the action's report step (in
process) call. Imported when the work starts, so `report --help` imports no dataclass, path
or comparison machinery (issue 40)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from kl_bitexact.commands.comment_inputs import CommentInputs

# `typing` only for mypy; the compare and render modules when the work starts.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from kl_bitexact.compare.blockers import BlockerState
    from kl_bitexact.compare.comparison import Comparison
    from kl_bitexact.compare.history import History
    from kl_bitexact.registry.findings_file import Finding


@dataclass(frozen=True)
class Options:
    """Everything `report` was asked to do (the command line, or the action's inputs)."""

    shown: CommentInputs  # what report and publish both read and show
    baseline: Path | None
    blockers: Path | None
    out: Path | None
    full: bool
    json: bool
    job_summary: Path | None
    history_dir: Path | None
    history_runs: int
    # A history already at hand, in place of `history_dir`'s: the branch's own, which the
    # action's publish step fetched on a run with no pull request (a push to main).
    history: History | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(
            shown=CommentInputs.from_args(args),
            baseline=args.baseline,
            blockers=args.blockers,
            out=args.out,
            full=args.full,
            json=args.json,
            job_summary=args.job_summary,
            history_dir=args.history_dir,
            history_runs=args.history_runs,
        )


def report(args: Options) -> Comparison:
    """The work of `report` (the command, and the action's report step, in process): the
    comparison, rendered where `args` says; its decision is the gate's."""
    from kl_bitexact.commands.output import say_notice, write_output
    from kl_bitexact.report import render, terminal

    comparison = _compare(args)
    found = _findings(args.shown.findings) if args.shown.findings else ()
    links = render.Links.from_env()
    if args.shown.annotations:
        print("\n".join(render.workflow_commands(comparison)))
    budget = None if args.full else render.COMMENT_LIMIT
    body = render.comment(
        comparison, key=args.shown.key, findings=found, links=links, budget=budget
    )
    if args.out:
        write_output(args.out, body)
        say_notice(f"kl-bitexact: wrote the PR comment to {args.out} ({len(body):,} characters)")
    elif not args.json:
        sys.stdout.write(body)
    if args.job_summary:
        summary = render.job_summary(comparison, findings=found, links=links)
        write_output(args.job_summary, summary, append=True)
    if args.json:
        import json

        print(json.dumps(render.as_json(comparison), indent=2))
    # Why the exit code is not 0, last (issue 37): which tests, which rule.
    say_notice(terminal.exit_line(comparison, comparison.decision.exit_code))
    return comparison


def _compare(args: Options) -> Comparison:
    from kl_bitexact.commands import input_files
    from kl_bitexact.commands.output import say_notice
    from kl_bitexact.compare import baseline
    from kl_bitexact.compare.comparison import compare

    head = input_files.load_results(args.shown.results, args.shown.expected_shards)
    policy = args.shown.policy
    states = _blocker_states(args.blockers) if args.blockers else None
    base = baseline.load(args.baseline)
    say_notice(baseline.notice(base))
    proof = input_files.load_proof(args.shown.proof, args.shown.expected_proofs)
    history = args.history or input_files.history_from_dir(args.history_dir, args.history_runs)
    return compare(
        head,
        base,
        blockers=states,
        policy=policy,
        default_repo=args.shown.repo,
        proof=proof,
        history=history,
    )


def _findings(path: Path) -> tuple[Finding, ...]:
    from kl_bitexact.registry import findings_file

    return findings_file.load(path)


def _blocker_states(path: Path) -> dict[str, BlockerState]:
    # Imported only with --blockers: the module also resolves states on GitHub (PyGithub,
    # requests: most of `report`'s start-up otherwise).
    from kl_bitexact.publish import blocker_lookup

    return blocker_lookup.load(path)
