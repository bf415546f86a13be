"""A cache test judged against the base's own numbers (issues 41 and 36.4) (pure).

On an engine that is not batch-invariant a cache test's KL carries the engine's own drift
(its noise floor: the same prompts with no cache). A fixed factor of that floor is a weak
reference: on an H200 it missed a cache fault at 3-4x the floor and failed a healthy
launch whose floor was 0. Where the engine is run-to-run deterministic at the test's
configuration, the base's numbers are a sharper one, bit for bit:

- **Determinism is measured, not assumed**: the base's `run --repeat` (every logprob, KL
  and floor of its repeats identical) or main's history (runs with the same floor gave
  identical cache numbers). Unmeasured or not deterministic: the base's numbers are not
  used as a reference, and the finding says so.
- **Same configuration, floor bit-identical to the base's**: the cache numbers must be too
  (`identical`); any difference is the cache path's (`cache_changed`), and gates with both
  numbers side by side. A floor of 0 with cache drift (cache-only drift, from slot batching
  for instance) identical to the base's is no fault of the change, though the floor rule
  alone fails it (`cache_only_drift`).
- **The floor moved** (the change altered the arithmetic, or the test's prompts): the
  cache KL's ratio to the floor may move from the base's by as much as main's history
  shows it moving (its largest / smallest ratio); beyond that it gates (`ratio_grew`);
  without such a history the cache path is judged by the floor rule alone, and it says so.
- **The engine got noisier** (issue 36.4): a floor above every floor the base side measured
  (the base, its repeats, main's history) gates under `gate: noise-floor`; where
  determinism is not shown it must exceed NOISIER_FACTOR x that (the documented fallback).
- A base test that was judged but recorded no cache KL or no floor: "cannot tell", which
  gates (issue 36: a missing number is never read as "no worse").
- No base result (a new test, a base that errored) and no history: judged by the floor rule
  alone, and it says so (never silently).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from kl_bitexact.compare.history import Point, TestHistory
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import NoiseFloor, ServerInfo, Status, TestResult

# Where run-to-run determinism is not shown, a floor counts as grown ("the engine got
# noisier") only beyond this multiple of the largest floor the base side measured: the
# fallback, as the floor rule's factor is. Deterministic engines need none: any growth is.
NOISIER_FACTOR = 2.0
JUDGED = frozenset({Status.PASSED, Status.FAILED})


class Determinism(str, Enum):
    """Whether the engine repeats its numbers bit for bit at the test's configuration."""

    DETERMINISTIC = "deterministic"
    NOT_DETERMINISTIC = "not_deterministic"
    UNMEASURED = "unmeasured"


class Finding(str, Enum):
    """What the head's cache numbers are against the base's."""

    IDENTICAL = "identical"  # floor and cache numbers bit-identical to the base's
    CACHE_CHANGED = "cache_changed"  # floor bit-identical, cache numbers not: gates
    ARITHMETIC_CHANGED = "arithmetic_changed"  # floor moved; ratio within main's history
    RATIO_GREW = "ratio_grew"  # floor moved; ratio moved beyond main's history: gates
    FLOOR_RULE_ONLY = "floor_rule_only"  # not judged against the base (`reason` says why)


GATING_FINDINGS = frozenset({Finding.CACHE_CHANGED, Finding.RATIO_GREW})


@dataclass(frozen=True)
class Measured:
    """Determinism as measured, and by what (`how`, in words)."""

    determinism: Determinism
    how: str


@dataclass(frozen=True)
class BaseDiff:
    """One cache test against its base: the numbers side by side and what they show."""

    finding: Finding
    reason: str  # the finding in words
    determinism: Determinism
    determinism_how: str
    floor: float | None
    kl: float | None
    ratio: float | None
    base_floor: float | None = None
    base_kl: float | None = None
    base_ratio: float | None = None
    noisier: str = ""  # "the engine got noisier: ..." or ""
    cannot_tell: str = ""  # why the floor could not be compared with the base's, or ""
    gated: bool = False  # the test is judged by its floor (`gate: noise-floor`)
    # Floor 0, cache drift, identical to the base's: the floor rule's red is no fault of
    # the change (`cleared`).
    cache_only_drift: bool = False

    @property
    def gates(self) -> bool:
        """A finding that fails the gate on its own (the policy permitting): a changed cache
        path, a base number missing, and under `gate: noise-floor` a noisier engine."""
        noisier = bool(self.noisier) and self.gated
        return self.finding in GATING_FINDINGS or bool(self.cannot_tell) or noisier

    @property
    def blames_change(self) -> bool:
        """A gating finding the change made (a regression); else "cannot tell" (a base
        number missing: the check did not measure what the gate needs)."""
        return self.finding in GATING_FINDINGS or (bool(self.noisier) and self.gated)

    def cleared(self, test: TestResult, failing: frozenset[str]) -> bool:
        """The test is red only by the floor rule, on cache-only drift the base shows too."""
        return (
            self.cache_only_drift
            and not self.gates
            and test.status is Status.FAILED
            and failing == frozenset({"kl"})
        )


def same_configuration(head: ServerInfo | None, base: ServerInfo | None) -> bool:
    """The same engine launched the same way (its build may differ: that is the change).
    A server at a URL is known by no flags: its URL is not part of the configuration."""
    if head is None or base is None:
        return False
    return (head.engine, _flags(head.args), head.backend) == (
        base.engine,
        _flags(base.args),
        base.backend,
    )


def _flags(args: Sequence[str]) -> tuple[str, ...]:
    return ("--base-url",) if args[:1] == ("--base-url",) else tuple(args)


def judge(
    head: TestResult,
    base: TestResult | None,
    *,
    same_config: bool,
    history: TestHistory | None = None,
) -> BaseDiff | None:
    """The head cache test against its base (None: not a cache test, or nothing measured)."""
    floor = head.noise_floor
    if floor is None or head.status not in JUDGED or head.kl_div is None:
        return None
    points = _points(history)
    measured = determinism(base, points)
    found = _finding(head, floor, base, same_config, measured, points)
    gated = floor.factor is not None
    return _with_floor_findings(found, floor, base, measured, _all_points(history), gated)


def determinism(base: TestResult | None, points: Sequence[Point]) -> Measured:
    """From the base's repeats first (the same commit, measured side by side), else from
    main's runs that share a floor (the same arithmetic)."""
    repeats = base.repeats if base is not None else None
    if repeats is not None and repeats.count >= 2:
        identical = (
            repeats.changed == 0
            and repeats.positions > 0
            and len(set(repeats.kl)) == 1
            and len(set(repeats.floors)) <= 1
            and repeats.agree
        )
        if identical:
            return Measured(
                Determinism.DETERMINISTIC, f"the base's {repeats.count} repeats were bit-identical"
            )
        why = repeats.first_change or "their numbers differ"
        return Measured(
            Determinism.NOT_DETERMINISTIC, f"the base's {repeats.count} repeats differ ({why})"
        )
    return _from_history(points)


def _from_history(points: Sequence[Point]) -> Measured:
    by_floor: dict[float, set[tuple[object, ...]]] = {}
    runs: dict[float, int] = {}
    for point in points:
        assert point.floor is not None  # _points keeps only those
        by_floor.setdefault(point.floor, set()).add(_history_numbers(point))
        runs[point.floor] = runs.get(point.floor, 0) + 1
    repeated = [floor for floor, count in runs.items() if count >= 2]
    if not repeated:
        return Measured(
            Determinism.UNMEASURED,
            "not measured: run the base branch with --repeat 2, or give main's history",
        )
    if any(len(by_floor[floor]) > 1 for floor in repeated):
        return Measured(
            Determinism.NOT_DETERMINISTIC,
            "main's runs with the same floor gave different cache numbers",
        )
    count = sum(runs[floor] for floor in repeated)
    return Measured(
        Determinism.DETERMINISTIC,
        f"{count} runs of main's history with the same floor gave bit-identical numbers",
    )


def _history_numbers(point: Point) -> tuple[object, ...]:
    return (point.kl, point.mismatched, point.tokens, point.hits, point.hits_total)


def _points(history: TestHistory | None) -> list[Point]:
    """The history's runs that measured a floor and a KL (the rest say nothing here)."""
    if history is None:
        return []
    return [p for p in history.points if p is not None and p.floor is not None and p.kl is not None]


def _all_points(history: TestHistory | None) -> list[Point]:
    """Every run of main's history, whether it recorded a cache KL or not: each floor is an
    observation of the engine's noise, so a run whose KL was lost still counts when the
    head's floor is compared with main's (dropping it let a noisier head pass)."""
    return [] if history is None else [p for p in history.points if p is not None]


def _finding(
    head: TestResult,
    floor: NoiseFloor,
    base: TestResult | None,
    same_config: bool,
    measured: Measured,
    points: Sequence[Point],
) -> BaseDiff:
    shown = _Numbers.of(head, base)
    why_not = _not_comparable(base, same_config, measured)
    if why_not:
        return shown.diff(Finding.FLOOR_RULE_ONLY, why_not, measured)
    assert base is not None and base.noise_floor is not None  # _not_comparable checked
    if not _same_floor(_floor_numbers(floor), _floor_numbers(base.noise_floor)):
        return _arithmetic_changed(shown, measured, points)
    if _cache_numbers(head) == _cache_numbers(base):
        return _identical(shown, measured)
    base_kl, kl = side_by_side(shown.base_kl, shown.kl)
    return shown.diff(
        Finding.CACHE_CHANGED,
        "the no-cache floor is bit-identical to the base's "
        f"({fmt_kl(shown.base_floor)}) but the cache path's numbers are not: avg KL "
        f"{base_kl} on the base, {kl} here{_ratios(shown.base_ratio, shown.ratio)}",
        measured,
    )


def side_by_side(base: float | None, head: float | None) -> tuple[str, str]:
    """Two KLs as shown, with every digit where the short forms would look the same."""
    short = fmt_kl(base), fmt_kl(head)
    if short[0] != short[1] or base == head or base is None or head is None:
        return short
    return repr(base), repr(head)


def _not_comparable(base: TestResult | None, same_config: bool, measured: Measured) -> str:
    """Why the base's numbers cannot be the reference ("" when they can)."""
    if base is None or base.status not in JUDGED:
        return "no base result for this test"
    if missing_on_base(base):
        return missing_on_base(base)
    if not same_config:
        return "the base ran another engine configuration (server, flags or backend)"
    if measured.determinism is not Determinism.DETERMINISTIC:
        return f"run-to-run determinism {measured.how}"
    return ""


def _identical(shown: _Numbers, measured: Measured) -> BaseDiff:
    drift = shown.floor == 0 and bool(shown.kl)
    reason = "floor and cache numbers bit-identical to the base's"
    if drift:
        reason += (
            f": cache-only drift (avg KL {fmt_kl(shown.kl)} over a no-cache floor of 0, e.g. "
            "slot batching), the base's own, so not the change's"
        )
    return shown.diff(Finding.IDENTICAL, reason, measured, cache_only_drift=drift)


def _arithmetic_changed(shown: _Numbers, measured: Measured, points: Sequence[Point]) -> BaseDiff:
    moved = (
        f"the no-cache floor moved ({fmt_kl(shown.base_floor)} on the base, "
        f"{fmt_kl(shown.floor)} here): the change altered the arithmetic (or the test's "
        "prompts)"
    )
    # A ratio of 0 (no cache KL over a floor) bounds no relative change: leaving it in
    # divided by zero (exit 3) on a history where the cache path once matched exactly.
    ratios = [p.kl / p.floor for p in points if p.floor and p.kl]
    if shown.ratio is None or not shown.base_ratio:
        why = "the floor is 0 on one side, so the cache KL has no ratio to it"
        return shown.diff(Finding.FLOOR_RULE_ONLY, f"{moved}; {why}; {_FLOOR_RULE}", measured)
    if len(ratios) < 2:
        why = "fewer than two runs of main's history have a nonzero ratio to judge its change by"
        return shown.diff(Finding.FLOOR_RULE_ONLY, f"{moved}; {why}; {_FLOOR_RULE}", measured)
    span, change = max(ratios) / min(ratios), shown.ratio / shown.base_ratio
    said = (
        f"{moved}; the cache KL's ratio to the floor went {shown.base_ratio:.3g}x → "
        f"{shown.ratio:.3g}x ({change:.3g}x), main's last {len(ratios)} runs moved it by at "
        f"most {span:.3g}x"
    )
    finding = Finding.RATIO_GREW if change > span else Finding.ARITHMETIC_CHANGED
    return shown.diff(finding, said, measured)


_FLOOR_RULE = "the cache path is judged by the floor rule alone"


def _with_floor_findings(
    found: BaseDiff,
    floor: NoiseFloor,
    base: TestResult | None,
    measured: Measured,
    points: Sequence[Point],
    gated: bool,
) -> BaseDiff:
    references = _base_floors(base, points)
    noisier = ""
    if floor.kl is not None and references:
        noisier = _noisier(floor.kl, max(references), measured)
    missing = missing_on_base(base) if base is not None and base.status in JUDGED else ""
    # A floor measured without its KL, here or in main's history, says nothing about the
    # engine's noise: reading it as "not noisier" let a run whose floor KL was lost pass
    # where the same run with it failed (issue 36's property found both).
    if floor.kl is None:
        missing = missing or _NO_HEAD_FLOOR
    if any(_lost(point) for point in points) or _recorded_by_some(points):
        missing = missing or _NO_HISTORY_NUMBERS
    return replace(found, noisier=noisier, cannot_tell=missing, gated=gated)


def _lost(point: Point) -> bool:
    """A judged run of main's history that measured a floor but kept only half of it: its
    floor's KL or its cache KL. Read as absent, it made main look less noisy or shown
    deterministic on fewer runs, each of which let a head through (issue 36's property)."""
    judged = point.status in JUDGED
    return judged and (point.floor_lost or (point.floor is not None and point.kl is None))


def _recorded_by_some(points: Sequence[Point]) -> bool:
    """A number some judged run of main recorded at a floor and another run at the same
    floor did not: those runs can be told neither identical nor different."""
    by_floor: dict[float, list[tuple[object, ...]]] = {}
    for point in points:
        if point.floor is not None and point.status in JUDGED:
            by_floor.setdefault(point.floor, []).append(_history_numbers(point))
    return any(
        len({value is None for value in column}) > 1
        for group in by_floor.values()
        for column in zip(*group, strict=True)
    )


_NO_HISTORY_NUMBERS = (
    "cannot tell: a run of main's history measured this test's noise floor but recorded no "
    "KL for it or for the cache path, so neither whether the engine got noisier nor whether "
    "it is deterministic can be told"
)
_NO_HEAD_FLOOR = (
    "cannot tell: this run recorded a noise floor without its KL, so whether the engine "
    "got noisier cannot be compared"
)


def missing_on_base(base: TestResult) -> str:
    """A judged base test without its cache KL or floor: nothing to compare the head's
    with, which is "cannot tell" (issue 36), never "not worse"."""
    floor = base.noise_floor
    absent = [
        name
        for name, value in (("cache KL", base.kl_div), ("noise floor", floor and floor.kl))
        if value is None
    ]
    if not absent:
        return ""
    return (
        f"cannot tell: the base recorded no {' and no '.join(absent)} for this test, so "
        "neither the cache path nor whether the engine got noisier can be compared"
    )


def _base_floors(base: TestResult | None, points: Sequence[Point]) -> list[float]:
    found = [p.floor for p in points if p.floor is not None]
    if base is not None and base.status in JUDGED and base.noise_floor is not None:
        repeats = base.repeats.floors if base.repeats is not None else ()
        found += [kl for kl in (base.noise_floor.kl, *repeats) if kl is not None]
    return found


def _noisier(floor: float, largest: float, measured: Measured) -> str:
    deterministic = measured.determinism is Determinism.DETERMINISTIC
    bound = largest if deterministic else NOISIER_FACTOR * largest
    if not floor > bound:
        return ""
    times = f" ({floor / largest:.3g}x)" if largest > 0 else ""
    allowed = "" if deterministic else f", more than {NOISIER_FACTOR:g}x (determinism not shown)"
    return (
        f"the engine got noisier: no-cache floor {fmt_kl(floor)} here against at most "
        f"{fmt_kl(largest)} on the base side{times}{allowed}"
    )


@dataclass(frozen=True)
class _Numbers:
    """The head's and the base's floor, cache KL and ratio, as shown side by side."""

    floor: float | None
    kl: float | None
    ratio: float | None
    base_floor: float | None
    base_kl: float | None
    base_ratio: float | None

    @classmethod
    def of(cls, head: TestResult, base: TestResult | None) -> _Numbers:
        floor = head.noise_floor
        base_floor = base.noise_floor if base is not None else None
        return cls(
            floor.kl if floor else None,
            head.kl_div,
            floor.ratio if floor else None,
            base_floor.kl if base_floor else None,
            base.kl_div if base is not None else None,
            base_floor.ratio if base_floor else None,
        )

    def diff(
        self, finding: Finding, reason: str, measured: Measured, cache_only_drift: bool = False
    ) -> BaseDiff:
        return BaseDiff(
            finding,
            reason,
            measured.determinism,
            measured.how,
            self.floor,
            self.kl,
            self.ratio,
            self.base_floor,
            self.base_kl,
            self.base_ratio,
            cache_only_drift=cache_only_drift,
        )


def _floor_numbers(floor: NoiseFloor) -> tuple[object, ...]:
    return (floor.kl, floor.tokens, floor.mismatched, floor.max_abs_diff)


def _same_floor(head: tuple[object, ...], base: tuple[object, ...]) -> bool:
    """Bit-identical where both sides recorded the number. A number one side lost is not
    a sign the arithmetic changed: read so, it moved the test to the looser ratio rule
    (issue 36's property); read as the same, the cache numbers must still match."""
    return all(h == b or h is None or b is None for h, b in zip(head, base, strict=True))


def _cache_numbers(test: TestResult) -> tuple[object, ...]:
    exact, hits = test.exact, test.cache_hits
    return (
        test.kl_div,
        test.kl_per_sample,
        test.max_abs_diff,
        (exact.tokens, exact.mismatched) if exact else None,
        (hits.hit, hits.total) if hits else None,
    )


def _ratios(base: float | None, head: float | None) -> str:
    if base is None or head is None:
        return ""
    return f" (ratio to the floor {base:.3g}x on the base, {head:.3g}x here)"
