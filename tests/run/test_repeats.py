"""The flake meter's fold (pure): repeats compared with each other, bit for bit."""

from __future__ import annotations

from msgspec import structs

from kl_bitexact.results.model import CacheHits, ExactMatch, Status, TestResult
from kl_bitexact.run.checks.metrics import Sample
from kl_bitexact.run.checks.repeats import Attempt, fold


def sample(index: int, decode: tuple[float, ...], replay=None, ids=None) -> Sample:
    return Sample(
        index=index,
        prompt_len=10,
        cached_tokens=0,
        decode=decode,
        replay=decode if replay is None else replay,
        output_ids=tuple(range(len(decode))) if ids is None else ids,
    )


def result(status=Status.PASSED, kl=0.0, hits=None, mismatched=0, duration=1.0) -> TestResult:
    return TestResult(
        id="s::t",
        check="match",
        status=status,
        kl_div=kl,
        kl_threshold=1e-9,
        exact=ExactMatch(6, mismatched),
        cache_hits=None if hits is None else CacheHits(hits, 2, 0.5),
        duration_s=duration,
        message="avg KL 0",
    )


STABLE = (sample(0, (-1.0, -2.0, -3.0)), sample(1, (-0.5, -0.25, -0.125)))


def test_one_attempt_is_returned_unchanged():
    only = result()
    assert fold([Attempt(only, STABLE)]) is only


def test_identical_repeats_keep_the_status_and_say_so():
    folded = fold([Attempt(result(), STABLE) for _ in range(5)])
    assert folded.status is Status.PASSED
    evidence = folded.repeats
    assert evidence is not None and evidence.agree
    assert (evidence.count, evidence.positions, evidence.changed) == (5, 6, 0)
    assert evidence.kl == (0.0,) * 5 and evidence.statuses == (Status.PASSED,) * 5
    assert folded.duration_s == 5.0
    assert "5 repeats on one launch bit-identical (6 positions)" in folded.message


def test_repeat_stable_but_replay_unstable_is_said_plainly():
    drifting = (sample(0, (-1.0, -2.0, -3.0), replay=(-1.0, -2.0000001, -3.0)),)
    folded = fold([Attempt(result(kl=1e-15, mismatched=1), drifting) for _ in range(3)])
    assert folded.status is Status.PASSED
    assert "repeat-stable while replay-unstable (1/6 logprobs differ" in folded.message


def test_one_ulp_in_one_repeat_makes_the_test_flaky_with_the_position():
    moved = (sample(0, (-1.0, -2.0000000000000004, -3.0)), STABLE[1])
    attempts = [
        Attempt(result(), STABLE),
        Attempt(result(kl=3e-33, mismatched=1), moved),
        Attempt(result(), STABLE),
    ]
    folded = fold(attempts)
    assert folded.status is Status.FLAKY
    evidence = folded.repeats
    assert evidence is not None and not evidence.agree
    assert (evidence.positions, evidence.changed) == (6, 1)
    assert evidence.first_change == (
        "repeat 2 vs 1: sample 0, token 1: decode logprob -2.0 vs -2.0000000000000004"
    )
    # The worst repeat's numbers are reported, never the best one's.
    assert folded.kl_div == 3e-33 and folded.exact == ExactMatch(6, 1)
    assert folded.message.startswith("flaky: 3 repeats on one launch disagree; 1 changed")
    assert "KL 0 .. 3.00e-33" in folded.message


def test_a_position_moved_in_several_repeats_counts_once():
    moved = (sample(0, (-1.0, -2.5, -3.0)), STABLE[1])
    folded = fold([Attempt(result(), STABLE), Attempt(result(), moved), Attempt(result(), moved)])
    assert folded.repeats is not None and folded.repeats.changed == 1


def test_a_different_token_is_named_first():
    other = (sample(0, (-1.0, -2.0, -3.0), ids=(0, 7, 2)), STABLE[1])
    folded = fold([Attempt(result(), STABLE), Attempt(result(), other)])
    assert folded.repeats is not None
    assert folded.repeats.first_change.endswith("sample 0, token 1: decoded token 1 vs 7")


def test_cache_hits_that_differ_are_flaky_even_with_equal_logprobs():
    fewer = (STABLE[0],)  # sample 1 missed the cache in repeat 2
    folded = fold([Attempt(result(hits=2), STABLE), Attempt(result(hits=1), fewer)])
    assert folded.status is Status.FLAKY
    assert folded.repeats is not None and folded.repeats.cache_hits == (2, 1)
    assert folded.repeats.first_change == "cache hits differ: 2, 1"
    assert folded.cache_hits == CacheHits(1, 2, 0.5)  # the worst repeat


def test_verdicts_that_differ_are_flaky_and_listed():
    failed = structs.replace(result(kl=2e-9), status=Status.FAILED)
    folded = fold([Attempt(result(), STABLE), Attempt(failed, STABLE)])
    assert folded.status is Status.FLAKY
    assert folded.repeats is not None
    assert folded.repeats.statuses == (Status.PASSED, Status.FAILED)
    assert "verdicts passed, failed" in folded.message


def test_an_errored_repeat_is_the_result():
    errored = structs.replace(result(), status=Status.ERROR, message="server died")
    folded = fold([Attempt(result(), STABLE), Attempt(errored)])
    assert folded.status is Status.ERROR and folded.message == "server died"
    assert folded.repeats is not None and folded.repeats.count == 2


def test_launches_are_counted():
    attempts = [Attempt(result(), STABLE, launch=n) for n in (1, 2, 3)]
    folded = fold(attempts)
    assert folded.repeats is not None and folded.repeats.launches == 3
    assert "3 repeats on 3 launches bit-identical" in folded.message
