"""Resolve `blocked_by` references to their state through GitHub, once per run.

One request per reference: GET /repos/{owner}/{repo}/issues/{n} answers for issues and pull
requests alike (GitHub numbers both in one space), and for a pull request its
`pull_request.merged_at` tells merged from closed-unmerged. A reference the API cannot
answer for (unreachable, not found, no permission) is `unknown`; the gate fails closed on it
unless told otherwise.

The references come from results a run of PR code wrote, so what they may cost is bounded
(issue 14, case 8: 2,500 references across 501 repositories made 2,500 requests, a rate
limit burnt for 10 minutes): only repositories in the `Scope` (this one, and by default its
owner's) are asked about, at most `limit` distinct references per run; the rest are
`unknown`, each with the reason.

A comment on a public repository's PR shows no state of a private repository's issue
(issue 30): a reference to another repository is looked up only once that repository is
known to be public (one request per repository); a private one, or one whose visibility
cannot be told, is `unknown`, with that reason, and its issue is never asked about.

The states file (`report --blockers FILE`, `publish --blockers FILE`) is
`{"owner/repo#N": "open" | "merged" | "closed" | "unknown", ...}`.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kl_bitexact.compare.blockers import BlockerState, states_from_json
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish.client import Session, shaped
from kl_bitexact.results.model import Results
from kl_bitexact.suite.references import BlockerRef, parse_ref
from kl_bitexact.untrusted.jsonfile import read_json

# A states file lists a few dozen references; anything near this is not one of ours.
MAX_STATES_BYTES = 1024 * 1024
# Distinct references looked up per run: a suite names a handful; 100 lookups take 25 s
# at the default pacing and leave the hourly rate limit (1,000 for GITHUB_TOKEN) alone.
DEFAULT_MAX_LOOKUPS = 100

# (owner, repo, number) -> the issue's JSON as the REST API returns it.
FetchIssue = Callable[[str, str, int], Mapping[str, Any]]
# (owner, repo) -> whether the repository is private.
FetchPrivate = Callable[[str, str], bool]


def refs_in(results: Results, default_repo: str | None) -> list[BlockerRef]:
    """Every distinct blocker named by any test, sorted.

    A text that is no reference is left out here; the comparison shows it as unknown.
    """
    refs = set()
    for _, test in results.all_tests():
        for text in test.blocked_by:
            try:
                refs.add(parse_ref(text, default_repo))
            except ConfigError:
                continue
    return sorted(refs)


def state_of(issue: Mapping[str, Any]) -> BlockerState:
    """The blocker state an issue/PR JSON object describes (pure)."""
    if issue.get("state") == "open":
        return BlockerState.OPEN
    pull = issue.get("pull_request")
    if isinstance(pull, Mapping):
        return BlockerState.MERGED if pull.get("merged_at") else BlockerState.CLOSED
    # An issue closed as done unblocks; closed as "not planned" or duplicate never will.
    done = issue.get("state_reason") in (None, "completed")
    return BlockerState.MERGED if done else BlockerState.CLOSED


@dataclass(frozen=True)
class Scope:
    """Which references may be looked up: the repository itself always, plus those matching
    `patterns` (`owner/name` or a glob like `owner/*`, case-insensitive), at most `limit`."""

    repository: str
    patterns: tuple[str, ...] = ()
    limit: int = DEFAULT_MAX_LOOKUPS
    # The comment is public (the repository is): other repositories' states are shown only
    # when those are public too.
    public: bool = False

    @classmethod
    def of(
        cls,
        repository: str,
        patterns: Sequence[str] = (),
        limit: int | None = None,
        *,
        public: bool = False,
    ) -> Scope:
        """The default patterns are the repository owner's: `owner/*`."""
        owner = repository.split("/", 1)[0]
        chosen = tuple(patterns) or (f"{owner}/*",)
        return cls(repository, chosen, DEFAULT_MAX_LOOKUPS if limit is None else limit, public)

    def allows(self, ref: BlockerRef) -> bool:
        name = f"{ref.owner}/{ref.repo}".lower()
        wanted = (self.repository, *self.patterns)
        return any(fnmatch.fnmatchcase(name, pattern.lower()) for pattern in wanted)

    def outside(self, ref: BlockerRef) -> str:
        listed = ", ".join((self.repository, *self.patterns))
        return (
            f"not looked up: {ref.owner}/{ref.repo} is outside the repositories blockers are "
            f"looked up in ({listed}; --blocker-repo adds more)"
        )

    def over_limit(self) -> str:
        return (
            f"not looked up: over the limit of {self.limit} lookups per run "
            "(--max-blocker-lookups raises it)"
        )


@dataclass(frozen=True)
class Resolved:
    """Each reference's state (canonical `owner/repo#N` keys), and why an unknown is one."""

    states: dict[str, BlockerState] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


def resolve(
    refs: Iterable[BlockerRef],
    fetch: FetchIssue,
    scope: Scope | None = None,
    is_private: FetchPrivate | None = None,
) -> Resolved:
    """Ask once per distinct reference in `scope` (no scope: any, no limit); a failed
    lookup is `unknown` with GitHub's reason, not an abort. With a public scope, another
    repository's reference is asked about only once `is_private` says it is public.

    Keys are canonical `owner/repo#N`, as `compare` and the states file want them.
    """
    resolved = Resolved()
    hidden = _Visibility(scope, is_private)
    asked = 0
    for ref in refs:
        key = str(ref)
        if key in resolved.states:
            continue
        why = _not_asked(ref, scope, asked)
        if why is None:
            asked += 1
            why = hidden.why(ref) or _ask(ref, fetch, resolved.states)
        if why is not None:
            resolved.states[key] = BlockerState.UNKNOWN
            resolved.reasons[key] = why
    return resolved


def _not_asked(ref: BlockerRef, scope: Scope | None, asked: int) -> str | None:
    if scope is None:
        return None
    if not scope.allows(ref):
        return scope.outside(ref)
    return scope.over_limit() if asked >= scope.limit else None


class _Visibility:
    """Why a reference's state may not be shown in a public comment, asked once per
    repository."""

    def __init__(self, scope: Scope | None, is_private: FetchPrivate | None) -> None:
        self.scope, self.is_private = scope, is_private
        self.reasons: dict[str, str | None] = {}

    def why(self, ref: BlockerRef) -> str | None:
        name = f"{ref.owner}/{ref.repo}"
        scope = self.scope
        if self.is_private is None or scope is None or not scope.public:
            return None
        if name.lower() == scope.repository.lower():
            return None  # the comment's own repository: public
        if name.lower() not in self.reasons:
            self.reasons[name.lower()] = self._lookup(ref.owner, ref.repo, self.is_private)
        return self.reasons[name.lower()]

    def _lookup(self, owner: str, repo: str, is_private: FetchPrivate) -> str | None:
        try:
            private = is_private(owner, repo)
        except GitHubError as error:
            return (
                f"not looked up: whether {owner}/{repo} is private could not be told, and this "
                f"comment is public ({error.message})"
            )
        if private:
            return f"not shown: {owner}/{repo} is private and this comment is public"
        return None


def _ask(ref: BlockerRef, fetch: FetchIssue, states: dict[str, BlockerState]) -> str | None:
    """Look `ref` up into `states`; the reason when GitHub could not tell."""
    try:
        states[str(ref)] = state_of(fetch(ref.owner, ref.repo, ref.number))
    except GitHubError as error:
        return f"lookup failed: {error.message}"
    return None


def dumps(states: Mapping[str, BlockerState]) -> str:
    document = {ref: state.value for ref, state in sorted(states.items())}
    return json.dumps(document, indent=2) + "\n"


def load(path: Path) -> dict[str, BlockerState]:
    """Read a states file (bounded: it may come from another job), naming the file on errors."""
    document = read_json(path, what="blocker states", max_bytes=MAX_STATES_BYTES)
    return states_from_json(document, str(path))


def issue_fetcher(session: Session) -> FetchIssue:
    """Fetch issues through the one PyGithub client, errors translated."""

    def fetch(owner: str, repo: str, number: int) -> Mapping[str, Any]:
        # The reference is named beside its reason already: the same failure reads the
        # same for every reference, so the comment says it once.
        with session.translated("looking a blocker up"):
            raw = session.client.get_repo(f"{owner}/{repo}").get_issue(number).raw_data
            issue: Mapping[str, Any] = shaped(raw, Mapping, "reading an issue")
        return issue

    return fetch


def privacy_fetcher(session: Session) -> FetchPrivate:
    """Whether a repository is private, through the one PyGithub client."""

    def is_private(owner: str, repo: str) -> bool:
        with session.translated(f"reading whether {owner}/{repo} is private"):
            raw = session.client.get_repo(f"{owner}/{repo}").raw_data
            answer: Mapping[str, Any] = shaped(raw, Mapping, "reading a repository")
        # Anything but a plain false (a field missing or odd) counts as private.
        return answer.get("private") is not False

    return is_private
