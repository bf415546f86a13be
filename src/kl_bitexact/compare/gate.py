"""The merge gate: one verdict per test, and whether the run as a whole passes (pure).

A test's verdict follows from its status and the state of its blockers (the verdict table in
docs/cli.md); the run's decision adds the maintainers' policy (`--fail-on`, `--strict`) and,
in `regression` mode, what the base branch already showed.

How statuses other than passed/failed count:
- `error` did not measure because the server, the runner or the run failed: with an open
  blocker it is expected red (a feature that does not exist yet may well crash); without
  one it is `could_not_run`: never a regression of the change, yet it gates (nothing was
  proven), and a run gated by nothing else could not run (exit 2, not 1).
- `not_run` measured nothing (cache disabled, no sample kept): the suite's or the server's
  configuration, which the change may have made. It is never a pass: it is `infra` and
  gates in `failure` and `regression` mode, whatever its blockers say; so does a `passed`
  that its numbers contradict or do not prove (`results.verdict`).
- `flaky` (`run --repeat`): the test's own repeats disagreed. Its verdict is `flaky`
  whatever its blockers say; it gates with `--fail-on ...,flaky`, and always when one of
  its repeats was red (a red repeat is never retried away).
- `not_exercised`: the test did not test what it claims - a fact it states about its server
  did not hold or could not be told (`results.verdict.unexercised`). Its own verdict
  `not_exercised`, whatever its numbers or blockers say: never a pass, never a regression of
  the numbers; it gates in `failure` and `regression` mode (exit 1: the suite or the server
  must change, and the change may be what dropped the knob), excused only by a base that
  was not exercised either.
- `skipped` was asked for (the suite or a marker skipped it). It is shown and counted but
  does not gate; a test that ran on the base branch and is skipped now is still flagged
  by its transition ("newly not run").
A run in which no test executed at all could not run: exit 2, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from kl_bitexact.compare import states
from kl_bitexact.compare.blockers import BlockerState, classify, effective_state
from kl_bitexact.errors import ExitCode
from kl_bitexact.results import verdict as numbers
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Status, TestResult

RED = frozenset({Status.FAILED, Status.ERROR})
EXECUTED = frozenset({Status.PASSED, Status.FAILED, Status.FLAKY})
# Tests that reached a verdict of their own: they ran, or their server was found not to be
# what they claim (`not_exercised` is a red verdict about the test, not a hole in the run).
CONCLUDED = EXECUTED | {Status.NOT_EXERCISED}


class Verdict(str, Enum):
    """What one test means for the merge, most severe first.

    A red test that nothing excuses (no blocker, or its blocker merged) is named by what
    the base branch showed (issue 20): `regression` only when the base was not red,
    `still_failing` when it was red too, `failing` when the base has no result for it (a
    new test, or no base at all). `verdict()` says `regression` for all three; the
    comparison, which knows the base, names them (`by_base`). Red on the base too but far
    worse than it (`worse_than_base`) is a `regression` all the same."""

    REGRESSION = "regression"  # red here, not red on the base (or far worse than it)
    FAILING = "failing"  # red here, and the base has no result to compare with
    COULD_NOT_RUN = "could_not_run"  # error: the server, the runner or the run failed
    INFRA = "infra"  # not_run, or a pass its numbers do not back: the check did not measure
    # A stated fact of its server did not hold or could not be told: not what it claims.
    NOT_EXERCISED = "not_exercised"
    FLAKY = "flaky"  # its own repeats disagree (`run --repeat`)
    UNKNOWN = "unknown"  # a blocker whose state nobody could tell
    STALE_MARKER = "stale_marker"  # blocker closed without merging
    STILL_FAILING = "still_failing"  # red here and on the base
    EXPECTED_RED = "expected_red"  # red while its blocker is open
    UNEXPECTED_GREEN = "unexpected_green"  # green while its blocker is open
    UNBLOCKED = "unblocked"  # blocker merged and green: remove the marker
    # passed, but its check is no KL check and it recorded nothing: a plain test whose own
    # assertions passed (`results.verdict.not_a_kl_check`); never shown as a KL pass
    NOT_A_KL_CHECK = "not_a_kl_check"
    # skipped: the engine it ran on lacks a path it needs (`results.verdict.needs`)
    NOT_JUDGED = "not_judged"
    SKIPPED = "skipped"
    OK = "ok"


SEVERITY = {verdict: rank for rank, verdict in enumerate(Verdict)}
DID_NOT_MEASURE = frozenset({Verdict.COULD_NOT_RUN, Verdict.INFRA})
# Gate like a test that did not measure, whatever a blocker says: nothing of what the test
# guards was measured.
NOT_TESTED = DID_NOT_MEASURE | {Verdict.NOT_EXERCISED}
# Red with nothing to excuse it, whatever the base showed.
UNEXCUSED_RED = frozenset({Verdict.REGRESSION, Verdict.FAILING, Verdict.STILL_FAILING})


class FailOn(str, Enum):
    """`--fail-on`: which red tests fail the gate."""

    REGRESSION = "regression"  # red now and not already red on the base branch
    FAILURE = "failure"  # any red test that is not expected red
    NEVER = "never"  # report only


# `--fail-on MODE,flaky`: a flaky test gates even when every repeat passed.
FLAKY = "flaky"
# `--fail-on MODE,allow-known`: a red test that already failed (or was flaky) in the base
# branch's recent runs (compare/history.py) does not gate; a test new to failing still does.
ALLOW_KNOWN = "allow-known"
# `--fail-on MODE,unreached`: a function of the PR's change (`run --reach-diff`) that no
# bit-exact test executed gates, and so does a run that cannot tell (docs/reach.md).
UNREACHED = "unreached"


@dataclass(frozen=True)
class Policy:
    fail_on: FailOn = FailOn.REGRESSION
    strict: bool = False  # unexpected green gates too
    allow_unknown: bool = False  # a blocker of unknown state does not gate
    flaky: bool = False  # a flaky test whose repeats all passed gates too
    proof_strict: bool = False  # a new test not shown to detect anything gates (`prove: strict`)
    allow_known: bool = False  # a red test known to fail on the base branch's history passes
    unreached: bool = False  # a changed function no test executed gates

    @property
    def fail_on_text(self) -> str:
        """`--fail-on` as given: `regression`, `failure,flaky`, ..."""
        modifiers = (
            (FLAKY, self.flaky),
            (ALLOW_KNOWN, self.allow_known),
            (UNREACHED, self.unreached),
        )
        return self.fail_on.value + "".join(f",{word}" for word, on in modifiers if on)


@dataclass(frozen=True)
class FailOnChoice:
    """`--fail-on` parsed: the mode and its modifiers."""

    mode: FailOn = FailOn.REGRESSION
    flaky: bool = False
    allow_known: bool = False
    unreached: bool = False

    def __str__(self) -> str:
        """As `--fail-on` takes it: `parse_fail_on(str(choice)) == choice`."""
        flags = ((FLAKY, self.flaky), (ALLOW_KNOWN, self.allow_known), (UNREACHED, self.unreached))
        return ",".join([self.mode.value, *(word for word, on in flags if on)])


def parse_fail_on(text: str) -> FailOnChoice:
    """`regression`, `failure`, `never`, optionally with `,flaky`, `,allow-known` and
    `,unreached`; modifiers alone mean `regression` with them. Raises ValueError naming
    what is accepted."""
    words = [word.strip() for word in text.split(",") if word.strip()]
    modifiers = (FLAKY, ALLOW_KNOWN, UNREACHED)
    modes = [word for word in words if word not in modifiers]
    allowed = ", ".join(mode.value for mode in FailOn)
    if len(modes) > 1 or any(m not in {mode.value for mode in FailOn} for m in modes):
        raise ValueError(
            f"{text!r} is not one of {allowed} (optionally with ',{FLAKY}', ',{ALLOW_KNOWN}' "
            f"and ',{UNREACHED}')"
        )
    mode = FailOn(modes[0]) if modes else FailOn.REGRESSION
    return FailOnChoice(mode, FLAKY in words, ALLOW_KNOWN in words, UNREACHED in words)


def verdict(test: TestResult, states: Sequence[BlockerState]) -> Verdict:
    """The verdict of one test given the resolved states of its blockers (in order)."""
    if test.status is Status.NOT_RUN:
        return Verdict.INFRA
    if test.status is Status.NOT_EXERCISED:
        return Verdict.NOT_EXERCISED
    if test.status is Status.SKIPPED:
        return Verdict.NOT_JUDGED if numbers.needs(test) else Verdict.SKIPPED
    if test.status is Status.FLAKY:
        return Verdict.FLAKY
    red = test.status in RED
    blocked = Verdict(classify(effective_state(list(states)), red).value) if states else None
    if test.status is Status.ERROR and blocked in NOT_AN_ERROR_S_VERDICT:
        # An error measured nothing: with its blocker merged or of unknown state it is a
        # run with a hole in it (exit 2, "could not run"), never a regression of the change
        # or an unknown blocker's red (exit 1; `run`, with no GitHub, knows no blocker's state).
        return Verdict.COULD_NOT_RUN
    if blocked is not None:
        return blocked
    if red:
        return Verdict.REGRESSION
    return Verdict.NOT_A_KL_CHECK if numbers.not_a_kl_check(test) else Verdict.OK


# A blocked test's verdicts that an `error` does not get (see `verdict`): an open blocker
# still excuses it (red was expected, in whatever form), a closed one still says its marker
# is stale.
NOT_AN_ERROR_S_VERDICT = frozenset({None, Verdict.REGRESSION, Verdict.UNKNOWN})


def gates(verdict: Verdict, test: TestResult, policy: Policy) -> bool:
    """Whether this verdict fails the gate under `policy`, before the base is considered."""
    if policy.fail_on is FailOn.NEVER:
        return False
    if verdict is Verdict.STALE_MARKER:
        return test.status in RED
    if verdict is Verdict.UNKNOWN:
        return not policy.allow_unknown
    if verdict is Verdict.UNEXPECTED_GREEN:
        return policy.strict
    if verdict is Verdict.FLAKY:
        return policy.flaky or a_repeat_was_red(test)
    return verdict in UNEXCUSED_RED or verdict in NOT_TESTED


def by_base(
    verdict: Verdict, test: TestResult, base: TestResult | None, have_base: bool
) -> Verdict:
    """An unexcused red test named by what the base showed (see `Verdict`): red on the
    base too is `still_failing` only while it got no worse there (`worse_than_base`)."""
    if verdict not in UNEXCUSED_RED:
        return verdict
    if not have_base or base is None:
        return Verdict.FAILING
    if base.status in RED and not worse_than_base(test, base):
        return Verdict.STILL_FAILING
    return Verdict.REGRESSION


# Worse than base is a regression, even when the base was red (issue 31): a test red on the
# base too is `regressed`, not `still failing`, when its avg KL, its share of differing
# logprobs or its share of missed cache hits is more than WORSE_FACTOR times the base's (or
# is failing where the base's was 0). The rule, stated once; docs/cli.md says it in words.
# On a GPU engine whose tests are always a little red, "red on base too" let a 240x jump
# through (CPU base, GPU head).
WORSE_FACTOR = 10.0


@dataclass(frozen=True)
class RedNumbers:
    """What a red earlier result measured, as `worse_than` compares it: avg KL, the share of
    differing logprobs, the share of missed cache hits (None: not measured)."""

    kl: float | None = None
    differing: float | None = None
    missed: float | None = None

    @classmethod
    def of(cls, test: TestResult) -> RedNumbers:
        exact, hits = test.exact, test.cache_hits
        return cls(
            test.kl_div,
            _share(exact.mismatched, exact.tokens) if exact else None,
            _share(hits.total - hits.hit, hits.total) if hits else None,
        )


def worse_than_base(test: TestResult, base: TestResult | None) -> tuple[str, ...]:
    """How a red test got worse than its red base, base -> head, one reason per number
    that grew past WORSE_FACTOR (empty: not worse, or not red on both)."""
    if base is None or test.status not in RED or base.status not in RED:
        return ()
    return worse_than(test, RedNumbers.of(base))


def worse_than(
    test: TestResult, before: RedNumbers, source: str = "the base", against: str = ""
) -> tuple[str, ...]:
    """The rule: how a red test's numbers grew past WORSE_FACTOR x what a red earlier result
    measured (`source`: its base, or the worst its history failed with), before -> now. A
    number measured on one side only cannot be told no worse (issue 36): that is a reason
    too, never "not worse"."""
    if test.status not in RED:
        return ()
    now, fails = RedNumbers.of(test), numbers.failing(test)  # the one rule, not a copy
    said = _Said(source, against)
    found = (
        # A KL with no threshold to judge it by may be failing: it grew from 0 all the same.
        said.grew("avg KL", before.kl, now.kl, "kl" in fails or numbers.kl_unjudged(test), fmt_kl),
        said.grew(
            "differing logprobs", before.differing, now.differing, "exact" in fails, _percent
        ),
        said.grew("missed cache hits", before.missed, now.missed, "hits" in fails, _percent),
    )
    return tuple(reason for reason in found if reason)


@dataclass(frozen=True)
class _Said:
    """How `worse_than` words a number that grew: `source` names the earlier result, and
    `against` follows a growth."""

    source: str
    against: str

    def grew(
        self,
        what: str,
        base: float | None,
        head: float | None,
        head_fails: bool,
        shown: Callable[[float | None], str],
    ) -> str:
        """`what base -> head (Nx)` when head > WORSE_FACTOR x base (from 0: only if failing);
        "cannot tell" when one side has the number and the other none (from none to 0 is
        no growth)."""
        if base is None and head is None:
            return ""  # neither side measured it: nothing here to compare
        if base is None:
            return "" if head == 0 else f"{what} {shown(head)} where {self.source} {_NONE}"
        if head is None:
            return (
                f"{what}: the head recorded none where {self.source} recorded {shown(base)}{_TELL}"
            )
        if not head > WORSE_FACTOR * base:
            return ""
        if base <= 0:
            return f"{what} {shown(base)} → {shown(head)}{self.against}" if head_fails else ""
        return f"{what} {shown(base)} → {shown(head)} ({head / base:.3g}x){self.against}"


_TELL = " (cannot tell it is no worse)"
_NONE = "recorded none" + _TELL


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole > 0 else None


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.3g}%"


def a_repeat_was_red(test: TestResult) -> bool:
    return test.repeats is not None and any(s in RED for s in test.repeats.statuses)


def pre_existing(test: TestResult, base: TestResult | None) -> bool:
    """The base branch was already in the same bad state, so this PR did not cause it.

    Without a base nothing is known to pre-exist: the gate fails closed.
    """
    if base is None or test.status is Status.PASSED:
        return False
    both_red = test.status in RED and base.status in RED
    if both_red:
        return not worse_than_base(test, base)
    return base.status is test.status


def excused_by_base(verdict: Verdict, test: TestResult, base: TestResult | None) -> bool:
    """In `regression` mode a plain red test that was red on the base does not gate.

    A blocker that merged is different: the test was promised green, so it gates.
    """
    plain = not test.blocked_by and (verdict in UNEXCUSED_RED or verdict in DID_NOT_MEASURE)
    # Not exercised on the base too: the knob was dropped before this change.
    plain = plain or verdict is Verdict.NOT_EXERCISED
    return plain and pre_existing(test, base)


@dataclass(frozen=True)
class Decision:
    """The run's gate: passed or not, the exit code, and why, in words."""

    passed: bool
    exit_code: ExitCode
    reasons: tuple[str, ...]
    report_only: bool = False  # `--fail-on never`: passed because nothing may gate
    # Could not run (exit 2) with something red besides: the run has a hole in it, and
    # what it did measure failed.
    red: bool = False

    @property
    def verdict(self) -> str:
        """`passed`, `failed` or `could_not_run`, for machines."""
        if self.exit_code is ExitCode.COULD_NOT_RUN:
            return "could_not_run"
        return "passed" if self.passed else "failed"

    @property
    def label(self) -> str:
        if self.exit_code is ExitCode.COULD_NOT_RUN:
            return "gate failed, run incomplete" if self.red else "could not run"
        if self.report_only:
            return "report only (gate off)"
        return "gate passed" if self.passed else "gate failed"


def decide(
    gating: Mapping[Verdict, int],
    executed: int,
    policy: Policy,
    unproven: int = 0,
    unreached: int | None = None,
    unnamed_hole: bool = False,
) -> Decision:
    """The run's decision from the count of gating tests per verdict (and of new tests
    not shown to detect anything, which gate under `proof_strict`; and of the PR's changed
    functions no test executed, `unreached`, None when the run recorded no change, which
    gate under `policy.unreached`). A run in which some
    gating test could not run (the server, the runner, the run) could not run: exit 2, so
    the commit status says error, not failure (a run with a hole in it is not a clean red
    run, issue 31); what else gated is said beside it (`red`). `unnamed_hole`: the run
    stopped early and a part of it recorded no plan, so it lost tests nobody can name: it
    could not run, whatever else it shows (issue 36)."""
    ordered = _ordered(gating.items())
    reasons: tuple[str, ...] = (_UNNAMED_HOLE,) if unnamed_hole else ()
    reasons += tuple(_describe(verdict, count) for verdict, count in ordered)
    if executed == 0:
        # What gated is said beside it: the rows say so in bold (issue 37, one story).
        reason = "no test executed (all skipped, not run, or no tests at all)"
        return Decision(False, ExitCode.COULD_NOT_RUN, (reason, *reasons))
    if policy.fail_on is FailOn.NEVER:
        return Decision(True, ExitCode.GATE_PASSED, (), report_only=True)
    if unproven and policy.proof_strict:
        shown = "new test" if unproven == 1 else "new tests"
        reasons += (f"{unproven} {shown} not shown to detect anything (proof strict)",)
    if policy.unreached:
        reasons += _unreached(unreached)
    if unnamed_hole or any(verdict is Verdict.COULD_NOT_RUN for verdict, _ in ordered):
        red = len(reasons) > 1
        return Decision(False, ExitCode.COULD_NOT_RUN, reasons, red=red)
    if reasons:
        return Decision(False, ExitCode.GATE_FAILED, reasons)
    return Decision(True, ExitCode.GATE_PASSED, ())


_UNNAMED_HOLE = (
    "the run stopped early and a part of it recorded no plan: the tests it did not run "
    "cannot be named"
)


def _unreached(count: int | None) -> tuple[str, ...]:
    if count is None:
        return ("fail-on unreached: the run recorded no PR change (run --reach-diff BASE)",)
    if count == 0:
        return ()
    shown = "changed function" if count == 1 else "changed functions"
    return (f"{count} {shown} not shown to run under the bit-exact suites (unreached)",)


def _ordered(items: Iterable[tuple[Verdict, int]]) -> list[tuple[Verdict, int]]:
    return sorted(((v, n) for v, n in items if n), key=lambda item: SEVERITY[item[0]])


def _describe(verdict: Verdict, count: int) -> str:
    return states.counted(states.Kind(verdict.value), count)
