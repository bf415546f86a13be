"""`lint-ci` on the CI shapes of sglang snapshots from February to August 2026 (issue 38):
launchers (`uv run`, `poetry run`, `python -m pytest`), test files run by path, empty-name
placeholders a `test_case:` matrix runs, another project's runner in a container, one
finding per problem at the line that causes it, and the step's and job's time limits."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.cli import main as kl_bitexact_main
from kl_bitexact.registry import expressions, shell


def lint(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    code = kl_bitexact_main(["lint-ci", "--root", str(root), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["findings"]


def brief(findings: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(f["code"], f["file"], f["line"]) for f in findings]


def test_an_empty_placeholder_a_test_case_matrix_runs_by_path_is_not_a_bad_name(
    make_repo: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: bad-suite-name "has characters CI configuration cannot carry" for all three.
    code, findings = lint(make_repo("empty-placeholder"), capsys)
    placeholder = "test/registered/npu/accuracy/test_npu_dense_gsm8k.py"
    assert (code, brief(findings)) == (1, [("bad-suite-name", placeholder, 5)])
    assert "the suite name is empty" in findings[0]["message"]
    assert "no workflow runs it by path" in findings[0]["message"]


def test_uv_run_is_followed_and_a_typo_in_its_suite_is_reported(
    make_repo: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: base-a-unit-test-mlx "dispatched by no workflow", and the typo unseen.
    code, findings = lint(make_repo("uv-run"), capsys)
    assert (code, brief(findings)) == (
        1,
        [
            ("empty-suite", ".github/workflows/pr-test-mlx.yml", 16),
            ("suite-not-allowlisted", "test/registered/mlx/test_mlx_server.py", 5),
        ],
    )
    assert "'base-b-e2e-mxl'" in findings[0]["message"]


def test_files_a_workflow_runs_by_path_do_run(
    make_repo: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: suite-not-allowlisted "silently never runs" for the perf file run through
    # a wrapper, and suite-not-dispatched for the suite whose one file pytest runs.
    root = make_repo("run-by-path")
    assert lint(root, capsys) == (0, [])
    assert lint(root, capsys) == (0, [])  # read back from the cache: the same


def test_another_projects_runner_in_a_container_is_not_a_dispatch(
    make_repo: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: unresolved-dispatch for /root/other-project/tests/ci/run_suite.py.
    assert lint(make_repo("foreign-runner"), capsys) == (0, [])


def test_a_problem_in_a_called_workflow_is_reported_once_at_its_run_line(
    make_repo: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the empty suite three times (the matrix line and each caller's `with:`),
    # and "dispatched at .github/workflows/bump-version.yml" for the per-file timeout.
    code, findings = lint(make_repo("called-run-line"), capsys)
    runner = ".github/workflows/_nightly-gpu.yml"
    assert brief(findings) == [
        ("empty-suite", runner, 24),
        ("timeout-exceeded", "test/registered/kl/test_b200_long_context.py", 5),
    ]
    assert f"the run at {runner}:32: " in findings[1]["message"]
    assert not any(
        "bump-version" in f["message"] or "release-cut" in f["message"] for f in findings
    )
    assert code == 1


def test_a_suite_that_cannot_fit_its_steps_or_jobs_time_limit(
    make_repo: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: silence. 2000+2000+1000+1000 s: whole in 60 min, halves (sglang's LPT:
    # 3000 s each) in 45 min do not fit; quarters (2000 s) do; an unknown size is not guessed.
    code, findings = lint(make_repo("time-limits"), capsys)
    workflow = ".github/workflows/nightly-long.yml"
    assert (code, brief(findings)) == (
        1,
        [("time-limit-exceeded", workflow, 14), ("time-limit-exceeded", workflow, 25)],
    )
    whole, halves = (f["message"] for f in findings)
    assert "6,000 s" in whole and "the step's timeout-minutes: 60 (line 13)" in whole
    assert "longest of 2 partitions, 2 file(s)" in halves and "3,000 s" in halves
    assert "the job's timeout-minutes: 45 (line 18)" in halves


# --- the shell: launchers and pytest -------------------------------------------------------


class _Files:
    def __init__(self, files: set[str]) -> None:
        self.files = files

    def text(self, path: str) -> str | None:
        return None

    def is_file(self, path: str) -> bool:
        return path in self.files


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("uv run python test/run_suite.py --suite s", "test/run_suite.py"),
        ("uv run --with modal -p 3.12 --frozen python3 test/run_suite.py", "test/run_suite.py"),
        ("uv run --directory test python run_suite.py --suite s", "test/run_suite.py"),
        ("uv run -- python test/run_suite.py", "test/run_suite.py"),
        ("poetry run python test/run_suite.py --suite s", "test/run_suite.py"),
        ("pipenv run python3 -u test/run_suite.py", "test/run_suite.py"),
        ("conda run -n ci --no-capture-output python test/run_suite.py", "test/run_suite.py"),
        ("cd test && timeout 600 uv run python3 run_suite.py", "test/run_suite.py"),
    ],
)
def test_launchers_are_followed_to_the_script_they_run(script: str, expected: str) -> None:
    found = shell.follow(script, {}, "", _Files({expected}), ["test/run_suite.py"])
    assert [(i.script, i.how) for i in found.invocations] == [(expected, "python")]


@pytest.mark.parametrize(
    ("script", "paths"),
    [
        ("pytest test/registered/a.py -v -s", ["test/registered/a.py"]),
        ("python3 -m pytest -k slow test/registered/a.py::TestA::test_x", ["test/registered/a.py"]),
        ("uv run -m pytest --junitxml out/r.xml test/registered/", ["test/registered"]),
        (
            "cd test && py.test -x registered/b.py registered/c.py",
            ["test/registered/b.py", "test/registered/c.py"],
        ),
    ],
)
def test_pytest_paths_are_runs_by_path(script: str, paths: list[str]) -> None:
    found = shell.follow(script, {}, "", shell.NO_CHECKOUT, ["test/run_suite.py"], ["registered/"])
    assert [(i.script, i.how) for i in found.invocations] == [(p, "pytest") for p in paths]


_SHELL_TEXT = st.text(alphabet="ab -/.=;&|()<>'\"\\\t", max_size=40)


def _shlex(line: str) -> list[str] | None:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return None


def _ours(line: str) -> list[str] | None:
    try:
        return shell.tokens(line)
    except ValueError:
        return None


@given(_SHELL_TEXT)
def test_the_tokenizer_splits_and_unquotes_as_posix_shlex_does(line: str) -> None:
    # (shlex's own departures from the shell, `\\$` and `#` inside a word, are left out of
    # the alphabet: there this reader follows the shell.)
    assert _ours(line) == _shlex(line)


def test_a_comment_starts_only_where_a_word_could_start() -> None:
    assert shell.tokens('echo a#b "#c" # d') == ["echo", "a#b", "#c"]
    assert shell.tokens('echo "\\`x\\` \\$y"') == ["echo", "`x` $y"]


def test_properties_of_an_object_matrix_value() -> None:
    context = {"matrix": {"config": {"case": "t.py"}}, "inputs": {}, "env": {}}
    assert expressions.evaluate("matrix.config.case", context) == "t.py"
    assert expressions.evaluate("matrix.config.missing", context) is None
    assert expressions.evaluate("matrix.other.case", context) is expressions.UNKNOWN


_MINUTES = st.one_of(
    st.none(),  # not set
    st.integers(min_value=1, max_value=10_000),
    st.just("${{ needs.plan.outputs.minutes }}"),  # only the run knows
    st.just("${{ inputs.minutes }}"),  # known from the inputs: 45
)


@given(_MINUTES, _MINUTES)
def test_the_time_limit_is_the_smaller_known_bound_and_never_a_guess(step: Any, job: Any) -> None:
    from kl_bitexact.registry import workflows

    context = {"inputs": {"minutes": 45}, "matrix": {}, "env": {}}
    step_node = {} if step is None else {"timeout-minutes": step}
    job_node = {} if job is None else {"timeout-minutes": job}
    minutes, where = workflows._time_limit(job_node, step_node, context)

    def known(value: Any) -> float | None:
        if value is None or "needs." in str(value):
            return None
        return 45.0 if "inputs." in str(value) else float(value)

    bounds = [b for b in (known(step), known(job)) if b is not None]
    if job is None:
        bounds.append(360.0)  # GitHub's default for a job
    assert minutes == (min(bounds) if bounds else None)
    assert (where == "") == (minutes is None)
