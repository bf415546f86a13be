"""Head results against base results: per-test deltas, transitions and the gate (pure).

Tests are matched by id (ids are unique across a run: `results.merge` enforces it). A
base that is missing or unreadable is carried as a reason, never as an empty run: an
empty base would turn every test "new" and every red test into a regression of this PR.

A test without a verdict in the head is an `error`, never silently dropped: a test of the
head's own plan that has no result (the run was killed before it), or a base test the
head neither reports nor planned when the head records no plan (it cannot be told removed
from lost). Only a base test outside the head's recorded plan is `removed`: the PR took it
out of its suite definitions (or `--select` left it out).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

import msgspec
from msgspec.structs import replace  # of a TestDelta: see its docstring

from kl_bitexact.compare import against_base, gate, knobs, states
from kl_bitexact.compare.against_base import BaseDiff
from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.gate import RED, Decision, Policy, Verdict
from kl_bitexact.compare.history import History, Standing, TestHistory, lets_through
from kl_bitexact.compare.proof import Outcome, Proof, prove
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import verdict as numbers
from kl_bitexact.results.model import Cause, Results, Status, TestResult
from kl_bitexact.suite.references import BlockerRef, parse_ref


class Transition(str, Enum):
    """How a test moved from the base branch to this head."""

    REGRESSED = "regressed"  # red now, not red on the base (or far worse than it)
    NEWLY_NOT_RUN = "newly_not_run"  # measured on the base, not now
    STILL_FAILING = "still_failing"
    FIXED = "fixed"
    NEW = "new"
    REMOVED = "removed"
    UNCHANGED = "unchanged"
    NO_BASE = "no_base"  # no usable base to compare with


@dataclass(frozen=True, slots=True)
class Blocker:
    """One `blocked_by` reference as written, its canonical form and its resolved state."""

    text: str
    ref: str | None  # canonical owner/repo#N; None when the text is not a reference
    state: BlockerState
    reason: str = ""  # why an unknown state is unknown (not looked up, lookup failed)


class TestDelta(msgspec.Struct, frozen=True):
    """One test id: head and base values, its transition and its gate verdict.

    A frozen msgspec Struct rather than a frozen dataclass (issue 40): one is built per test
    and most are built again by `replace`, and a frozen dataclass's `__init__` sets each of
    its 13 fields through `object.__setattr__` (4 us a delta, 0.4 s at 100,000 tests); a
    Struct's is done in C. `replace` here is msgspec's, for the same reason."""

    __test__: ClassVar[bool] = False  # not a pytest test class despite the name

    suite: str
    id: str
    head: TestResult | None  # None: removed on this head
    base: TestResult | None  # None: new, or no base
    transition: Transition
    verdict: Verdict | None  # None for removed tests
    blockers: tuple[Blocker, ...] = ()
    gating: bool = False
    # Against the base branch's recent runs (`--history-dir`, `--fetch-history`); None
    # when no history was given. `known_let_through`: it would gate, but it already failed
    # there and the policy lets such tests through (`--fail-on ...,allow-known`).
    standing: Standing | None = None
    known_let_through: bool = False
    # Red on the base too, but worse than it (`gate.worse_than_base`): base -> head, why.
    worse: tuple[str, ...] = ()
    # A cache test's numbers against the base's own (compare/against_base.py); None: not
    # a cache test, or nothing measured.
    against_base: BaseDiff | None = None
    # The test's server arguments or stated facts, changed against the base (compare/knobs).
    knobs: tuple[str, ...] = ()

    @property
    def kl_change(self) -> float | None:
        head = self.head.kl_div if self.head else None
        base = self.base.kl_div if self.base else None
        return None if head is None or base is None else head - base


@dataclass(frozen=True)
class Comparison:
    head: Results
    baseline: Baseline
    deltas: tuple[TestDelta, ...]
    decision: Decision
    policy: Policy = field(default_factory=Policy)
    blockers_resolved: bool = False
    # `--proof`: each new or changed test run on the base revision too (compare/proof.py);
    # None when no proof run was given.
    proofs: tuple[Proof, ...] | None = None
    # The base branch's recent runs (compare/history.py); None when none was asked for.
    history: History | None = None
    # Each delta's state, worked out once (issue 40: every part of a report asks again, 3
    # times per test at 100,000 tests): keyed by the delta's identity, kept with the delta
    # so that an identity reused by another object is never read as its.
    _states: dict[int, tuple[TestDelta, states.State]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def outcomes(self) -> Counter[Outcome]:
        return Counter(p.outcome for p in self.proofs or ())

    @property
    def verdicts(self) -> Counter[Verdict]:
        return Counter(d.verdict for d in self.deltas if d.verdict is not None)

    @property
    def transitions(self) -> Counter[Transition]:
        return Counter(d.transition for d in self.deltas)

    def state(self, delta: TestDelta) -> states.State:
        """The test's state: the one word every part of every report says it with."""
        known = self._states.get(id(delta))
        if known is not None and known[0] is delta:
            return known[1]
        state = states.of(delta, self.history)
        self._states[id(delta)] = (delta, state)
        return state

    @property
    def suite_count(self) -> int:
        return len({suite.name for suite in self.head.suites})


def compare(
    head: Results,
    base: Results | Baseline | None,
    *,
    blockers: Mapping[str, BlockerState] | Mapping[BlockerRef, BlockerState] | None = None,
    policy: Policy | None = None,
    default_repo: str | None = None,
    proof: Results | None = None,
    blocker_reasons: Mapping[str, str] | None = None,
    history: History | None = None,
    promised: frozenset[str] = frozenset(),
) -> Comparison:
    """Compare `head` with `base` and decide the gate.

    `blockers` maps references (`BlockerRef` or canonical `owner/repo#N`) to their state; None means
    nobody resolved them, so every blocker is unknown. `default_repo` (owner/repo)
    completes short `#N` references. `proof`: the new and changed tests run on the base
    revision (`run --prove-base`), each judged against its head result. `blocker_reasons`:
    why a reference's state is unknown (canonical `owner/repo#N` keys), shown with it.
    `history`: the base branch's recent runs; each test's standing against them, and
    under `--fail-on ...,allow-known` a known failure does not gate. `promised`: the tests
    this pull request is the blocker of (`excuses.promised`): red, nothing excuses them.
    """
    policy = policy or Policy()
    baseline = base if isinstance(base, Baseline) else Baseline.of(base)
    base_tests = _index(baseline.results)
    resolve = _Resolver(blockers or {}, default_repo, blocker_reasons or {})
    judge = _Judge(baseline, resolve, policy, head.planned_ids(), promised)
    no_verdict = _NoVerdict.of(head)
    reported = [(suite.name, test) for suite, test in head.all_tests()]
    reported += [(item.suite, no_verdict(item.id, item.check)) for item in head.missing()]
    deltas = [judge(suite, test, base_tests.pop(test.id, None)) for suite, test in reported]
    for suite, test in base_tests.values():
        if no_verdict.plan_complete:
            deltas.append(_removed(suite, test))
        else:
            lost = no_verdict(test.id, test.check)
            deltas.append(judge(suite, lost, (suite, test)))
    deltas = _with_knobs(deltas, head, baseline.results)
    if history is not None:
        deltas = [_against_history(d, history, policy, d.id in promised) for d in deltas]
    configs = _same_configuration(head, baseline.results)
    deltas = [_against_base(delta, configs, history, policy) for delta in deltas]
    proofs = None
    if proof is not None:
        verdicts = {d.id: d.verdict for d in deltas if d.verdict is not None}
        proofs = prove(proof, head, verdicts, strict=policy.proof_strict)
    unproven = sum(1 for p in proofs or () if p.gating)
    unreached = len(head.changes.unreached) if head.changes is not None else None
    hole = head.run.finished is False and not head.plan_complete
    decision = gate.decide(_gating(deltas), _executed(head), policy, unproven, unreached, hole)
    return Comparison(
        head, baseline, tuple(deltas), decision, policy, blockers is not None, proofs, history
    )


def _index(results: Results | None) -> dict[str, tuple[str, TestResult]]:
    if results is None:
        return {}
    return {test.id: (suite.name, test) for suite in results.suites for test in suite.tests}


@dataclass(frozen=True)
class _Judge:
    """One head test against its base: its verdict, whether it gates, its transition."""

    baseline: Baseline
    resolve: _Resolver
    policy: Policy
    planned: frozenset[str]  # the tests a run planned: a pass must prove all (results.verdict)
    promised: frozenset[str] = frozenset()  # this PR is their blocker: red is never excused

    def __call__(
        self, suite: str, test: TestResult, base: tuple[str, TestResult] | None
    ) -> TestDelta:
        policy = self.policy
        base_test = base[1] if base else None
        test, contradicted = numbers.judged(test, planned=test.id in self.planned)
        blockers = tuple(map(self.resolve, test.blocked_by))
        have_base = self.baseline.results is not None
        verdict = gate.verdict(test, [blocker.state for blocker in blockers])
        verdict = gate.by_base(verdict, test, base_test, have_base)
        ours = test.id in self.promised
        if ours and verdict in gate.UNEXCUSED_RED:
            verdict = Verdict.REGRESSION  # as a merged blocker's: it was to turn green
        gating = gate.gates(verdict, test, policy)
        # An interrupted or partial base run excuses nothing (Baseline.incomplete), nor
        # does the base excuse what this pull request was to turn green.
        excusing = None if self.baseline.incomplete or ours else base_test
        if gating and policy.fail_on is gate.FailOn.REGRESSION:
            gating = not gate.excused_by_base(verdict, test, excusing)
        if contradicted:
            # Neither a blocker nor the base excuses a result that contradicts itself.
            verdict, gating = Verdict.INFRA, policy.fail_on is not gate.FailOn.NEVER
        transition = transition_of(test, base_test, have_base)
        worse = gate.worse_than_base(test, base_test)
        return TestDelta(
            suite, test.id, test, base_test, transition, verdict, blockers, gating, worse=worse
        )


def _against_history(
    delta: TestDelta, history: History, policy: Policy, promised: bool = False
) -> TestDelta:
    standing = history.standing(delta.id)
    let_through = (
        delta.gating
        and not promised
        and delta.head is not None
        and delta.verdict is not None
        and lets_through(policy, delta.verdict, delta.head, standing)
    )
    beyond = _beyond_history(delta.head, history.of(delta.id)) if let_through else ()
    # Known to fail, but far worse than it ever failed: not what `allow-known` excuses.
    let_through = let_through and not beyond
    gating = delta.gating and not let_through
    return replace(
        delta,
        standing=standing,
        known_let_through=let_through,
        gating=gating,
        worse=delta.worse + beyond,
    )


def _beyond_history(head: TestResult | None, found: TestHistory | None) -> tuple[str, ...]:
    """How a red head got worse than the worst its history failed with (`gate.worse_than`)."""
    worst = found.worst_failure() if found is not None else None
    if head is None or worst is None:
        return ()
    return gate.worse_than(head, worst, "the history's failures", " against the history's worst")


# The verdicts a base-differential finding may change: not a blocker's, not a contradiction's.
_JUDGED_AGAINST_BASE = gate.UNEXCUSED_RED | {Verdict.OK}


def _against_base(
    delta: TestDelta, configs: Mapping[str, bool], history: History | None, policy: Policy
) -> TestDelta:
    """A cache test against the base's own numbers: a finding that gates (the cache path
    changed, the engine got noisier, cannot tell) makes it a regression, or a test that did
    not measure; cache-only drift the base shows too clears the floor rule's red."""
    if delta.head is None or delta.verdict not in _JUDGED_AGAINST_BASE:
        return delta
    if delta.head.noise_floor is None:
        # No floor, no cache test to judge (`against_base.judge` says None): asked first so
        # that a report of 100,000 plain tests lays out no history trend for each (issue 40).
        return delta
    found = against_base.judge(
        delta.head,
        delta.base,
        same_config=configs.get(delta.id, False),
        history=history.of(delta.id) if history is not None else None,
    )
    if found is None:
        return delta
    if found.gates and policy.fail_on is not gate.FailOn.NEVER:
        blamed = found.finding in against_base.GATING_FINDINGS or (
            bool(found.noisier) and found.gated
        )
        verdict = Verdict.REGRESSION if blamed else Verdict.INFRA
        return replace(
            delta, against_base=found, verdict=verdict, gating=True, known_let_through=False
        )
    if found.cleared(delta.head, numbers.failing(delta.head)):
        return replace(delta, against_base=found, verdict=Verdict.OK, gating=False)
    return replace(delta, against_base=found)


def _same_configuration(head: Results, base: Results | None) -> dict[str, bool]:
    """Per test id with a noise floor (the tests judged against the base's numbers): whether
    its head and base suites ran the same engine configuration."""
    if base is None:
        return {}
    # Nested loops rather than all_tests(): its pair per test is 100,000 tuples (issue 40).
    floored = {t.id: s.server for s in head.suites for t in s.tests if t.noise_floor}
    if not floored:
        return {}
    base_servers = {t.id: suite.server for suite, t in base.all_tests() if t.id in floored}
    return {
        test_id: against_base.same_configuration(server, base_servers.get(test_id))
        for test_id, server in floored.items()
    }


@dataclass(frozen=True)
class _NoVerdict:
    """The `error` standing for a test the head should have reported and did not. The
    head's plan is read once: asked for each lost test (a run killed halfway loses
    thousands), it made compare quadratic (issue 40)."""

    head: Results
    plan_complete: bool
    planned: frozenset[str]

    @classmethod
    def of(cls, head: Results) -> _NoVerdict:
        planned = frozenset(item.id for item in head.plan or ())
        return cls(head, head.plan_complete, planned)

    def __call__(self, test_id: str, check: str) -> TestResult:
        head = self.head
        if head.plan is None:
            why = (
                "no verdict: in the base but not in the head's results, which record no plan, "
                "so a removed test cannot be told from a lost one"
            )
        elif not self.plan_complete and test_id not in self.planned:
            why = (
                "no verdict: in the base but not in the head's results, a part of which "
                "recorded no plan, so a removed test cannot be told from a lost one"
            )
        elif head.run.finished is False:
            why = "no verdict: the run stopped before this planned test (it did not finish)"
        else:
            why = "no verdict: planned by the run but missing from its results"
        return TestResult(
            id=test_id, check=check, status=Status.ERROR, message=why, cause=Cause.RUNNER
        )


def _with_knobs(deltas: list[TestDelta], head: Results, base: Results | None) -> list[TestDelta]:
    """Each test whose server arguments or stated facts changed, saying how (knobs.py)."""
    if base is None:
        return deltas
    heads = {suite.name: suite.server for suite in head.suites}
    bases = {suite.name: suite.server for suite in base.suites}
    # A suite's server is every one of its tests': its arguments compared once (issue 40:
    # once per test was a third of `report --baseline`'s compare at 100,000 tests). A
    # planned test that never ran may name a suite neither side has: nothing to compare.
    by_suite = {
        name: knobs.argument_changes(heads.get(name), bases.get(name))
        for name in heads.keys() | bases.keys()
    }

    def noted(delta: TestDelta, head: TestResult, base: TestResult) -> TestDelta:
        found = (*by_suite.get(delta.suite, ()), *knobs.fact_changes(head, base))
        return replace(delta, knobs=found) if found else delta

    # Only a test with facts, or on a server whose arguments changed, can have a knob to
    # name: the others are passed by without a call (most of 100,000 tests).
    return [
        noted(delta, delta.head, delta.base)
        if delta.head is not None
        and delta.base is not None
        and (by_suite.get(delta.suite) or delta.head.facts or delta.base.facts)
        else delta
        for delta in deltas
    ]


def _removed(suite: str, base: TestResult) -> TestDelta:
    return TestDelta(suite, base.id, None, base, Transition.REMOVED, None)


def transition_of(head: TestResult, base: TestResult | None, have_base: bool) -> Transition:
    if not have_base:
        return Transition.NO_BASE
    if base is None:
        return Transition.NEW
    head_red, base_red = head.status in RED, base.status in RED
    if head.status is Status.PASSED:  # most tests, asked first (issue 40: 100,000 of them)
        return Transition.FIXED if base_red else Transition.UNCHANGED
    if head.status is Status.ERROR:
        # Nothing measured: never "regressed" (issue 27), whatever the base showed.
        return Transition.UNCHANGED if base.status is Status.ERROR else Transition.NEWLY_NOT_RUN
    if head.status in _UNMEASURED and base.status in gate.EXECUTED:
        return Transition.NEWLY_NOT_RUN
    if head_red:
        still = base_red and not gate.worse_than_base(head, base)
        return Transition.STILL_FAILING if still else Transition.REGRESSED
    return Transition.UNCHANGED


_UNMEASURED = frozenset({Status.NOT_RUN, Status.SKIPPED, Status.NOT_EXERCISED})


def _gating(deltas: list[TestDelta]) -> Counter[Verdict]:
    return Counter(d.verdict for d in deltas if d.gating and d.verdict is not None)


def _executed(results: Results) -> int:
    return sum(1 for _, test in results.all_tests() if test.status in gate.CONCLUDED)


class _Resolver:
    """Canonicalises blocked_by texts once each and looks their states up."""

    def __init__(
        self,
        states: Mapping[str, BlockerState] | Mapping[BlockerRef, BlockerState],
        default_repo: str | None,
        reasons: Mapping[str, str],
    ) -> None:
        self._states = {str(key).lower(): state for key, state in states.items()}
        self._reasons = {key.lower(): reason for key, reason in reasons.items()}
        self._default_repo = default_repo
        self._seen: dict[str, Blocker] = {}

    def __call__(self, text: str) -> Blocker:
        if text not in self._seen:
            self._seen[text] = self._resolve(text)
        return self._seen[text]

    def _resolve(self, text: str) -> Blocker:
        try:
            ref = str(parse_ref(text, self._default_repo))
        except ConfigError:
            return Blocker(text, None, BlockerState.UNKNOWN, self._unresolvable(text))
        key = ref.lower()
        state = self._states.get(key, BlockerState.UNKNOWN)
        return Blocker(text, ref, state, self._reasons.get(key, ""))

    @staticmethod
    def _unresolvable(text: str) -> str:
        # Said without the text itself (shown beside it already, and untrusted). `#N` is
        # resolved against the repository report and publish were given: say how to give one.
        try:
            parse_ref(text, "owner/name")
        except ConfigError:
            return "not a pull request or issue reference"
        return "#N with no repository known: pass --repo OWNER/NAME or set GITHUB_REPOSITORY"
