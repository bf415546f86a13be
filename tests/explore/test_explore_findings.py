"""More than one finding per explore run, each a different bug; and the summary's "cannot
tell" lines: real processes for what a run reports, pure tests for how it is told apart and
said."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import process_groups
from explore_unittest import assert_unittest_fails_only_on
from fake_suites import suite_yaml
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

from kl_bitexact.commands.explore import Report
from kl_bitexact.errors import ExitCode
from kl_bitexact.explore import floor, kinds, summary, verdict
from kl_bitexact.explore.examples import Keeping
from kl_bitexact.explore.execute import Divergence, Served
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.hits import Miscount
from kl_bitexact.explore.search import Tally
from kl_bitexact.explore.workload import APART
from kl_bitexact.run.engines.base import Generation

GEOMETRY = ["--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16"]
MISCOUNT = ["--fault", "cached-tokens-off-by-one"]
ONE_PAGE = ["--fault", "one-page-prefix-mixed-batch"]
Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_one_run_reports_two_different_bugs_each_handed_back_failing_on_its_own_fault(
    cli: Cli,
    reference_server: Callable[..., Any],
    tmp_path: Path,
    sglang_oracle: Callable[[str], ModuleType],
) -> None:
    """Two hidden faults at once: a miscount no token shows (found in ~1 s) and a one-page
    hit beside a cold prompt (found in ~10-20 s: the benchmark's median is 12.4 s). The run
    stops at --max-findings 2, so the 120 s budget is a ceiling, not what it costs (seed 1
    took 28 s at load 2). Each suite file fails on a server with only its own fault, which
    shows that the two findings are the two bugs, and passes on a healthy one; so does each
    sglang-style unittest file, run on sglang's own helpers."""
    both = reference_server(*GEOMETRY, *MISCOUNT, *ONE_PAGE)
    out = tmp_path / "out"
    argv = ["explore", "--base-url", both.url, "--budget", "120", "--seed", "1"]
    found = cli([*argv, "--max-findings", "2", "--out", str(out)], timeout=400)
    assert found.returncode == 1, found.stderr
    results = json.loads((out / "results.json").read_text())
    findings = results["findings"]
    assert sorted(f["kind"].split(":")[0] for f in findings) == [
        kinds.MISCOUNTED,
        kinds.DIVERGED,
    ], [f["kind"] for f in findings]
    assert [f["suite_file"] for f in findings] == ["finding-1.yaml", "finding-2.yaml"]
    assert all(f["deterministic"] and f["handback_fails"] for f in findings)
    assert results["seen_again"] == sum(f["seen_again"] for f in findings)
    said = (out / "summary.md").read_text()
    assert "finding 1 of 2" in said and "finding 2 of 2" in said
    assert "stopped at --max-findings 2" in said
    healthy = reference_server(*GEOMETRY)
    for finding in findings:
        own = MISCOUNT if finding["kind"].startswith(kinds.MISCOUNTED) else ONE_PAGE
        alone = reference_server(*GEOMETRY, *own)
        for server, rc in ((alone, 1), (healthy, 0)):
            suite = str(out / finding["suite_file"])
            ran = cli(["run", suite, "--base-url", server.url, "--out", str(tmp_path / "r")])
            assert ran.returncode == rc, (finding["kind"], server.url, ran.stdout[-2000:])
        assert_unittest_fails_only_on(out / finding["unittest_file"], alone.url, healthy.url)


def test_a_sigkill_while_the_second_finding_is_shrunk_keeps_the_first_handed_back(
    reference_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Killed (SIGKILL: nothing can be written then) while the second finding is shrunk: the
    first is on disk handed back, with its files, and the second as the smallest failing
    workload seen, not re-run, not handed back. Costs the time to the second finding (about
    17 s for seed 1)."""
    both = reference_server(*GEOMETRY, *MISCOUNT, *ONE_PAGE)
    out = tmp_path / "out"
    argv = ["explore", "--base-url", both.url, "--budget", "120", "--seed", "1"]
    with process_groups.run_cli([*argv, "--out", str(out)], stderr=subprocess.PIPE) as child:
        assert child.stderr is not None
        handed_back = False
        for line in iter(child.stderr.readline, b""):
            handed_back = handed_back or line.startswith(b"explore: suite file")
            if handed_back and line.startswith(b"explore: found a "):
                break  # the second finding, kept before this line was said
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
    assert handed_back and child.returncode == -signal.SIGKILL
    first, second = json.loads((out / "results.json").read_text())["findings"]
    assert first["suite_file"] == "finding-1.yaml" and first["deterministic"]
    assert (out / "finding-1.yaml").is_file() and (out / first["unittest_file"]).is_file()
    assert second["suite_file"] is None and second["deterministic"] is None
    assert second["kind"] != first["kind"]
    summary_md = (out / "summary.md").read_text()
    assert "finding 2 of 2" in summary_md and "not handed back yet" in summary_md


def test_hits_a_server_does_not_count_are_said_and_nothing_found_is_not_clean(
    cli: Cli, tmp_path: Path
) -> None:
    """A real server process (the fake sglang server: logprobs a function of the prefix,
    so every replay matches) that leaves cached_tokens out of every answer, launched from a
    suite file as `run` launches it: nothing is found, every request is counted in
    hits_unreported, summary.md says so instead of the clean line, and the exit code agrees
    with it: 2, cannot tell (CI gates on the code), with the reason as the last line."""
    (tmp_path / "suite.yaml").write_text(
        suite_yaml("unreported", "--deterministic", "--no-cached-tokens")
    )
    out = tmp_path / "out"
    done = cli(["explore", str(tmp_path / "suite.yaml"), "--budget", "4", "--out", str(out)])
    assert done.returncode == 2, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["findings"] == [] and results["workloads"] > 0 and results["stopped"] is None
    # Every answered request (those hung up on are counted in requests, never answered).
    assert 0 < results["hits_unreported"] <= results["requests"]
    unreported = f"{results['hits_unreported']} request(s)' answers reported no cached_tokens"
    said = (out / "summary.md").read_text()
    assert unreported in said
    assert summary.NOT_ALL_JUDGED in said and summary.CLEAN not in said
    assert f"explore: {unreported}" in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kl-bitexact: exit 2, cannot tell: nothing found, but not"), last


def test_a_server_that_leaves_generated_tokens_unscored_cannot_be_explored(
    cli: Cli, tmp_path: Path
) -> None:
    """A real server process whose answers carry a null logprob for every generated token:
    no token could be compared with its replay, so explore says it could not run (exit 2,
    naming the endpoint and what was missing), never "nothing found"."""
    (tmp_path / "suite.yaml").write_text(
        suite_yaml("unscored", "--deterministic", "--no-output-logprobs")
    )
    out = tmp_path / "out"
    done = cli(["explore", str(tmp_path / "suite.yaml"), "--budget", "4", "--out", str(out)])
    assert done.returncode == 2, done.stderr
    assert "/generate: 1 output ids but 1 output logprobs (some missing)" in done.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["stopped"].startswith("could not go on: http://127.0.0.1:")
    assert results["stopped"].endswith(
        "/generate: 1 output ids but 1 output logprobs (some missing)"
    )
    said = (out / "summary.md").read_text()
    assert "stopped early: could not go on: " in said
    assert summary.CLEAN not in said
    assert summary.NOT_ALL_JUDGED in said or summary.NOTHING_RAN in said


GEO = Geometry(16, 16, 64, None, 256, True)


def _served(cached: int | None, *, host: int | None = None, **where: Any) -> Served:
    answer = Generation((7,), (-1.0,), cached, 40, cached_from_host=host)
    return Served(
        step=1, slot=0, prompt=(1,) * 40, generation=answer, batch_cached=(cached,), **where
    )


def _diverged(cached: int | None, **where: Any) -> Divergence:
    return Divergence(_served(cached, **where), 0, -1.0, -2.0)


def test_a_bug_is_told_by_the_check_that_failed_and_its_hit_against_the_pages() -> None:
    one_page = kinds.kind_of(_diverged(16), GEO)
    assert one_page == kinds.Kind(kinds.DIVERGED, "a cached prefix of exactly 1 page")
    # Five pages or six: one bug, coarse on purpose.
    assert kinds.kind_of(_diverged(80), GEO) == kinds.kind_of(_diverged(96), GEO) != one_page
    assert kinds.kind_of(_diverged(0), GEO).where == "no cached prefix"
    assert kinds.kind_of(_diverged(None), GEO).where == "cached_tokens not reported"
    assert kinds.kind_of(_diverged(20), GEO).where == "a cached prefix off a page boundary"
    # What it was served after names the check; shrinking may leave it out (same core).
    after = [
        kinds.kind_of(_diverged(16, hung_up_before=1), GEO),
        kinds.kind_of(_diverged(16, host=16), GEO),
        kinds.kind_of(_diverged(16, sent=APART), GEO),
    ]
    assert [kind.check for kind in after] == [kinds.ABANDONED, kinds.RESTORED, kinds.SENT_APART]
    assert {kind.core for kind in after} == {one_page.core}
    short = kinds.kind_of(Miscount(_served(63), 64, 64), GEO)
    over = kinds.kind_of(Miscount(_served(48), 32, 40), GEO)
    assert short.where == "not a whole number of pages"
    assert over.where == "more than the shared prefix allows"
    assert short.core != one_page.core and short != over


def test_the_example_database_keeps_an_entry_that_still_fails() -> None:
    """An entry replayed in a later round that fails with a bug already reported is not
    interesting to that round; Hypothesis would delete it (or move it to its secondary
    corpus). It is kept; one that no longer fails at all goes."""
    database = Keeping(InMemoryExampleDatabase())
    for entry in (b"still-fails", b"fixed"):
        database.save(b"key", entry)
    database.still_failing.add(b"still-fails")
    for entry in (b"still-fails", b"fixed"):
        database.delete(b"key", entry)
    database.move(b"key", b"key.secondary", b"still-fails")
    assert list(database.fetch(b"key")) == [b"still-fails"]
    assert list(database.fetch(b"key.secondary")) == []


def _handback(state: dict[str, Any]) -> str:
    if not state["handed"]:
        return "not written yet: the finding is still being shrunk, or explore stopped"
    return "fails here, as explored" if state["fails"] else "does NOT fail here"


def _finding(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "workload": [{"flush": True}],
        "requests": 2,
        "kind": "token divergence: a cached prefix of exactly 1 page",
        "divergence": {"located": "generated token 0 of a 17-token prompt"},
        "repeats": "3/3" if state["re_run"] else "not re-run yet",
        "deterministic": True if state["re_run"] else None,
        "suite_file": "finding-1.yaml" if state["handed"] else None,
        "unittest_file": "test_explore_finding_1.py" if state["handed"] else None,
        "handback": _handback(state),
        "handback_fails": state["fails"] if state["handed"] else None,
        "seen_again": state["seen_again"],
    }


FINDINGS = st.lists(
    st.fixed_dictionaries(
        {
            "re_run": st.booleans(),
            "handed": st.booleans(),
            "fails": st.booleans(),
            "seen_again": st.integers(0, 50),
        }
    ).map(_finding),
    max_size=3,
)


# The noise-floor rule's reasons not to judge a workload, NO_HIT first.
FLOOR_REASONS = [floor.NO_HIT, floor.FLOOR_EMPTY, floor.FLOOR_INFINITE, floor.CACHED_EMPTY]


@given(
    workloads=st.integers(0, 1000),
    counts=st.fixed_dictionaries({key: st.integers(0, 500) for key in verdict.CANNOT_TELL}),
    stopped=st.none() | st.just("SIGTERM received; what was found so far is kept"),
    findings=FINDINGS,
    bit_exact=st.booleans(),
    not_judged=st.dictionaries(st.sampled_from(FLOOR_REASONS), st.integers(1, 9)),
    none_judged=st.booleans(),
)
def test_every_cannot_tell_reaches_the_summary_and_never_reads_as_clean(
    workloads: int,
    counts: dict[str, int],
    stopped: str | None,
    findings: list[dict[str, Any]],
    bit_exact: bool,
    not_judged: dict[str, int],
    none_judged: bool,
) -> None:
    """Over any results value: each nonzero count of something not judged is said, and so
    is the count of workloads that did not reach the cache path; each finding not re-run or
    not handed back says so, and the clean "nothing found" line appears only when nothing
    was found, something ran, nothing stopped it, every cannot-tell count is zero (workloads
    that did not reach the cache path are none) and, under the noise floor, some workload
    was judged; the exit code reads the same: 0 exactly when clean, 1 exactly when
    something was found, else 2."""
    data: dict[str, Any] = {
        "seed": 0,
        "budget_s": 60.0,
        "workloads": workloads,
        "requests": workloads * 2,
        "elapsed_s": 1.0,
        "restored_from_host": 0,
        "stopped": stopped,
        "examples_db": None,
        "max_findings": 5,
        "findings": findings,
        "notes": [],
        "rule": floor.rule(bit_exact),
        "floor_judged": 0 if bit_exact or none_judged else workloads,
        "not_judged": {} if bit_exact else not_judged,
        "floor_nearest": None,
        **counts,
    }
    said = summary.summary_text(data)
    for key, words in verdict.CANNOT_TELL.items():
        if counts[key]:
            assert words.format(n=counts[key]) in said
    assert said.count("not re-run yet") == sum(f["deterministic"] is None for f in findings)
    assert said.count("not handed back yet") == sum(f["suite_file"] is None for f in findings)
    assert said.count("does NOT fail here") == sum(f["handback_fails"] is False for f in findings)
    cannot_tell = {why: n for why, n in data["not_judged"].items() if why != floor.NO_HIT}
    for reason, count in cannot_tell.items():
        assert f"{reason} ({count})" in said
    if floor.NO_HIT in data["not_judged"]:
        total = data["floor_judged"] + sum(data["not_judged"].values())
        count = data["not_judged"][floor.NO_HIT]
        assert _not_reached(count, total, data["floor_judged"]) in said
    judged_none = not bit_exact and not data["floor_judged"]
    unjudged = any(counts.values()) or cannot_tell or judged_none
    clean = not findings and workloads > 0 and not stopped and not unjudged
    assert (summary.CLEAN in said or summary.CLEAN_BY_FLOOR in said) == clean
    if not findings and not clean:
        assert summary.NOT_ALL_JUDGED in said or summary.NOTHING_RAN in said
    code = verdict.run_verdict(data).exit_code
    assert (code == ExitCode.GATE_PASSED) == clean
    assert (code == ExitCode.GATE_FAILED) == bool(findings)


# Tally's fields that count work done or findings, not something left unjudged; every
# other field must be a cannot-tell count the verdict reads (so a new count is classified).
WORK_DONE = {
    "examples",
    "requests",
    "restored",
    "floor_judged",
    "floor_nearest",
    "found",
    "shrinks",
    "reported",
    "first_found_s",
    "first_found_workloads",
    "started",
}


def test_every_count_the_tally_keeps_is_work_done_or_a_cannot_tell_the_verdict_reads() -> None:
    cannot_tell = {*verdict.CANNOT_TELL, "not_judged"}
    assert set(Tally.__dataclass_fields__) == WORK_DONE | cannot_tell


@given(
    examples=st.integers(0, 1000),
    hits_unreported=st.integers(0, 500),
    floor_judged=st.integers(0, 1000),
    not_judged=st.dictionaries(st.sampled_from(FLOOR_REASONS), st.integers(1, 99)),
    deterministic=st.booleans(),
)
def test_a_cannot_tell_count_in_the_tally_never_exits_0_nor_reads_clean(
    examples: int,
    hits_unreported: int,
    floor_judged: int,
    not_judged: dict[str, int],
    deterministic: bool,
) -> None:
    """The tally as the search leaves it, through the results value explore writes
    (`Report`): any nonzero cannot-tell count (answers without cached_tokens, workloads the
    noise-floor rule could not judge for any reason but NO_HIT), no workload run, or a
    noise-floor run that judged none, never exits 0 and never gives summary.md's clean
    line; with none of them, the run exits 0 and says the clean line. Workloads that did
    not reach the cache path (NO_HIT) are said with their count either way."""
    tally = Tally(examples=examples, requests=2 * examples, hits_unreported=hits_unreported)
    if not deterministic:
        tally.floor_judged, tally.not_judged = floor_judged, not_judged
    geometry = Geometry(16, 16, 64, None, 256, deterministic)
    report = Report(Path("unwritten"), 0, 60.0, geometry=geometry, tally=tally)
    code, said = report.verdict().exit_code, summary.summary_text(report.data())
    cannot_tell = (
        hits_unreported > 0
        or examples == 0
        or (not deterministic and (bool(set(not_judged) - {floor.NO_HIT}) or floor_judged == 0))
    )
    reads_clean = summary.CLEAN in said or summary.CLEAN_BY_FLOOR in said
    assert code == (ExitCode.COULD_NOT_RUN if cannot_tell else ExitCode.GATE_PASSED)
    assert reads_clean == (not cannot_tell)
    if not deterministic and floor.NO_HIT in not_judged:
        total = floor_judged + sum(not_judged.values())
        assert _not_reached(not_judged[floor.NO_HIT], total, floor_judged) in said


@given(
    reached=st.integers(1, 1000),
    not_reached=st.integers(1, 10_000),
    others=st.dictionaries(st.sampled_from(FLOOR_REASONS[1:]), st.integers(0, 99)),
    hits_unreported=st.integers(0, 500),
)
def test_workloads_that_did_not_reach_the_cache_path_alone_never_make_a_run_cannot_tell(
    reached: int, not_reached: int, others: dict[str, int], hits_unreported: int
) -> None:
    """On a server that is not deterministic, workloads none of whose requests reused a
    cached prefix (NO_HIT: the server reported 0 cached tokens for each) are an
    observation, not a number missing: with at least one workload judged and nothing else
    left unjudged, the run exits 0 and reads clean, and summary.md and stderr's lines still
    say how many did not reach the cache path beside how many were judged. Any other
    nonzero cannot-tell count beside them still exits 2 and never reads clean."""
    counted = {floor.NO_HIT: not_reached, **{why: n for why, n in others.items() if n}}
    tally = Tally(examples=reached + sum(counted.values()), hits_unreported=hits_unreported)
    tally.floor_judged, tally.not_judged = reached, counted
    geometry = Geometry(16, 16, 64, None, 256, deterministic=False)
    report = Report(Path("unwritten"), 0, 60.0, geometry=geometry, tally=tally)
    run = report.verdict()
    said = summary.summary_text(report.data())
    line = _not_reached(not_reached, tally.examples, reached)
    assert line in said and line in run.said and line not in run.unjudged
    other = hits_unreported > 0 or len(counted) > 1
    assert run.exit_code == (ExitCode.COULD_NOT_RUN if other else ExitCode.GATE_PASSED)
    assert (summary.CLEAN_BY_FLOOR in said) == (not other)
    assert (summary.NOT_ALL_JUDGED in said) == other


def _not_reached(count: int, total: int, judged: int) -> str:
    """summary.md's words on `count` of `total` workloads that did not reach the cache
    path, `judged` of them judged."""
    return (
        f"{count} of {total} workloads did not reach the cache path: the server reported 0 "
        f"cached tokens for each of their requests, so there was no cached path to judge "
        f"({judged} judged by the noise floor)"
    )
