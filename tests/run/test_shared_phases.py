"""Checks of one suite share cold phases (checks/phases.py) without changing any result:
a run sharing them and a run where every check asks for everything itself give identical
TestResults (durations aside) on the deterministic reference engine, healthy or faulty,
and the sharing run really sends fewer requests."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from fake_engine import FakeEngine
from fake_suites import Silent
from msgspec import structs

from kl_bitexact.run import engines
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.base import Engine
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite import model as suite
from kl_bitexact.suite.load import load_bundled


class Counting:
    """An Engine that counts the requests of each kind it passes on."""

    def __init__(self, inner: Engine, counts: Counter[str]) -> None:
        self.inner, self.counts = inner, counts

    def server_info(self):
        return self.inner.server_info()

    def reported(self):
        return self.inner.reported()

    def flush(self):
        self.counts["flush"] += 1
        self.inner.flush()

    def generate(self, prompts, params):
        self.counts["generate"] += 1
        return self.inner.generate(prompts, params)

    def replay(self, sequences, *, last=None):
        self.counts["replay"] += 1
        return self.inner.replay(sequences, last=last)


def radix_suite(fault: str | None) -> suite.Suite:
    [bundled] = [s for s in load_bundled() if s.name == "reference-radix"]
    tests = {t.name: t for t in bundled.tests}
    other_seed = dataclasses.replace(tests["match"], name="match_seed_1", seed=1)
    # decode first: its turn 1 is the generation `match` needs; prefill then replays what
    # `match` replayed; a different seed shares nothing.
    ordered = (tests["decode_cache_hit"], tests["match"], tests["prefill_cache_hit"], other_seed)
    command = bundled.server.command + (("--fault", fault) if fault else ())
    server = dataclasses.replace(bundled.server, command=command)
    return dataclasses.replace(bundled, server=server, tests=ordered)


def run(item: suite.Suite, log_dir: Path, *, share: bool) -> tuple[dict, Counter[str]]:
    counts: Counter[str] = Counter()

    def connect(*args, **kwargs) -> Engine:
        return Counting(engines.connect(*args, **kwargs), counts)

    plan = Plan((item,), log_dir, connect=connect, share_phases=share)
    final = run_suites(plan, Silent(), lambda partial: None)
    return {t.id: structs.replace(t, duration_s=0.0) for _, t in final.all_tests()}, counts


@pytest.mark.parametrize("fault", [None, "swa-early-release"])
def test_shared_phases_give_the_results_of_separate_checks(fault, tmp_path: Path):
    item = radix_suite(fault)
    shared, shared_counts = run(item, tmp_path / "shared", share=True)
    alone, alone_counts = run(item, tmp_path / "alone", share=False)
    assert shared == alone
    assert len(shared) == 4
    if fault is None:
        assert all(t.status.value == "passed" for t in shared.values())
        # match's generation (decode's turn 1), prefill's replay (match's) and prefill's
        # noise floor (match's generation again) are reused.
        assert alone_counts["generate"] - shared_counts["generate"] == 2, alone_counts
        assert alone_counts["replay"] - shared_counts["replay"] == 1, alone_counts
    else:
        # The fault changes prefill's outputs: its replay differs from match's, not reused.
        assert shared["reference-radix::prefill_cache_hit"].status.value == "failed"
        assert alone_counts["generate"] - shared_counts["generate"] == 2, alone_counts
        assert alone_counts["replay"] == shared_counts["replay"], alone_counts


def test_nothing_is_shared_when_the_sampling_differs():
    counts: Counter[str] = Counter()
    phases = Phases(Counting(FakeEngine(page_size=4), counts))
    base = suite.TestSpec(
        name="m", check=suite.CheckName.MATCH, samples=3, prompt_tokens=(20, 30), max_new_tokens=6
    )
    run_check(
        phases.engine,
        dataclasses.replace(base, check=suite.CheckName.DECODE_CACHE_HIT),
        None,
        phases,
    )
    for change in ({"seed": 1}, {"max_new_tokens": 7}, {"temperature": 0.5}, {"samples": 2}):
        before = counts["generate"]
        run_check(phases.engine, dataclasses.replace(base, **change), None, phases)
        assert counts["generate"] == before + 1, change
    sent = dict(counts)
    run_check(phases.engine, base, None, phases)  # the same sampling: nothing sent
    assert counts == sent and phases.reused == 2
