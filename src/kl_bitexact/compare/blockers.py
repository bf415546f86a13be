"""`blocked_by` markers: parsing references and classifying blocked tests (pure).

A test can be red on purpose until another PR merges (sglang PR 34356 stayed red until
PR 29792 landed). The marker makes that explicit; the blocker's state, resolved through
GitHub elsewhere, decides whether red is expected and whether green is a surprise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from kl_bitexact.errors import ConfigError

_SHORT = re.compile(r"^(?:(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+))?#(?P<number>[1-9]\d*)$")
_URL = re.compile(
    r"^https?://[^/\s]+/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/(?:pull|issues)/(?P<number>[1-9]\d*)/?$"
)


@dataclass(frozen=True, order=True)
class BlockerRef:
    owner: str
    repo: str
    number: int

    def __str__(self) -> str:
        return f"{self.owner}/{self.repo}#{self.number}"


def parse_ref(text: str, default_repo: str | None = None) -> BlockerRef:
    """Parse `#N`, `owner/repo#N` or a pull/issue URL; `#N` needs `default_repo`."""
    match = _SHORT.match(text.strip()) or _URL.match(text.strip())
    if match is None:
        raise ConfigError(
            f"blocked_by {text!r} is not a pull request or issue reference",
            hint="write owner/repo#N, #N, or https://github.com/owner/repo/pull/N",
        )
    owner, repo = match.group("owner"), match.group("repo")
    if owner is None:
        if default_repo is None or "/" not in default_repo:
            raise ConfigError(
                f"blocked_by {text!r} has no repository and none is known",
                hint="write owner/repo#N, or set GITHUB_REPOSITORY",
            )
        owner, repo = default_repo.split("/", 1)
    return BlockerRef(owner, repo, int(match.group("number")))


class BlockerState(str, Enum):
    OPEN = "open"
    MERGED = "merged"  # a PR that merged, or an issue that was closed as done
    CLOSED = "closed"  # a PR closed without merging
    UNKNOWN = "unknown"  # the API could not tell (unreachable, not found)


class BlockedVerdict(str, Enum):
    """What a blocked test means for the gate (the table in README "The report and the gate")."""

    EXPECTED_RED = "expected_red"  # not gating
    UNEXPECTED_GREEN = "unexpected_green"  # warning; gating in strict mode
    REGRESSION = "regression"  # blocker merged, still red: gating
    UNBLOCKED = "unblocked"  # blocker merged and green: remove the marker
    STALE_MARKER = "stale_marker"  # blocker closed unmerged: red still gates
    UNKNOWN = "unknown"  # blocker state unknown: fails closed unless allowed


def effective_state(states: list[BlockerState]) -> BlockerState:
    """One state for a test with several blockers: any open blocker keeps it blocked."""
    for state in (BlockerState.OPEN, BlockerState.UNKNOWN, BlockerState.CLOSED):
        if state in states:
            return state
    return BlockerState.MERGED


_TABLE = {
    (BlockerState.OPEN, True): BlockedVerdict.EXPECTED_RED,
    (BlockerState.OPEN, False): BlockedVerdict.UNEXPECTED_GREEN,
    (BlockerState.MERGED, True): BlockedVerdict.REGRESSION,
    (BlockerState.MERGED, False): BlockedVerdict.UNBLOCKED,
    (BlockerState.CLOSED, True): BlockedVerdict.STALE_MARKER,
    (BlockerState.CLOSED, False): BlockedVerdict.STALE_MARKER,
    (BlockerState.UNKNOWN, True): BlockedVerdict.UNKNOWN,
    (BlockerState.UNKNOWN, False): BlockedVerdict.UNKNOWN,
}


def classify(state: BlockerState, red: bool) -> BlockedVerdict:
    return _TABLE[(state, red)]


# --- resolved states, as written by `publish`'s resolver and read by `report --blockers` --


def states_from_json(document: object, source: str) -> dict[str, BlockerState]:
    """`{"owner/repo#N": "open"|"merged"|"closed"|"unknown"}` as canonical refs to states."""
    if not isinstance(document, dict):
        raise ConfigError(f'{source}: expected an object like {{"owner/repo#N": "open"}}')
    states: dict[str, BlockerState] = {}
    allowed = ", ".join(state.value for state in BlockerState)
    for key, value in document.items():
        if value not in {state.value for state in BlockerState}:
            raise ConfigError(f"{source}: {key}: state {value!r} is not one of {allowed}")
        try:
            states[str(parse_ref(key))] = BlockerState(value)
        except ConfigError as error:
            raise ConfigError(f"{source}: {error.message}", hint=error.hint) from None
    return states
