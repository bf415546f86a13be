"""The history in the comment and `kl-bitexact report --history-dir` (in-process)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from history_runs import (
    FLAKY_ID,
    RUNS,
    STEADY_ID,
    commit,
    kl_test,
    main_run,
    pr_run,
    results,
    when,
)
from hostile_text import ISSUE_REF, MENTION
from msgspec import structs

from kl_bitexact import cli
from kl_bitexact.compare import history_dir
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import FailOn, Policy
from kl_bitexact.compare.history import History
from kl_bitexact.compare.history import Run as HistoryRun
from kl_bitexact.compare.history import build as build_history
from kl_bitexact.report import render
from kl_bitexact.report.history import number_rows, terminal_lines
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results_model
from kl_bitexact.untrusted import escape


@pytest.fixture
def history_path(tmp_path: Path) -> Path:
    directory = tmp_path / "history"
    for i in range(RUNS):
        results_io.write_atomic(main_run(i), directory / f"run-{100 + i}.json")
    return directory


def _line(body: str, test_id: str) -> str:
    shown = escape.code(test_id)
    section = body.split("### On ", 1)[1]  # the history's lines, not the reasons above them
    return next(line for line in section.splitlines() if shown in line and line.startswith("- "))


def test_the_comment_says_known_with_counts_and_first_commit_and_new_for_the_other(
    history_path: Path,
) -> None:
    built = history_dir.load(history_path, RUNS)
    comparison = compare(pr_run(), None, policy=Policy(FailOn.FAILURE), history=built)
    body = render.comment(comparison)
    assert "### On main: the last 20 runs" in body
    known = _line(body, FLAKY_ID)
    assert (
        "**known**: failed 10 of the last 20 runs of main, first at <code>0202020</code>" in known
    )
    assert "let through" not in known
    assert "**new**: never failed in the last 20 runs of main" in _line(body, STEADY_ID)
    trend = body.split(known, 1)[1].splitlines()[1]
    assert trend.startswith("  `" + "✓✗" * 10 + "` (oldest → newest)")
    assert "numbers changed in 19 runs, first at <code>0202020</code>" in trend
    # The numbers run by run: a table in the item, newest first, each row its run's commit
    # and time (issue 37: a series of 20 numbers in a sentence read as raw prose).
    table = body.split(trend, 1)[1].split("\n- ", 1)[0].split("<details>", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("  | ")]
    assert rows[0] == "  | run on main (newest first) | result | cache hits (of 32) |"
    newest = escape.code(commit(RUNS - 1)[:7])
    assert rows[2] == f"  | {newest} 2026-05-01 19:00 | ✗ failed | 16 |"
    assert rows[3].endswith(" 2026-05-01 18:00 | ✓ passed | 32 |") and len(rows) == 2 + 6
    assert "  … 14 older runs not shown" in table
    steady_trend = body.split(_line(body, STEADY_ID), 1)[1].splitlines()[1]
    assert (
        steady_trend == "  `" + "✓" * 20 + "` (oldest → newest) · numbers identical in all 20 runs"
    )


def test_healthy_tests_get_no_history_line(history_path: Path) -> None:
    built = history_dir.load(history_path, RUNS)
    comparison = compare(main_run(0), None, history=built)
    assert "### On main" not in render.comment(comparison)


def _report(argv: list[str], out: Path) -> tuple[int, str]:
    code = cli.main(["report", *argv, "--out", str(out)])
    return code, out.read_text()


def test_report_fail_on_allow_known_lets_the_known_one_through_and_the_new_one_gates(
    history_path: Path, tmp_path: Path
) -> None:
    head = tmp_path / "head.json"
    results_io.write_atomic(pr_run(), head)
    out = tmp_path / "comment.md"
    base = ["--history-dir", str(history_path)]
    code, body = _report([str(head), *base, "--fail-on", "failure"], out)
    assert code == 1 and "2 failing (no base result)" in body
    code, body = _report([str(head), *base, "--fail-on", "failure,allow-known"], out)
    assert code == 1 and "gate failed: 1 failing (no base result)" in body
    assert "1 known failure on main let through" in body
    assert _line(body, FLAKY_ID).endswith(" · let through")
    # Only the known one red: the gate passes, and says what it let through.
    only_known = tmp_path / "only-known.json"
    results_io.write_atomic(main_run(1), only_known)
    code, body = _report([str(only_known), *base, "--fail-on", "failure,allow-known"], out)
    assert code == 0 and "1 known failure on main let through" in body
    code, _ = _report([str(only_known), *base, "--fail-on", "failure"], out)
    assert code == 1


def test_report_json_carries_each_tests_standing(
    history_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = tmp_path / "head.json"
    results_io.write_atomic(pr_run(), head)
    argv = ["report", str(head), "--history-dir", str(history_path), "--json"]
    argv += ["--fail-on", "allow-known,failure"]
    assert cli.main(argv) == 1
    verdict = json.loads(capsys.readouterr().out)
    standing = {t["id"]: (t["history"], t["known_let_through"]) for t in verdict["tests"]}
    assert standing == {FLAKY_ID: ("known", True), STEADY_ID: ("new", False)}
    assert verdict["policy"]["allow_known"] is True


def test_history_runs_bounds_the_window(history_path: Path, tmp_path: Path) -> None:
    head = tmp_path / "head.json"
    results_io.write_atomic(pr_run(), head)
    out = tmp_path / "c.md"
    code, body = _report(
        [str(head), "--history-dir", str(history_path), "--history-runs", "3"], out
    )
    assert code == 1
    assert "### On main: the last 3 runs" in body
    first = escape.code(commit(17)[:7])  # runs 17, 18, 19: 17 and 19 fail
    assert f"**known**: failed 2 of the last 3 runs of main, first at {first}" in body


@pytest.mark.parametrize("value", ["0", "101", "x"])
def test_history_runs_out_of_range_is_a_usage_error(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["report", str(tmp_path / "h.json"), "--history-runs", value])
    assert stopped.value.code == 2
    assert "is not a whole number from 1 to 100" in capsys.readouterr().err


def test_history_command_prints_the_known_test_and_json(
    history_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["history", "--history-dir", str(history_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(
        "history of main: 20 runs, 0101010 (2026-05-01T00:00:00Z)"
    )
    assert f"{FLAKY_ID} (hicache-mamba)" in out and STEADY_ID not in out
    assert "  failed 10 of 20 runs, first at 0202020" in out
    assert "[" + "✓✗" * 10 + "] (oldest → newest)" in out
    assert "    newest first              result    cache hits (of 32)" in out
    assert "    1414141 2026-05-01 19:00  ✗ failed  16" in out
    assert out.rstrip().endswith(
        "2 tests: 1 failed or changed, 1 steady (identical numbers in every run that ran them)"
    )
    assert cli.main(["history", "--history-dir", str(history_path), "--all"]) == 0
    assert STEADY_ID in capsys.readouterr().out
    assert cli.main(["history", "--history-dir", str(history_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [run["commit"] for run in document["runs"]] == [commit(i) for i in range(RUNS)]
    flaky = next(t for t in document["tests"] if t["id"] == FLAKY_ID)
    assert (flaky["failed"], flaky["changed"], flaky["first_failure_commit"]) == (
        10,
        True,
        commit(1),
    )
    assert flaky["points"][1]["cache_hits"] == 16


def test_history_without_a_source_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["history", "--repo", ""]) == 2
    assert (
        "pass --history-dir DIR, or --repo OWNER/NAME and --workflow FILE"
        in capsys.readouterr().err
    )


def test_hostile_commits_branches_ids_and_notes_stay_text(tmp_path: Path) -> None:
    """What the history shows comes from files (offline) or artifacts: a commit, a ref,
    a test id and a file name that try to break the comment stay inert text."""
    evil = "<img src=x onerror=alert(1)>@octocat #12 </details>\u202e"
    directory = tmp_path / "history"
    for i in range(3):
        run = main_run(i)
        info = structs.replace(run.run, commit=evil + str(i), ref="refs/heads/" + evil)
        suite = run.suites[0]
        tests = tuple(structs.replace(t, id=evil + t.id) for t in suite.tests)
        run = structs.replace(run, run=info, suites=(structs.replace(suite, tests=tests),))
        results_io.write_atomic(run, directory / f"run-{i}.json")
    (directory / f"{evil.replace('/', '')}.json").write_text("{}")
    head = main_run(1)
    suite = head.suites[0]
    tests = tuple(structs.replace(t, id=evil + t.id) for t in suite.tests)
    head = structs.replace(head, suites=(structs.replace(suite, tests=tests),))
    built = history_dir.load(directory, RUNS)
    assert len(built.notes) == 1 and built.branch == evil
    body = render.comment(compare(head, None, policy=Policy(FailOn.FAILURE), history=built))
    section = body.split("### On ", 1)[1].split("<details>", 1)[0]
    assert "**known**" in section and "let through" not in section
    assert "<img" not in section and "</details>" not in section and "\u202e" not in section
    assert not MENTION.search(section) and not ISSUE_REF.search(
        html.unescape(section).replace("#\u2060", "")
    )
    lines = terminal_lines(built, show_all=True)
    assert all("\u202e" not in line and "\x1b" not in line for line in lines)


def test_a_history_that_could_not_be_had_says_why_instead_of_lines() -> None:
    empty = History("main", notes=("fetching the history failed: GitHub answered 403",))
    body = render.comment(compare(pr_run(), None, history=empty))
    assert "### On main: no history\n\n> fetching the history failed: GitHub answered 403\n" in body
    assert "**unseen**" not in body and "### On main: the last" not in body
    assert "### On main" not in render.comment(compare(main_run(0), None, history=empty))


def test_runs_that_repeat_the_one_before_share_a_row_and_each_changed_number_is_a_column() -> None:
    """Ten runs at KL 0, then ten at 2.97e-07 with 192 differing (hicache-lossy turned on
    on main): two rows, newest first, each saying how many runs it stands for."""

    def run(i: int) -> tuple[HistoryRun, results_model.Results]:
        lossy = i >= 10
        test = kl_test(STEADY_ID, red=False)
        test = structs.replace(
            test,
            kl_div=2.97e-07 if lossy else 0.0,
            exact=results_model.ExactMatch(tokens=1024, mismatched=192 if lossy else 0),
        )
        return HistoryRun(commit(i), when(i), 900 + i), results(test)

    built = build_history("main", [run(i) for i in range(RUNS)])
    found = built.of(STEADY_ID)
    assert found is not None
    names, rows, left_out = number_rows(found, built)
    assert names == ["avg KL", "differing logprobs (of 1024)"] and left_out == 0
    assert [(r.commit, r.older, r.result, r.cells) for r in rows] == [
        (commit(19)[:7], 9, "✓ passed", ("2.97e-07", "192")),
        (commit(9)[:7], 9, "✓ passed", ("0", "0")),
    ]
    lines = terminal_lines(built)
    assert "    1414141 2026-05-01 19:00 (+9 before)  ✓ passed  2.97e-07  192" in lines
