"""`blocked_by` markers: parsing references and classifying blocked tests (pure).

A test can be red on purpose until another PR merges (sglang PR 34356 stayed red until
PR 29792 landed). The marker makes that explicit; the blocker's state, resolved through
GitHub elsewhere, decides whether red is expected and whether green is a surprise.
"""

from __future__ import annotations

from enum import Enum

from kl_bitexact.errors import ConfigError
from kl_bitexact.suite.references import parse_ref


class BlockerState(str, Enum):
    OPEN = "open"
    MERGED = "merged"  # a PR that merged, or an issue that was closed as done
    CLOSED = "closed"  # a PR closed without merging
    UNKNOWN = "unknown"  # the API could not tell (unreachable, not found)


class BlockedVerdict(str, Enum):
    """What a blocked test means for the gate (the table in docs/cli.md, `report`)."""

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
        raise ConfigError(
            f"{source}: blocker states must be an object like "
            f'{{"owner/repo#N": "open"}}, not {type(document).__name__}'
        )
    states: dict[str, BlockerState] = {}
    allowed = ", ".join(state.value for state in BlockerState)
    for key, value in document.items():
        # A list or an object is no state (and unhashable: test the type before the set).
        if not isinstance(value, str) or value not in {state.value for state in BlockerState}:
            raise ConfigError(f"{source}: {key}: state {value!r} is not one of {allowed}")
        try:
            states[str(parse_ref(key))] = BlockerState(value)
        except ConfigError as error:
            raise ConfigError(f"{source}: {error.message}", hint=error.hint) from None
    return states
