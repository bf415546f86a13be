"""The command a pytest result gives to run a failing test again really runs that test, and
only it (issue 37): `kl-bitexact pytest`'s own, `python -m pytest` for a JUnit import of the
plugin's tests, and none (said so) for JUnit XML that does not say how its tests ran."""

from __future__ import annotations

import html
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kl_bitexact.report.sections import NO_COMMAND
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status

Cli = Callable[..., subprocess.CompletedProcess[str]]
TESTS = """
import pytest


def test_green():
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_red(n):
    assert n == 1, f"n is {n}"


class TestGroup:
    def test_inner(self):
        assert False, "inner fails"
"""
RED = ("test_demo.py::test_red[2]", "test_demo.py::TestGroup::test_inner")


def _commands(cli: Cli, results: Path, cwd: Path) -> list[str]:
    """The comment's commands under "how to run it again", as a user copies them."""
    done = cli(["report", str(results), "--out", "comment.md"], cwd=cwd)
    assert done.returncode == 1, done.stderr
    body = (cwd / "comment.md").read_text().split("how to run it again:**", 1)[1]
    return [html.unescape(c) for c in re.findall(r"^  <code>(.*)</code>$", body, re.MULTILINE)]


def _as_here(command: str) -> list[str]:
    """The command, its program as this test environment runs it."""
    argv = shlex.split(command)
    if argv[0] == "kl-bitexact":
        return [sys.executable, "-m", "kl_bitexact", *argv[1:]]
    assert argv[:3] == ["python", "-m", "pytest"]
    return [sys.executable, *argv[1:]]


def test_kl_bitexact_pytest_results_give_a_command_that_runs_that_test(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "test_demo.py").write_text(TESTS)
    done = cli(
        ["pytest", "--out", "first", "--", "test_demo.py", "-k", "red or inner"], cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr
    [suite] = results_io.load(tmp_path / "first" / "results.json").suites
    assert suite.rerun == ("kl-bitexact", "pytest", "--")
    commands = _commands(cli, tmp_path / "first" / "results.json", tmp_path)
    assert commands == [
        "kl-bitexact pytest -- 'test_demo.py::test_red[2]'",
        "kl-bitexact pytest -- test_demo.py::TestGroup::test_inner",
    ]
    for command, test_id in zip(commands, RED, strict=True):
        again = subprocess.run(
            _as_here(command),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert again.returncode == 1, again.stdout + again.stderr
        rerun = results_io.load(tmp_path / "kl-bitexact-results" / "results.json")
        assert [(t.id, t.status) for _, t in rerun.all_tests()] == [(test_id, Status.FAILED)]


def test_a_junit_import_gives_python_m_pytest_when_the_plugin_named_the_test(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "test_demo.py").write_text(TESTS)
    pytest_run = [sys.executable, "-m", "pytest", "test_demo.py", "-q", "--junitxml=j.xml"]
    subprocess.run(pytest_run, cwd=tmp_path, capture_output=True, timeout=120, check=False)
    assert cli(["import-junit", "j.xml", "--out", "imported"], cwd=tmp_path).returncode == 1
    commands = _commands(cli, tmp_path / "imported" / "results.json", tmp_path)
    assert commands == [f"python -m pytest {shlex.quote(test_id)}" for test_id in RED]
    again = subprocess.run(
        _as_here(commands[0]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 1 and "1 failed in" in again.stdout, again.stdout


def test_junit_without_the_plugin_says_no_command_is_known(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "test_demo.py").write_text(TESTS)
    plain = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    pytest_run = [sys.executable, "-m", "pytest", "test_demo.py", "-q", "--junitxml=j.xml"]
    subprocess.run(
        pytest_run, cwd=tmp_path, env=plain, capture_output=True, timeout=120, check=False
    )
    assert cli(["import-junit", "j.xml", "--out", "imported"], cwd=tmp_path).returncode == 1
    [suite] = results_io.load(tmp_path / "imported" / "results.json").suites
    assert suite.rerun is None
    assert cli(["report", "imported/results.json", "--out", "c.md"], cwd=tmp_path).returncode == 1
    body = (tmp_path / "c.md").read_text()
    assert body.count(f"  \n  {NO_COMMAND}\n") == 2
