"""`kl-bitexact explore` on a server that is not deterministic: the noise-floor rule.

The reference engine without --enable-deterministic-inference computes in plain float32,
whose last bits follow the batch shape: a decode differs from its replay cache or not, so
explore judges each workload by run's gate: noise-floor rule (explore/floor.py). Real
processes: a healthy such server reports nothing; one with a KV fault is found, shrunk and
handed back as a suite file under gate: noise-floor that fails there and passes on the
healthy one.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from explore_unittest import assert_unittest_fails_only_on
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.commands import explore as command
from kl_bitexact.errors import ExitCode
from kl_bitexact.explore import floor, handback
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.search import Tally
from kl_bitexact.explore.summary import CLEAN_BY_FLOOR
from kl_bitexact.results.model import NoiseFloor
from kl_bitexact.suite.model import TestSpec

# Not deterministic: no --enable-deterministic-inference.
PLAIN = ["--page-size", "16", "--mamba-track-interval", "16"]
FAULT = ["--fault", "one-page-prefix-mixed-batch"]
Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_a_kv_fault_is_found_by_the_noise_floor_shrunk_and_handed_back_under_it(
    cli: Cli,
    reference_server: Callable[..., Any],
    tmp_path: Path,
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    faulty = reference_server(*PLAIN, *FAULT)
    healthy = reference_server(*PLAIN)
    out = tmp_path / "out"
    argv = ["explore", "--base-url", faulty.url, "--budget", "60", "--seed", "1"]
    argv += ["--max-findings", "1"]
    argv += ["--max-findings", "1"]  # one fault: stop at its first finding
    found = cli([*argv, "--out", str(out), "--no-examples-db"], timeout=300)
    assert found.returncode == 1, found.stderr
    assert "noise floor" in found.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["rule"] == {"name": "noise-floor", "factor": 4.0, "margin": 1e-9}
    [finding] = results["findings"]
    divergence = finding["divergence"]
    assert divergence["kind"] == "noise_floor"
    judged = divergence["noise_floor"]
    assert judged["kl"] > judged["factor"] * judged["floor_kl"] + judged["margin"]
    assert "exactly 1 page" in divergence["located"] and "noise floor" in divergence["located"]
    assert finding["requests"] <= 6, finding["workload"]  # shrunk, still over the rule
    assert finding["repeats"] == "3/3" and finding["handback_fails"], finding
    # The sglang-style file holds the cached requests to the same rule, and says so.
    assert "noise-floor rule" in finding["unittest_note"]
    assert "NOISE_FLOOR = (4.0, 1e-09)" in (out / finding["unittest_file"]).read_text()
    suite_path = out / finding["suite_file"]
    [suite] = yaml.safe_load(suite_path.read_text())
    assert suite["server"]["gate"] == "noise-floor"
    assert suite["server"]["expect"]["enable_deterministic_inference"] is False
    on_faulty = cli(
        ["run", str(suite_path), "--base-url", faulty.url, "--out", str(tmp_path / "f")]
    )
    assert on_faulty.returncode == 1, on_faulty.stdout + on_faulty.stderr
    assert "noise floor" in on_faulty.stdout
    on_healthy = cli(
        ["run", str(suite_path), "--base-url", healthy.url, "--out", str(tmp_path / "h")]
    )
    assert on_healthy.returncode == 0, on_healthy.stdout + on_healthy.stderr
    assert_unittest_fails_only_on(out / finding["unittest_file"], faulty.url, healthy.url)


def test_a_reuse_after_an_abandoned_prefill_is_handed_back_under_the_floor_too(
    cli: Cli,
    reference_server: Callable[..., Any],
    tmp_path: Path,
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    """The abandoned_prefix_reuse hand-back measures its own floor: under gate: noise-floor
    it fails on the faulty float32 server and passes on the healthy one, as does the
    sglang-style file."""
    faulty = reference_server(*PLAIN, "--fault", "reuse-after-abandoned-prefill")
    healthy = reference_server(*PLAIN)
    out = tmp_path / "out"
    argv = ["explore", "--base-url", faulty.url, "--budget", "40", "--seed", "1"]
    argv += ["--max-findings", "1", "--out", str(out), "--no-examples-db"]
    assert cli(argv, timeout=200).returncode == 1
    [finding] = json.loads((out / "results.json").read_text())["findings"]
    assert finding["divergence"]["kind"] == "noise_floor" and finding["handback_fails"]
    suite = str(out / finding["suite_file"])
    assert "abandoned_prefix_reuse" in (out / finding["suite_file"]).read_text()
    assert (
        cli(["run", suite, "--base-url", faulty.url, "--out", str(tmp_path / "f")]).returncode == 1
    )
    on_healthy = cli(["run", suite, "--base-url", healthy.url, "--out", str(tmp_path / "h")])
    assert on_healthy.returncode == 0, on_healthy.stdout + on_healthy.stderr
    assert_unittest_fails_only_on(out / finding["unittest_file"], faulty.url, healthy.url)


def test_a_healthy_server_that_is_not_deterministic_reports_nothing(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """The false-finding check: float32 drift alone stays under the rule, and the run
    passes (exit 0). Most random workloads reuse no prefix: the server reports 0 cached
    tokens for each of their requests, so they did not reach the cache path. That is said,
    with how many were judged beside it, but is no cannot-tell: the healthy server's floor
    and cached paths report every logprob, so nothing else is left unjudged."""
    healthy = reference_server(*PLAIN)
    argv = ["explore", "--base-url", healthy.url, "--budget", "20", "--seed", "3"]
    result = cli([*argv, "--out", str(tmp_path), "--no-examples-db"], timeout=120)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["findings"] == [] and results["rule"]["name"] == "noise-floor"
    # Since the search aims at the cache path (b19bd4c) few workloads miss it, and none may.
    assert set(results["not_judged"]) <= {floor.NO_HIT}, results["not_judged"]
    assert result.returncode == 0, result.stderr
    assert "cannot tell" not in result.stderr
    assert results["floor_judged"] > 0 and 0 <= results["floor_nearest"] < 1
    # Workloads with no cached request are counted apart from those judged, never as judged.
    not_reached = results["not_judged"].get(floor.NO_HIT, 0)
    assert not_reached == results["workloads"] - results["floor_judged"]
    said = (tmp_path / "summary.md").read_text()
    assert CLEAN_BY_FLOOR in said and "could not be judged" not in said
    if not not_reached:
        assert "did not reach the cache path" not in said + result.stderr
        return
    line = (
        f"{not_reached} of {results['workloads']} workloads did not reach the cache path: "
        "the server reported 0 cached tokens for each of their requests, so there was no "
        f"cached path to judge ({results['floor_judged']} judged by the noise floor)"
    )
    assert line in said and f"explore: {line}" in result.stderr


def test_the_miscount_judge_keeps_working_when_the_server_is_not_deterministic(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """cached_tokens against the geometry does not depend on determinism."""
    faulty = reference_server(*PLAIN, "--fault", "cached-tokens-off-by-one")
    healthy = reference_server(*PLAIN)
    out = tmp_path / "out"
    argv = ["explore", "--base-url", faulty.url, "--budget", "30", "--seed", "1"]
    argv += ["--max-findings", "1"]
    argv += ["--max-findings", "1"]  # one fault: stop at its first finding
    found = cli([*argv, "--out", str(out), "--no-examples-db"], timeout=200)
    assert found.returncode == 1, found.stderr
    [finding] = json.loads((out / "results.json").read_text())["findings"]
    assert finding["divergence"]["kind"] == "cached_tokens", finding["divergence"]
    assert finding["handback_fails"], finding["handback"]
    suite = str(out / finding["suite_file"])
    on_healthy = cli(["run", suite, "--base-url", healthy.url, "--out", str(tmp_path / "h")])
    assert on_healthy.returncode == 0, on_healthy.stdout + on_healthy.stderr


_logprob = st.one_of(st.none(), st.floats(-30.0, 0.0), st.just(-math.inf))
_pair = st.integers(0, 4).flatmap(
    lambda n: st.tuples(
        st.lists(_logprob, min_size=n, max_size=n), st.lists(_logprob, min_size=n, max_size=n)
    )
)


@given(st.lists(_pair, max_size=4), st.lists(_pair, max_size=4))
def test_the_rule_passes_only_what_it_judged_and_judges_as_run_does(
    cached: list[tuple[list[float | None], list[float | None]]],
    cold: list[tuple[list[float | None], list[float | None]]],
) -> None:
    """Cannot tell is never a pass: with no request, no compared logprob on either side or
    a floor with no bound, the workload is not judged (and not failed); otherwise the
    verdict is NoiseFloor.failure's, with run's defaults."""
    verdict = floor.judge(cached, cold)
    if verdict.cannot_tell is not None:
        assert verdict.failure is None
        assert floor.share_of_bound(verdict) is None
        return
    assert cached and verdict.kl is not None and verdict.floor.kl is not None
    assert math.isfinite(verdict.floor.kl) and verdict.floor.gates
    rule = NoiseFloor(
        kl=verdict.floor.kl, factor=TestSpec.floor_factor, margin=TestSpec.floor_margin
    )
    assert verdict.failure == rule.failure(verdict.kl)
    bound = TestSpec.floor_factor * verdict.floor.kl + TestSpec.floor_margin
    assert (verdict.failure is None) == (verdict.kl <= bound)


def test_what_the_rule_cannot_judge_is_said() -> None:
    reported = ([-1.0, -2.0], [-1.0, -2.5])
    assert floor.judge([], [reported]).cannot_tell == floor.NO_HIT
    assert floor.judge([reported], [([None], [-1.0])]).cannot_tell == floor.FLOOR_EMPTY
    assert floor.judge([([None], [None])], [reported]).cannot_tell == floor.CACHED_EMPTY
    infinite = ([-1.0], [-math.inf])
    assert floor.judge([reported], [infinite]).cannot_tell == floor.FLOOR_INFINITE
    assert floor.judge([reported], [reported]).failure is None  # the drift of its floor
    assert floor.judge([reported], [([-1.0], [-1.0])]).failure is not None  # floor 0


def _geometry(*, deterministic: bool) -> Geometry:
    return Geometry(16, 16, 64, None, 256, deterministic)


def test_nothing_found_passes_only_when_all_that_reached_the_cache_was_judged() -> None:
    plain, exact = _geometry(deterministic=False), _geometry(deterministic=True)
    # Workloads that did not reach the cache path (NO_HIT) are no cannot-tell by themselves...
    some = Tally(examples=7, floor_judged=1, not_judged={floor.NO_HIT: 6})
    assert _exit(plain, some) == ExitCode.GATE_PASSED
    # ... but a run of which none was judged showed nothing.
    none_judged = Tally(examples=7, not_judged={floor.NO_HIT: 7})
    assert _exit(plain, none_judged) == ExitCode.COULD_NOT_RUN
    assert _exit(plain, Tally(examples=0)) == ExitCode.COULD_NOT_RUN
    # Every other reason is a number missing: cannot tell, however many were judged.
    for reason in (floor.FLOOR_EMPTY, floor.FLOOR_INFINITE, floor.CACHED_EMPTY):
        other = Tally(examples=7, floor_judged=5, not_judged={floor.NO_HIT: 1, reason: 1})
        assert _exit(plain, other) == ExitCode.COULD_NOT_RUN, reason
    # No reason counted, none judged: still not a pass (an unknown is never safe).
    assert _exit(plain, Tally(examples=7)) == ExitCode.COULD_NOT_RUN
    assert _exit(plain, Tally(examples=7, floor_judged=7)) == ExitCode.GATE_PASSED
    assert _exit(exact, Tally(examples=7)) == ExitCode.GATE_PASSED
    assert _exit(exact, Tally()) == ExitCode.COULD_NOT_RUN  # no workload ran


def _exit(geometry: Geometry, tally: Tally) -> int:
    report = command.Report(Path("unwritten"), 0, 60.0, geometry=geometry, tally=tally)
    return report.verdict().exit_code


def test_the_handed_back_file_carries_the_gate_the_server_needs() -> None:
    def server_block(deterministic: bool) -> dict[str, Any]:
        text = handback.suite_text(
            name="s",
            server={"engine": "sglang", "base_url": "http://127.0.0.1:1"},
            prompts_file="p.json",
            prompts=[[1, 2]],
            max_new_tokens=1,
            geometry=_geometry(deterministic=deterministic),
            located="here",
        )
        [suite] = yaml.safe_load(text)
        block: dict[str, Any] = suite["server"]
        return block

    assert server_block(False)["gate"] == "noise-floor"
    assert "gate" not in server_block(True)
