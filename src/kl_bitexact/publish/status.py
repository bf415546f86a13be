"""The `kl-bitexact` commit status: the gate's verdict on the commit that was tested.

Beside the sticky comment, the status is what a branch protection rule can require.
"""

from __future__ import annotations

from dataclasses import dataclass

from github.GithubObject import NotSet

from kl_bitexact.compare.gate import Decision
from kl_bitexact.errors import ExitCode, FatalError
from kl_bitexact.publish.client import PullRequestTarget, Session

CONTEXT = "kl-bitexact"
MAX_DESCRIPTION = 140  # GitHub refuses longer status descriptions
_STATE = {
    ExitCode.GATE_PASSED: "success",
    ExitCode.GATE_FAILED: "failure",
    ExitCode.COULD_NOT_RUN: "error",
}


@dataclass(frozen=True)
class Status:
    state: str  # "success", "failure" or "error"
    description: str


def of(decision: Decision) -> Status:
    return Status(_STATE[decision.exit_code], verdict_line(decision))


def verdict_line(decision: Decision) -> str:
    """One line for the commit status: the label and, when it failed, why."""
    line = decision.label
    if decision.reasons:
        line += ": " + ", ".join(decision.reasons)
    if len(line) > MAX_DESCRIPTION:
        line = line[: MAX_DESCRIPTION - 1] + "…"
    return line


def refuse_other_commit(tested: str | None, marked: str) -> None:
    """A verdict goes only to the commit it is about (issue 30, item 1): results that
    tested another commit are refused, naming both."""
    if tested is not None and tested != marked:
        raise FatalError(
            f"the results tested commit {tested}, but the status would go to {marked}: "
            "kl-bitexact marks only the commit that was tested",
            hint="the run jobs must check out the commit the event names (the PR head; under "
            "workflow_run, workflow_run.head_sha), or pass --sha with the commit they tested",
        )


def refuse_unbound_pass(tested: str | None, marked: str, decision: Decision) -> None:
    """Results that record no commit (every shard missing, say) may mark a failure, which
    can only hold a merge back, never a pass."""
    if tested is None and decision.exit_code == ExitCode.GATE_PASSED:
        raise FatalError(
            f"the results record no tested commit (run.commit), so a pass cannot go to {marked}",
            hint="publish the results.json files `kl-bitexact run`/`pytest` wrote in the "
            "checkout of that commit",
        )


def post(
    session: Session, target: PullRequestTarget, sha: str, status: Status, url: str | None
) -> None:
    """Set the status on `sha`, linking to `url` (the run's page) when there is one."""
    with session.translated(f"setting the {CONTEXT} status on {sha[:12]}"):
        session.client.get_repo(target.repository).get_commit(sha).create_status(
            status.state,
            target_url=url or NotSet,
            description=status.description,
            context=CONTEXT,
        )
