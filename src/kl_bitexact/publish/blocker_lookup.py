"""Resolve `blocked_by` references to their state through GitHub, once per run.

One request per reference: GET /repos/{owner}/{repo}/issues/{n} answers for issues and pull
requests alike (GitHub numbers both in one space), and for a pull request its
`pull_request.merged_at` tells merged from closed-unmerged. A reference the API cannot
answer for (unreachable, not found, no permission) is `unknown`; the gate fails closed on it
unless told otherwise.

The states file (`report --blockers FILE`, `publish --blockers FILE`) is
`{"owner/repo#N": "open" | "merged" | "closed" | "unknown", ...}`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from github import Github

from kl_bitexact.compare.blockers import BlockerState, states_from_json
from kl_bitexact.errors import ConfigError, GitHubError
from kl_bitexact.publish.client import shaped, translated
from kl_bitexact.results.model import Results
from kl_bitexact.suite.references import BlockerRef, parse_ref
from kl_bitexact.untrusted.jsonfile import read_json

# A states file lists a few dozen references; anything near this is not one of ours.
MAX_STATES_BYTES = 1024 * 1024

# (owner, repo, number) -> the issue's JSON as the REST API returns it.
FetchIssue = Callable[[str, str, int], Mapping[str, Any]]


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


def resolve(refs: Iterable[BlockerRef], fetch: FetchIssue) -> dict[str, BlockerState]:
    """Ask once per distinct reference; a failed lookup is `unknown`, not an abort.

    Keys are canonical `owner/repo#N`, as `compare` and the states file want them.
    """
    states: dict[str, BlockerState] = {}
    for ref in refs:
        if str(ref) in states:
            continue
        try:
            states[str(ref)] = state_of(fetch(ref.owner, ref.repo, ref.number))
        except GitHubError:
            states[str(ref)] = BlockerState.UNKNOWN
    return states


def dumps(states: Mapping[str, BlockerState]) -> str:
    document = {ref: state.value for ref, state in sorted(states.items())}
    return json.dumps(document, indent=2) + "\n"


def load(path: Path) -> dict[str, BlockerState]:
    """Read a states file (bounded: it may come from another job), naming the file on errors."""
    document = read_json(path, what="blocker states", max_bytes=MAX_STATES_BYTES)
    return states_from_json(document, str(path))


def issue_fetcher(client: Github, token: str) -> FetchIssue:
    """Fetch issues through the one PyGithub client, errors translated."""

    def fetch(owner: str, repo: str, number: int) -> Mapping[str, Any]:
        with translated(f"reading {owner}/{repo}#{number}", token):
            raw = client.get_repo(f"{owner}/{repo}").get_issue(number).raw_data
            issue: Mapping[str, Any] = shaped(raw, Mapping, "reading an issue")
        return issue

    return fetch
