"""`kl-bitexact explore` against real reference servers (real processes), and its pure parts."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import process_groups
import pytest
from explore_unittest import assert_unittest_fails_only_on, run_unittest
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.commands.explore import parse_budget, parse_max_findings
from kl_bitexact.explore import hits
from kl_bitexact.explore.execute import Served
from kl_bitexact.explore.geometry import Geometry, GeometryError, read_geometry
from kl_bitexact.explore.hits import miscounts, most_reusable
from kl_bitexact.explore.strategy import workloads
from kl_bitexact.explore.workload import Batch, Flush, Prompt, Workload, smaller
from kl_bitexact.run.engines.base import Generation

GEOMETRY = ["--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16"]
FAULT = ["--fault", "one-page-prefix-mixed-batch"]
Cli = Callable[..., subprocess.CompletedProcess[str]]
# One fault: stop at its first finding (handed back) rather than search on for the rest of
# the budget, which a test of one fault would wait out for nothing.
FIRST_ONLY = ["explore", "--max-findings", "1"]


def test_explore_finds_the_fault_shrinks_it_and_hands_back_a_suite_that_fails_only_there(
    cli: Cli,
    reference_server: Callable[..., Any],
    tmp_path: Path,
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    faulty = reference_server(*GEOMETRY, *FAULT)
    healthy = reference_server(*GEOMETRY)
    out = tmp_path / "out"
    found = cli(
        [*FIRST_ONLY, "--base-url", faulty.url, "--budget", "90", "--seed", "1", "--out", str(out)],
        timeout=300,
    )
    assert found.returncode == 1, found.stderr
    assert "explore: found a divergence" in found.stderr  # progress while it runs
    results = json.loads((out / "results.json").read_text())
    [finding] = results["findings"]
    assert finding["requests"] <= 6, finding["workload"]  # shrunk to a handful
    assert finding["deterministic"] and finding["handback_fails"]
    assert "exactly 1 page" in finding["divergence"]["located"]
    assert "1 page" in (out / "summary.md").read_text()
    suite = str(out / finding["suite_file"])
    assert (
        cli(["run", suite, "--base-url", faulty.url, "--out", str(tmp_path / "f")]).returncode == 1
    )
    assert (
        cli(["run", suite, "--base-url", healthy.url, "--out", str(tmp_path / "h")]).returncode == 0
    )
    assert_unittest_fails_only_on(out / finding["unittest_file"], faulty.url, healthy.url)


def test_a_healthy_server_reports_nothing(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    healthy = reference_server(*GEOMETRY)
    out = tmp_path / "out"
    result = cli(["explore", "--base-url", healthy.url, "--budget", "6", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["findings"] == [] and results["workloads"] > 0


def test_explore_needs_exactly_one_server(cli: Cli, tmp_path: Path) -> None:
    result = cli(["explore", "--budget", "5", "--out", str(tmp_path)])
    assert result.returncode == 2 and "--base-url" in result.stderr


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("5m", 300.0), ("1.5s", 1.5)])
def test_budgets(text: str, seconds: float) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "5x", "-3", "m"])
def test_bad_budgets_are_refused(text: str) -> None:
    with pytest.raises(Exception, match="budget"):
        parse_budget(text)


@pytest.mark.parametrize("text", ["", "0", "21", "-1", "two", "1.5"])
def test_a_cap_on_findings_outside_1_to_20_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="number of findings: give 1 to 20"):
        parse_max_findings(text)
    assert parse_max_findings("1") == 1 and parse_max_findings("20") == 20


@given(st.integers(1, 256), st.integers(1, 256), st.integers(1, 4000))
def test_lengths_sit_on_and_beside_every_boundary(page: int, track: int, longest: int) -> None:
    geometry = Geometry(page, track, None, None, 256, True)
    lengths = geometry.lengths(longest)
    assert list(lengths) == sorted(set(lengths)) and all(1 <= n <= longest for n in lengths)
    for size in (page, track):
        for near in (size - 1, size, size + 1):
            assert near in lengths or not 1 <= near <= longest


def test_geometry_without_a_page_size_says_so() -> None:
    with pytest.raises(GeometryError, match="page_size"):
        read_geometry({"mamba_track_interval": 16}, "GET /server_info")
    with pytest.raises(GeometryError, match="page_size=0"):
        read_geometry({"page_size": 0}, "GET /server_info")
    assert read_geometry({"page_size": 4}, "x").describe(8) == "exactly 2 pages"


def test_a_stop_signal_keeps_what_was_found(
    reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    faulty = reference_server(*GEOMETRY, *FAULT)
    out = tmp_path / "out"
    args = ["explore", "--base-url", faulty.url, "--budget", "300", "--seed", "1"]
    with process_groups.run_cli([*args, "--out", str(out)], stderr=subprocess.PIPE) as child:
        assert child.stderr is not None
        for line in iter(child.stderr.readline, b""):
            if b"found a divergence" in line:
                break
        # Written before it was said: a SIGKILL now would leave it on disk too.
        written = json.loads((out / "results.json").read_text())
        assert written["findings"][0]["divergence"]["cached_tokens"] == 16
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
    assert child.returncode == 143
    results = json.loads((out / "results.json").read_text())
    assert "SIGTERM" in results["stopped"]
    [finding] = results["findings"]
    assert finding["requests"] >= 1 and finding["divergence"]["cached_tokens"] == 16
    assert "stopped early: SIGTERM" in (out / "summary.md").read_text()


@given(workloads(Geometry(16, 16, 64, 32, 256, True), 49))
def test_each_smaller_workload_leaves_out_exactly_one_step_or_prompt(workload: Workload) -> None:
    for candidate in smaller(workload):
        steps_gone = len(workload.steps) - len(candidate.steps)
        prompts_gone = workload.requests - candidate.requests
        assert (steps_gone, prompts_gone) in {(0, 1), (1, 0)} or (
            steps_gone == 1 and prompts_gone >= 1
        )
        assert candidate.steps


def test_leaving_a_prompt_out_keeps_continuations_on_the_prompts_they_named() -> None:
    a, b = Prompt(0, 17, 0), Prompt(1, 3, 0)
    c, d = Prompt(0, 0, 2, continues=0), Prompt(0, 0, 0, continues=2)
    workload = Workload((Batch((a,), 1), Batch((b, c), 1), Flush(), Batch((d,), 1)))
    without_b = Workload(
        (Batch((a,), 1), Batch((c,), 1), Flush(), Batch((replace(d, continues=1),), 1))
    )
    assert without_b in list(smaller(workload))
    assert Workload((Batch((a,), 1), Batch((b, c), 1), Batch((d,), 1))) in list(smaller(workload))


MISCOUNT = ["--fault", "cached-tokens-off-by-one"]


def test_explore_judges_cached_tokens_and_finds_a_miscount_no_token_shows(
    cli: Cli,
    reference_server: Callable[..., Any],
    tmp_path: Path,
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    """cached-tokens-off-by-one changes no token: only judging the count against the
    geometry finds it; the handed-back multiturn file fails there and passes on a healthy
    server."""
    faulty = reference_server(*GEOMETRY, *MISCOUNT)
    healthy = reference_server(*GEOMETRY)
    out = tmp_path / "out"
    found = cli(
        [*FIRST_ONLY, "--base-url", faulty.url, "--budget", "45", "--seed", "1", "--out", str(out)],
        timeout=300,
    )
    assert found.returncode == 1, found.stderr
    [finding] = json.loads((out / "results.json").read_text())["findings"]
    seen = finding["divergence"]
    assert seen["kind"] == "cached_tokens" and finding["requests"] <= 6, finding["workload"]
    expected, observed = seen["expected_cached_tokens"], seen["cached_tokens"]
    assert expected % 64 == 0 and observed == expected - 1  # on a chunk boundary, one short
    assert f"at most {expected}" in seen["located"] and f"got {observed}" in seen["located"]
    assert finding["deterministic"] and finding["handback_fails"]
    suite = str(out / finding["suite_file"])
    assert (
        cli(["run", suite, "--base-url", faulty.url, "--out", str(tmp_path / "f")]).returncode == 1
    )
    assert (
        cli(["run", suite, "--base-url", healthy.url, "--out", str(tmp_path / "h")]).returncode == 0
    )
    test_file = out / finding["unittest_file"]
    assert_unittest_fails_only_on(test_file, faulty.url, healthy.url)
    # sglang's own assertion, in the words of sglang PR 24910's CI log
    said = run_unittest(test_file, faulty.url).stdout
    assert f"expected cached_tokens={expected}, got {observed}" in said


def _served(prompt: tuple[int, ...], cached: int | None) -> Served:
    answer = Generation((7,), (-1.0,), cached_tokens=cached, prompt_tokens=len(prompt))
    return Served(step=1, slot=0, prompt=prompt, generation=answer, batch_cached=(cached,))


@given(
    st.integers(1, 32),
    st.lists(st.integers(1, 3), min_size=1, max_size=120),
    st.integers(0, 120),
)
def test_a_count_is_judged_against_the_shared_prefix_in_whole_pages(
    page: int, prompt: list[int], cut: int
) -> None:
    geometry = Geometry(page, None, None, None, 256, True)
    before = [(*prompt[:cut], 0)]  # shares exactly min(cut, len) tokens
    allowed = most_reusable(geometry, len(prompt), min(cut, len(prompt)))
    assert allowed % page == 0 and allowed < len(prompt)
    for cached in range(0, len(prompt) + 2):
        found = miscounts(geometry, [_served(tuple(prompt), cached)], before)
        assert bool(found) == (cached > allowed or cached % page != 0)
        for miscount in found:
            assert miscount.as_dict(geometry)["expected_cached_tokens"] == allowed
    assert miscounts(geometry, [_served(tuple(prompt), None)], before) == []  # not reported


def test_failures_found_are_replayed_first_by_the_next_run(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Hypothesis's example database across runs: the second run, another seed, starts
    from the failure the first one saved (its reuse phase) and finds it at once."""
    faulty = reference_server(*GEOMETRY, *MISCOUNT)
    database = tmp_path / "examples"
    runs = []
    for seed in ("4", "5"):
        out = tmp_path / seed
        argv = ["explore", "--base-url", faulty.url, "--budget", "10", "--seed", seed]
        argv += ["--max-findings", "1"]
        done = cli([*argv, "--out", str(out), "--examples-db", str(database)], timeout=120)
        assert done.returncode == 1, done.stderr
        runs.append(json.loads((out / "results.json").read_text()))
    first, second = runs
    assert first["examples_db"] == {"path": str(database), "replayed_first": 0}
    assert second["examples_db"]["replayed_first"] >= 1
    assert second["first_found_workloads"] == 1  # the saved one, before anything new
    assert first["first_found_workloads"] >= 1


def test_no_examples_db_keeps_none(
    cli: Cli, reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    healthy = reference_server(*GEOMETRY)
    argv = ["explore", "--base-url", healthy.url, "--budget", "2", "--out", str(tmp_path)]
    assert cli([*argv, "--no-examples-db"]).returncode == 0
    assert json.loads((tmp_path / "results.json").read_text())["examples_db"] is None
    assert not (tmp_path / "examples").exists()


def test_requests_that_report_no_cached_tokens_are_counted_as_unjudged():
    """A server that leaves cached_tokens out gives `miscounts` nothing to judge: explore
    counts those requests (results.json hits_unreported, a summary line) so that "nothing
    found" does not read as "every hit was right"."""
    batch = [_served((1, 2, 3), None), _served((1, 2, 4), 0), _served((5,), None)]
    assert hits.unreported(batch) == 2
    assert hits.unreported([_served((1,), 16)]) == 0
