"""Each test's state in one word, and every word the reports use for it, in one table (pure).

The headline, the counts line, the base line, the status column, the annotations, the
terminal and the gate's reasons all say what a test is by `of(delta)` and the entry of its
`Kind` in `WORDS` (issue 37: four of six outcomes contradicted themselves when each part
had its own words - "1 regression" above "3 regressions" above "3 regressed"). A new state
is one member of `Kind` and one entry in `WORDS` (tests/report/test_consistency.py renders
every outcome and fails on two parts of one comment that disagree).

What a test is against its base is said here too (`against_base`), in words that observe
(newly red, still green) and never judge: the judgement is the state's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from kl_bitexact.compare.blockers import BlockerState, effective_state
from kl_bitexact.results import verdict as numbers
from kl_bitexact.results.model import Status

if TYPE_CHECKING:  # gate.py words its reasons with this module; the deltas are built on it
    from kl_bitexact.compare.comparison import Blocker, TestDelta
    from kl_bitexact.compare.history import History


class Kind(str, Enum):
    """A test's state, most severe first (the order of every list of them)."""

    REGRESSION = "regression"
    FAILING = "failing"
    COULD_NOT_RUN = "could_not_run"
    INFRA = "infra"
    NOT_EXERCISED = "not_exercised"  # a stated server fact did not hold (suites.md)
    FLAKY = "flaky"
    UNKNOWN = "unknown"
    STALE_MARKER = "stale_marker"
    STILL_FAILING = "still_failing"
    KNOWN = "known"  # would gate, but failed on the base branch before: let through
    EXPECTED_RED = "expected_red"
    UNEXPECTED_GREEN = "unexpected_green"
    UNBLOCKED = "unblocked"
    NOT_A_KL_CHECK = "not_a_kl_check"  # passed, but a plain test: no KL was checked
    NOT_JUDGED = "not_judged"  # skipped: the engine lacks a path it needs
    SKIPPED = "skipped"
    REMOVED = "removed"
    OK = "ok"


class Word(NamedTuple):
    """How one state is said: its icon, the word for one and for many, and what follows
    the detail (`known failure (3 of the last 8 on main) - let through`)."""

    icon: str
    one: str
    many: str
    after: str = ""


WORDS: dict[Kind, Word] = {
    Kind.REGRESSION: Word("🔴", "regression", "regressions"),
    Kind.FAILING: Word("🔴", "failing (no base result)", "failing (no base result)"),
    Kind.COULD_NOT_RUN: Word("🔌", "could not run", "could not run"),
    Kind.INFRA: Word("⚠️", "did not measure", "did not measure"),
    Kind.NOT_EXERCISED: Word("🚫", "not exercised", "not exercised"),
    Kind.FLAKY: Word("🎲", "flaky (repeats disagree)", "flaky (repeats disagree)"),
    Kind.UNKNOWN: Word("❓", "blocker unknown", "blockers unknown"),
    Kind.STALE_MARKER: Word("🧹", "stale marker", "stale markers"),
    Kind.STILL_FAILING: Word(
        "🟤", "still failing (red on base too)", "still failing (red on base too)"
    ),
    Kind.KNOWN: Word("🟣", "known failure", "known failures", " - let through"),
    Kind.EXPECTED_RED: Word("🟠", "expected red", "expected red"),
    Kind.UNEXPECTED_GREEN: Word("🟡", "unexpected green", "unexpected green"),
    Kind.UNBLOCKED: Word("🔓", "unblocked", "unblocked"),
    Kind.NOT_A_KL_CHECK: Word("☑️", "passed - not a KL check", "passed - not KL checks"),
    Kind.NOT_JUDGED: Word(
        "🧩", "not judged on the reference engine", "not judged on the reference engine"
    ),
    Kind.SKIPPED: Word("⏭️", "skipped", "skipped"),
    Kind.REMOVED: Word("🗑️", "removed", "removed"),
    Kind.OK: Word("✅", "ok", "ok"),
}

SEVERITY = {kind: rank for rank, kind in enumerate(Kind)}
# States that are red for a reason the reader must act on (the terminal lists them).
QUIET = frozenset({Kind.OK, Kind.SKIPPED, Kind.REMOVED})


def plain_ref(blocker: Blocker) -> str:
    """A blocker as plain text: its canonical reference, else what was written."""
    return blocker.ref or blocker.text


@dataclass(frozen=True, slots=True)
class State:
    """One test's state: its kind, whether it gates, and what qualifies it (the history's
    count for a known failure, the blockers of a blocked test)."""

    kind: Kind
    gating: bool
    known: str = ""  # `3 of the last 8 on main`
    blockers: tuple[Blocker, ...] = ()
    needs: str = ""  # what a test not judged needs: `a real model (...)`

    @property
    def word(self) -> Word:
        return WORDS[self.kind]

    def text(
        self, ref: Callable[[Blocker], str] = plain_ref, outside: Callable[[str], str] = str
    ) -> str:
        """`regression`, `expected red (blocked by owner/repo#1)`, `known failure (3 of the
        last 8 on main) - let through`, `not judged on the reference engine: needs a real
        model`; `ref` writes a blocker (a link in Markdown), `outside` the words that came from
        outside (a branch's name, a skip reason: escaped for Markdown)."""
        return self.word.one + _detail(self, ref, outside) + self.word.after


def _detail(state: State, ref: Callable[[Blocker], str], outside: Callable[[str], str]) -> str:
    if state.needs:
        return f": needs {outside(state.needs)}"
    if state.known:
        return f" ({outside(state.known)})"
    if not state.blockers:
        return ""
    refs = ", ".join(ref(b) for b in state.blockers)
    said = effective_state([b.state for b in state.blockers])
    if said is BlockerState.MERGED:
        return f" ({refs} merged)"
    if said is BlockerState.CLOSED:
        return f" ({refs} closed without merging)"
    return f" (blocked by {refs})"


def of(delta: TestDelta, history: History | None = None) -> State:
    """The state of one test, from its verdict, whether it gates and what let it through."""
    if delta.verdict is None:
        return _PLAIN[Kind.REMOVED, False]
    if delta.known_let_through:
        return State(Kind.KNOWN, delta.gating, _known(delta.id, history))
    needs = (delta.head and numbers.needs(delta.head)) or ""
    # A Verdict is a str enum: its value names its Kind (a dict, not `Kind(value)`'s walk).
    kind = _KIND_OF[delta.verdict]
    if not (delta.blockers or needs):
        return _PLAIN[kind, delta.gating]
    return State(kind, delta.gating, blockers=delta.blockers, needs=needs)


_KIND_OF: dict[str, Kind] = {kind.value: kind for kind in Kind}
# A state with nothing that qualifies it, one per kind and gating (issue 40: 100,000 tests
# are mostly `ok`; a State is frozen, so one is shared by every test in it).
_PLAIN = {(kind, gating): State(kind, gating) for kind in Kind for gating in (False, True)}


def _known(test_id: str, history: History | None) -> str:
    found = history.of(test_id) if history is not None else None
    if history is None or found is None:
        return ""
    return f"{found.failed} of the last {found.present} on {history.branch}"


def counted(kind: Kind, count: int) -> str:
    """`1 regression`, `3 known failures - let through`."""
    word = WORDS[kind]
    return f"{count:,} {word.one if count == 1 else word.many}{word.after}"


def tally(states: Iterable[State]) -> list[tuple[Kind, int]]:
    """How many tests are in each state, most severe first."""
    counts = Counter(state.kind for state in states)
    return sorted(counts.items(), key=lambda item: SEVERITY[item[0]])


def reasons(states: Iterable[State]) -> tuple[str, ...]:
    """Why the gate failed: the gating states counted (`2 regressions`, `1 could not run`)."""
    return tuple(counted(kind, n) for kind, n in tally(s for s in states if s.gating))


# --- against the base: what moved, in words that observe --------------------------------

AGAINST_BASE = (
    "newly red",
    "worse (red on base too)",
    "still red",
    "newly flaky",
    "newly green",
    "newly not run",
    "newly not exercised",
    "newly not judged",
    "new",
    "removed",
    "unchanged",
)


def against_base(delta: TestDelta) -> str | None:
    """How the test moved from the base's result, one of AGAINST_BASE (None: no base)."""
    # Transition and Verdict are str enums (comparison.py, gate.py): each is found by its
    # value (`.value` is a Python-level property: 100,000 tests ask).
    moved = _MOVED.get(delta.transition)
    head, base = delta.head, delta.base
    if moved is None or head is None or base is None:
        return moved
    if head.status is Status.FLAKY:
        return "newly flaky" if base.status is not Status.FLAKY else "unchanged"
    if moved == "newly red" and base.status is Status.FAILED:  # red there, far worse here
        return "worse (red on base too)"
    if moved == "newly not run":  # it ran, but not measured: say how (its state's word)
        return _UNMEASURED.get(delta.verdict or "", moved)
    return moved


_UNMEASURED = {"not_exercised": "newly not exercised", "not_judged": "newly not judged"}


_MOVED = {
    "regressed": "newly red",
    "still_failing": "still red",
    "fixed": "newly green",
    "newly_not_run": "newly not run",
    "new": "new",
    "removed": "removed",
    "unchanged": "unchanged",
}
