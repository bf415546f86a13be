"""compare/against_base: a cache test judged by the base's own numbers (issues 41, 36.4).

The numbers are issue 41's H200 table (llama.cpp CUDA, default flags): floor 1.56e-4,
healthy prefill cache KL 1.88e-4 (1.2x), a KV fault of e=1e-3 at 4.86e-4 (3.1x: inside
the noise-floor gate's factor 4, so the floor rule alone passes it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from golden_scenarios import results
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import structs

from kl_bitexact.compare import history_dir
from kl_bitexact.compare.against_base import (
    BaseDiff,
    Determinism,
    Finding,
    determinism,
    same_configuration,
)
from kl_bitexact.compare.comparison import Comparison, TestDelta, compare
from kl_bitexact.compare.gate import FailOn, Policy, Verdict
from kl_bitexact.compare.history import History, Run, build
from kl_bitexact.errors import ExitCode
from kl_bitexact.report import render
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

S = r.Status
FLOOR, HEALTHY, FAULT = 1.56e-4, 1.88e-4, 4.86e-4


def cache_test(
    kl: float = HEALTHY,
    floor: float | None = FLOOR,
    *,
    gated: bool = True,
    repeats: int = 0,
    status: r.Status | None = None,
) -> r.TestResult:
    """A prefill_cache_hit test as `run` records it under `gate: noise-floor` (or not)."""
    noise = None
    if floor is not None:
        noise = r.NoiseFloor(
            kl=floor,
            tokens=159,
            mismatched=153,
            max_abs_diff=0.059,
            ratio=kl / floor if floor else None,
            factor=4.0 if gated else None,
            margin=1e-9 if gated else None,
        )
    test = r.TestResult(
        id="prefill",
        check="prefill_cache_hit",
        status=S.PASSED,
        kl_div=kl,
        kl_threshold=1e-9,
        kl_per_sample=(kl,) * 8,
        exact=r.ExactMatch(tokens=157, mismatched=157),
        cache_hits=r.CacheHits(hit=8, total=8, min_ratio=0.99),
        max_abs_diff=0.06,
        noise_floor=noise,
    )
    if repeats:
        test = structs.replace(
            test,
            repeats=r.Repeats(
                count=repeats,
                positions=157,
                kl=(kl,) * repeats,
                floors=(floor,) * repeats,
                cache_hits=(8,) * repeats,
                statuses=(S.PASSED,) * repeats,
            ),
        )
    if status is None:  # as `run` would judge it
        fails = noise is not None and noise.failure(kl)
        status = S.FAILED if fails or (not gated and kl >= 1e-9) else S.PASSED
    return structs.replace(test, status=status)


def llama(*tests: r.TestResult, args: tuple[str, ...] = ("-np", "1")) -> r.Results:
    run = results(*tests)
    server = r.ServerInfo("openai", ("llama-server", "-m", "model.gguf", *args))
    return structs.replace(run, suites=(structs.replace(run.suites[0], server=server),))


def delta(head: r.Results, base: r.Results | None, **kwargs: Any) -> tuple[Comparison, TestDelta]:
    comparison = compare(head, base, **kwargs)
    return comparison, comparison.deltas[0]


def test_a_fault_inside_the_floor_rule_is_caught_against_a_deterministic_base() -> None:
    head = cache_test(FAULT)
    assert head.status is S.PASSED  # 3.1x the floor: the floor rule alone passes it
    comparison, found = delta(llama(head), llama(cache_test(repeats=2)))
    diff = found.against_base
    assert diff is not None and diff.finding is Finding.CACHE_CHANGED and diff.gates
    assert (diff.base_kl, diff.kl, diff.floor, diff.base_floor) == (HEALTHY, FAULT, FLOOR, FLOOR)
    assert found.verdict is Verdict.REGRESSION and found.gating
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED
    assert "1.88e-04 on the base, 4.86e-04 here" in diff.reason


def test_the_same_numbers_pass_and_say_so() -> None:
    comparison, found = delta(llama(cache_test()), llama(cache_test(repeats=2)))
    diff = found.against_base
    assert diff is not None and diff.finding is Finding.IDENTICAL and not diff.gates
    assert diff.determinism is Determinism.DETERMINISTIC
    assert found.verdict is Verdict.OK and comparison.decision.passed


def test_a_cache_change_gates_under_the_threshold_gate_too() -> None:
    # Red on the base and red here: once "still failing"; the cache path moved, floor not.
    head, base = cache_test(FAULT, gated=False), cache_test(gated=False, repeats=2)
    comparison, found = delta(llama(head), llama(base))
    assert found.verdict is Verdict.REGRESSION and found.gating
    assert not comparison.decision.passed


def test_cache_only_drift_over_a_zero_floor_is_judged_against_the_base() -> None:
    # `-ub 1` with 4 slots: no-cache bit-exact, the cache path drifts 1.25e-6.
    head, base = cache_test(1.25e-6, 0.0), cache_test(1.25e-6, 0.0, repeats=2)
    assert head.status is S.FAILED
    assert "cache-only drift" in (head.noise_floor.failure(head.kl_div) or "")  # type: ignore[union-attr]
    policy = Policy(fail_on=FailOn.FAILURE)
    comparison, found = delta(llama(head), llama(base), policy=policy)
    diff = found.against_base
    assert diff is not None and diff.cache_only_drift and diff.finding is Finding.IDENTICAL
    assert found.verdict is Verdict.OK and not found.gating
    assert comparison.decision.passed
    # The same drift where the base had none is the change's.
    _, moved = delta(llama(head), llama(cache_test(0.0, 0.0, repeats=2)), policy=policy)
    assert moved.against_base is not None and moved.against_base.finding is Finding.CACHE_CHANGED
    assert moved.gating


def test_unmeasured_determinism_uses_the_floor_rule_alone_and_says_so() -> None:
    comparison, found = delta(llama(cache_test(FAULT)), llama(cache_test()))
    diff = found.against_base
    assert diff is not None and diff.finding is Finding.FLOOR_RULE_ONLY
    assert diff.determinism is Determinism.UNMEASURED and "--repeat 2" in diff.determinism_how
    assert found.verdict is Verdict.OK  # the floor rule's pass, stated as such
    assert "not judged against the base" in render.comment(comparison)


def test_repeats_that_differ_are_not_deterministic() -> None:
    base = cache_test(repeats=2)
    assert base.repeats is not None
    base = structs.replace(base, repeats=structs.replace(base.repeats, changed=3))
    measured = determinism(base, [])
    assert measured.determinism is Determinism.NOT_DETERMINISTIC
    _, found = delta(llama(cache_test(FAULT)), llama(base))
    assert found.against_base is not None
    assert found.against_base.finding is Finding.FLOOR_RULE_ONLY and not found.gating


def test_another_configuration_is_not_a_reference() -> None:
    head = llama(cache_test(FAULT), args=("-np", "1", "-ctk", "q8_0"))
    _, found = delta(head, llama(cache_test(repeats=2)))
    assert found.against_base is not None
    assert found.against_base.finding is Finding.FLOOR_RULE_ONLY
    assert "another engine configuration" in found.against_base.reason
    # A server at a URL is known by no flags: its URL is not its configuration.
    a = r.ServerInfo("openai", ("--base-url", "http://127.0.0.1:1"))
    b = r.ServerInfo("openai", ("--base-url", "http://127.0.0.1:2"))
    assert same_configuration(a, b) and not same_configuration(a, None)


def test_a_noisier_engine_gates_under_noise_floor() -> None:
    # Issue 36.4: base noise 1e-3; head 4x the noise with a cache fault, inside 4x its floor.
    base, head = cache_test(1.2e-3, 1e-3), cache_test(1.5e-2, 4e-3)
    assert head.status is S.PASSED
    comparison, found = delta(llama(head), llama(base))
    diff = found.against_base
    assert diff is not None and "the engine got noisier" in diff.noisier
    assert found.verdict is Verdict.REGRESSION and found.gating
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED
    # Not deterministic (unmeasured): a floor within NOISIER_FACTOR x is not "noisier".
    _, near = delta(llama(cache_test(1.2e-3, 1.9e-3)), llama(base))
    assert near.against_base is not None and not near.against_base.noisier
    # Deterministic: any growth of the floor is.
    _, grown = delta(llama(cache_test(1.2e-3, 1.1e-3)), llama(cache_test(1.2e-3, 1e-3, repeats=2)))
    assert grown.against_base is not None and grown.against_base.noisier and grown.gating


def test_a_base_without_its_numbers_cannot_tell_and_gates() -> None:
    base = structs.replace(cache_test(), noise_floor=None)
    for gated in (True, False):
        _, found = delta(llama(cache_test(gated=gated)), llama(base))
        diff = found.against_base
        assert diff is not None and "no noise floor" in diff.cannot_tell and diff.gates
        assert found.verdict is Verdict.INFRA and found.gating
    _, no_kl = delta(llama(cache_test()), llama(structs.replace(base, kl_div=None)))
    assert no_kl.against_base is not None and "no cache KL" in no_kl.against_base.cannot_tell


def test_no_base_and_no_history_is_said_never_silent() -> None:
    comparison, found = delta(llama(cache_test()), None)
    diff = found.against_base
    assert diff is not None and diff.finding is Finding.FLOOR_RULE_ONLY
    assert diff.reason == "no base result for this test" and not diff.gates
    shown = render.as_json(comparison)["tests"][0]["against_base"]
    assert shown["finding"] == "floor_rule_only" and shown["reason"] == diff.reason


def history_of(*tests: r.TestResult) -> History:
    runs = [
        (Run(commit=f"c{i}", created_at=f"2026-12-0{i + 1}", run_id=i), llama(test))
        for i, test in enumerate(tests)
    ]
    return build("main", runs)


def test_main_history_shows_determinism_and_the_ratio_span() -> None:
    steady = history_of(cache_test(), cache_test())
    _, found = delta(llama(cache_test(FAULT)), llama(cache_test()), history=steady)
    diff = found.against_base
    assert diff is not None and diff.determinism is Determinism.DETERMINISTIC
    assert diff.finding is Finding.CACHE_CHANGED and found.gating
    # The arithmetic changed (floor moved): the ratio's change is judged by main's span.
    # Main's ratios 2x and 3x: a span of 1.5x; the base (2x) repeated bit for bit.
    spread = history_of(cache_test(2e-4, 1e-4), cache_test(4.5e-4, 1.5e-4))
    base = llama(cache_test(2e-4, 1e-4, repeats=2))
    _, within = delta(llama(cache_test(2.6e-4, 1.2e-4)), base, history=spread)
    assert within.against_base is not None
    assert within.against_base.finding is Finding.ARITHMETIC_CHANGED, within.against_base.reason
    assert "altered the arithmetic" in within.against_base.reason and not within.gating
    _, beyond = delta(llama(cache_test(3e-4, 0.9e-4)), base, history=spread)
    assert beyond.against_base is not None
    assert beyond.against_base.finding is Finding.RATIO_GREW and beyond.gating


def test_the_arithmetic_changed_without_history_is_said() -> None:
    # `-ctk q8_0` vs default: floor 8.7x, the cache path not judged beyond the floor rule.
    head, base = cache_test(1.59e-3, 1.36e-3), cache_test(repeats=2)
    _, found = delta(llama(head), llama(base))
    diff = found.against_base
    assert diff is not None and diff.finding is Finding.FLOOR_RULE_ONLY
    assert "altered the arithmetic" in diff.reason and "floor rule alone" in diff.reason
    assert "the engine got noisier" in diff.noisier and found.gating


def test_the_comment_shows_both_sides() -> None:
    comparison, _ = delta(llama(cache_test(FAULT)), llama(cache_test(repeats=2)))
    text = render.comment(comparison)
    assert "the cache path changed" in text and "| base | 1.56e-04 | 1.88e-04 | 1.21x |" in text
    assert "deterministic (the base's 2 repeats were bit-identical)" in text
    json.dumps(render.as_json(comparison))


# --- unknown is never safe (issue 36): a missing base number never turns red into green --

numbers = st.one_of(st.none(), st.sampled_from([0.0, 1e-6, FLOOR, HEALTHY, FAULT, 4e-3]))


@settings(max_examples=300, deadline=None)
@given(
    head_kl=numbers,
    head_floor=numbers,
    base_kl=numbers,
    base_floor=numbers,
    repeats=st.sampled_from([0, 2]),
    gated=st.booleans(),
    erase=st.sampled_from(["kl", "floor"]),
)
def test_a_missing_base_number_never_turns_a_failing_decision_into_a_pass(
    head_kl: float | None,
    head_floor: float | None,
    base_kl: float | None,
    base_floor: float | None,
    repeats: int,
    gated: bool,
    erase: str,
) -> None:
    if head_kl is None or head_floor is None:
        return  # not a cache test judged by this rule (gate._grew's nulls: its own tests)
    head = llama(cache_test(head_kl, head_floor, gated=gated))
    base_test = cache_test(base_kl or 0.0, base_floor, gated=gated, repeats=repeats)
    base_test = structs.replace(base_test, kl_div=base_kl)
    before = compare(head, llama(base_test)).decision
    erased = {
        "kl": structs.replace(base_test, kl_div=None),
        "floor": structs.replace(base_test, noise_floor=None),
    }[erase]
    after = compare(head, llama(erased)).decision
    if not before.passed:
        assert not after.passed


def test_a_deterministic_base_makes_any_cache_difference_gate() -> None:
    for kl in (HEALTHY * (1 + 1e-15), HEALTHY * 0.5, 0.0):
        _, found = delta(llama(cache_test(kl)), llama(cache_test(repeats=2)))
        assert isinstance(found.against_base, BaseDiff) and found.gating, kl
    # The last bits differ: shown with every digit, never as two equal-looking numbers.
    _, last_bit = delta(llama(cache_test(HEALTHY * (1 + 1e-15))), llama(cache_test(repeats=2)))
    assert last_bit.against_base is not None
    assert (
        f"{HEALTHY!r} on the base, {HEALTHY * (1 + 1e-15)!r} here" in last_bit.against_base.reason
    )


def test_a_history_directory_carries_the_floors(tmp_path: Path) -> None:
    """Main's runs as files (`--history-dir`, the fetched cache): their floors are read, so
    two runs with the same floor and cache numbers show determinism without --repeat."""
    for number in (1, 2):
        run = structs.replace(
            llama(cache_test()),
            run=r.RunInfo(ref="refs/heads/main", started_at=f"2026-12-0{number}"),
        )
        results_io.write_atomic(run, tmp_path / f"run-{number}.json")
    history = history_dir.load(tmp_path, 20)
    found = history.of("prefill")
    assert found is not None and [p.floor for p in found.points if p] == [FLOOR, FLOOR]
    comparison, fault = delta(llama(cache_test(FAULT)), llama(cache_test()), history=history)
    assert fault.against_base is not None
    assert fault.against_base.determinism is Determinism.DETERMINISTIC
    assert "2 runs of main's history" in fault.against_base.determinism_how
    assert fault.against_base.finding is Finding.CACHE_CHANGED and not comparison.decision.passed
