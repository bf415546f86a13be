"""The noise-floor gate against real engine processes (issue 31).

The reference engine's plain mode is an engine that is not batch-invariant: float32 BLAS
whose last bits move with the shape of the matrices, so a decode step never quite equals
the prefill that replays it, cache or not. On it:
- a healthy cache drifts no more than its floor: `gate: noise-floor` passes, `exact` fails;
- a cache fault on top (`hicache-lossy`: hits reloaded from the host tier in float16)
  fails both gates.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fake_suites import Silent

from kl_bitexact.results.model import Status, TestResult
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite import load as suite
from kl_bitexact.suite.model import Gate


def hicache_tests(tmp_path: Path, fault: str | None) -> dict[str, TestResult]:
    [bundled] = [s for s in suite.load_bundled() if s.name == "reference-hicache"]
    plain = tuple(a for a in bundled.server.command if a != "--enable-deterministic-inference")
    command = plain + (("--fault", fault) if fault else ())
    [prefill] = [t for t in bundled.tests if t.name == "prefill_cache_hit"]
    # Plain arithmetic on purpose: the fact the bundled suite states for exactness goes too.
    facts = tuple(e for e in prefill.expect if e.name != "enable_deterministic_inference")
    prefill = dataclasses.replace(prefill, expect=facts)
    tests = (
        dataclasses.replace(prefill, name="noise-floor", gate=Gate.NOISE_FLOOR),
        dataclasses.replace(prefill, name="bit-exact", exact=True),
    )
    item = dataclasses.replace(
        bundled, server=dataclasses.replace(bundled.server, command=command), tests=tests
    )
    final = run_suites(Plan((item,), tmp_path / "logs"), Silent(), lambda partial: None)
    return {test.id.split("::")[1]: test for _, test in final.all_tests()}


@pytest.mark.parametrize("fault", [None, "hicache-lossy"])
def test_the_noise_floor_gate_passes_drift_and_fails_a_cache_fault(fault, tmp_path: Path):
    tests = hicache_tests(tmp_path, fault)
    floor_gate, bit_exact = tests["noise-floor"], tests["bit-exact"]
    for test in tests.values():
        assert test.cache_hits is not None and test.cache_hits.hit == test.cache_hits.total
        floor = test.noise_floor
        # The engine drifts with no cache involved: that is its floor.
        assert floor is not None and floor.kl is not None and floor.kl > 0 and floor.mismatched
    assert bit_exact.status is Status.FAILED and "exact:" in bit_exact.message
    floor = floor_gate.noise_floor
    assert floor is not None and floor.gates
    if fault is None:
        assert floor_gate.status is Status.PASSED, floor_gate.message
        assert floor_gate.kl_div is not None and floor_gate.kl_div < 1e-9
    else:
        assert floor_gate.status is Status.FAILED, floor_gate.message
        assert "noise floor" in floor_gate.message
        assert floor.ratio is not None and floor.ratio > 1000
