"""Blockers a pull request cannot grant itself (pure; issue 30, item 3).

`blocked_by` lives in the PR's own files, so a PR could excuse its own regression: mark the
test it breaks `blocked_by: ['#7']` - itself, open as long as it is under review - or any
open issue, and the gate turned green. A marker excuses a red test only when it is not the
PR's to give:

- a reference to the pull request itself never excuses: the pull request a marker names is
  the change expected to turn the test green, so while it leaves the test red nothing
  excuses it - neither the marker nor the base branch's red (issue 36: a marker the base
  branch already had was dropped, and the plain red test, red on base too, was excused by
  the base). `promised` names those tests, wherever the marker is (the PR, the base);
- any other reference excuses once the base branch has it: the baseline (the base branch's
  own results) holds the same test with the same reference; a marker the PR adds or
  changes does not, until it is merged - unless a maintainer vouches for it with a label on
  the pull request (only people with triage or write access can label one).

The label vouches only when someone other than the PR's author applied it: an author with
triage or write access can label their own pull request, and so excuse their own red test.
Who applied it (the latest `labeled` event not undone) comes from GitHub; when that could
not be told, the label vouches for nothing (it fails closed). It vouches for the pull
request as it is when publish runs: commits pushed after it was added are vouched for too.

A marker not taken is removed from that test before the gate looks at it (so the red test
gates as it would without it) and a warning on the test says which and why. Green tests
keep their markers: they excuse nothing, and their warnings (green although still open)
stay useful.
"""

from __future__ import annotations

from dataclasses import dataclass

from msgspec import structs

from kl_bitexact.compare.gate import RED
from kl_bitexact.errors import ConfigError
from kl_bitexact.results.model import Results, TestResult
from kl_bitexact.suite.references import BlockerRef, parse_ref

DEFAULT_LABEL = "kl-bitexact-blocked-ok"


@dataclass(frozen=True)
class Labelling:
    """The label is on the pull request: who applied it (the latest `labeled` event not
    undone) and who opened the pull request, GitHub logins; None where GitHub could not
    tell, and `unchecked` says why."""

    by: str | None
    author: str | None
    unchecked: str | None = None
    # The account that added it is a bot (a GitHub App, a workflow's token): it acts for
    # whoever asked it, maybe the PR's author (a slash command), and names nobody.
    by_bot: bool = False


@dataclass(frozen=True)
class Grant:
    """Who may excuse: the pull request under review and whether a maintainer's label
    vouches for the markers it adds."""

    pull_request: BlockerRef | None
    label: str = DEFAULT_LABEL
    labelled: Labelling | None = None  # None: the label is not on the pull request

    def why_unvouched(self) -> str | None:
        """None when the label vouches for the markers the PR adds; else what the warning
        on a marker not taken says about the label."""
        labelled = self.labelled
        if labelled is None:
            return f"a maintainer's `{self.label}` label can"
        if labelled.by is None or labelled.author is None:
            return (
                f"the `{self.label}` label is on it, but who added it could not be checked "
                f"({labelled.unchecked or 'GitHub did not say'}); it counts only when a "
                "maintainer other than the PR's author adds it"
            )
        if labelled.by_bot:
            return (
                f"the `{self.label}` label was added by a bot, {labelled.by}, which acts for "
                "whoever asked it (the PR's author, maybe); a maintainer must add it by hand"
            )
        if labelled.by.lower() == labelled.author.lower():  # GitHub's logins ignore case
            return (
                f"the `{self.label}` label was added by the PR's author, {labelled.by}; a "
                "maintainer other than the author must add it"
            )
        return None


def vetted(head: Results, base: Results | None, grant: Grant, default_repo: str | None) -> Results:
    """`head` with every marker the PR cannot grant itself taken off its red tests."""
    on_base = _markers(base, default_repo)
    ours = promised(head, base, grant, default_repo)
    suites = tuple(
        structs.replace(
            suite,
            tests=tuple(
                _vet(test, on_base, grant, default_repo, test.id in ours) for test in suite.tests
            ),
        )
        for suite in head.suites
    )
    return structs.replace(head, suites=suites)


def promised(
    head: Results, base: Results | None, grant: Grant, default_repo: str | None
) -> frozenset[str]:
    """The red tests of `head` that a marker names this pull request for, on the head or on
    the base branch: it is their blocker, expected to turn them green, and nothing excuses
    them while they are red (`compare(promised=...)`)."""
    ours = grant.pull_request
    if ours is None:
        return frozenset()
    on_base = _markers(base, default_repo) or {}
    found = set()
    for _, test in head.all_tests():
        marked = {ref for ref in (_ref(t, default_repo) for t in test.blocked_by) if ref}
        marked |= on_base.get(test.id, set())
        if test.status in RED and any(_same(ref, ours) for ref in marked):
            found.add(test.id)
    return frozenset(found)


_PROMISED = (
    "this pull request is the blocker, expected to turn the test green: nothing excuses it "
    "while it is red"
)


def _vet(
    test: TestResult,
    on_base: dict[str, set[BlockerRef]] | None,
    grant: Grant,
    default_repo: str | None,
    ours: bool = False,
) -> TestResult:
    if test.status not in RED or not (test.blocked_by or ours):
        return test
    kept, notes = [], []
    for text in test.blocked_by:
        why = _not_taken(_ref(text, default_repo), test.id, on_base, grant)
        if why is None:
            kept.append(text)
        else:
            notes.append(f"blocked_by {text} not taken: {why}")
    if ours and not notes:  # named on the base branch only
        notes.append(f"the base branch marks it blocked by this pull request: {_PROMISED}")
    if not notes:
        return test
    return structs.replace(test, blocked_by=tuple(kept), warnings=(*test.warnings, *notes))


def _not_taken(
    ref: BlockerRef | None,
    test_id: str,
    on_base: dict[str, set[BlockerRef]] | None,
    grant: Grant,
) -> str | None:
    """Why a marker excuses nothing, or None when it may excuse (its state decides)."""
    if ref is None:
        return None  # not a reference: unknown, which fails closed already
    if grant.pull_request is not None and _same(ref, grant.pull_request):
        return f"it names this pull request itself: {_PROMISED}"
    label = grant.why_unvouched()
    if label is None:
        return None
    if on_base is None:
        return (
            "no results of the base branch show it has this marker, and a pull request "
            f"cannot excuse its own red test ({label})"
        )
    if any(_same(ref, known) for known in on_base.get(test_id, ())):
        return None
    return (
        "this pull request adds it (the base branch's results have no such marker on this "
        f"test), and a pull request cannot excuse its own red test ({label})"
    )


def _markers(base: Results | None, default_repo: str | None) -> dict[str, set[BlockerRef]] | None:
    if base is None:
        return None
    return {
        test.id: {ref for ref in (_ref(t, default_repo) for t in test.blocked_by) if ref}
        for _, test in base.all_tests()
    }


def _ref(text: str, default_repo: str | None) -> BlockerRef | None:
    try:
        return parse_ref(text, default_repo)
    except ConfigError:
        return None


def _same(one: BlockerRef, other: BlockerRef) -> bool:
    """GitHub's names ignore case."""
    return str(one).lower() == str(other).lower()
