"""Issue 14, case 1: half a run is never a whole one.

`run` records its plan before the first test; a SIGTERM (job timeout, cancelled workflow,
`docker stop`) or a crash mid-run leaves every planned test without a verdict as `error`
saying why, and `report` against the full baseline fails the gate instead of calling the
missing tests "removed". Real processes: the CLI and the stdlib fake sglang server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import process_groups
import pytest

from kl_bitexact.results import io as results_io

FAKE = Path(__file__).parents[1] / "helpers" / "fake_sglang_server.py"
# Distinct seeds: no two checks share a cold phase, so each costs exactly two /generate.
TEST = (
    "{name: t%d, check: match, seed: %d, samples: 2, prompt_tokens: 12, max_new_tokens: 4, "
    "vocab_size: 500}"
)


def suite_file(tmp_path: Path, tests: int, *fake_args: str) -> Path:
    command = ", ".join(
        json.dumps(a) for a in [sys.executable, str(FAKE), "--port", "{port}", *fake_args]
    )
    lines = [
        "- name: half",
        "  server:",
        "    engine: sglang",
        f"    command: [{command}]",
        "    startup_timeout: 10",
        "  tests:",
        *(f"    - {TEST % (i, i)}" for i in range(tests)),
    ]
    path = tmp_path / "suite.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def statuses(path: Path) -> dict[str, str]:
    return {t.id: t.status.value for _, t in results_io.load(path).all_tests()}


def run_in_background(suite: Path, out: Path) -> subprocess.Popen[bytes]:
    """The run in its own process group, killed with it at the latest when the session ends
    (tests/helpers/process_groups.py)."""
    return process_groups.start(
        [sys.executable, "-m", "kl_bitexact", "run", str(suite), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for(condition, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def passed_count(path: Path) -> int:
    try:
        return list(statuses(path).values()).count("passed")
    except Exception:  # not written yet, or being replaced
        return 0


def fake_pid(out: Path) -> int | None:
    log = out / "logs" / "half.log"
    found = re.search(r"fake sglang pid (\d+)", log.read_text()) if log.exists() else None
    return int(found.group(1)) if found else None


@pytest.fixture
def full_baseline(cli, tmp_path) -> Path:
    out = tmp_path / "base"
    result = cli(["run", str(suite_file(tmp_path, 8)), "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    return out / "results.json"


def test_sigterm_after_4_of_8_tests_is_not_a_green_gate(cli, tmp_path, full_baseline):
    out = tmp_path / "head"
    # Two /generate per test: the 5th test hangs, as a job timeout would find it.
    process = run_in_background(suite_file(tmp_path, 8, "--hang-after", "8"), out)
    results = out / "results.json"
    try:
        wait_for(lambda: passed_count(results) == 4)
        time.sleep(0.5)  # the 5th test is waiting on the hung server now
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process_groups.kill_group(process.pid)
        pid = fake_pid(out)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert b"interrupted (SIGTERM)" in stderr and b"Traceback" not in stderr
    if pid is not None:  # the server was stopped on the way out
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    loaded = results_io.load(results)
    assert loaded.plan is not None
    assert loaded.run.finished is False and len(loaded.plan) == 8
    got = statuses(results)
    assert list(got.values()) == ["passed"] * 4 + ["error"] * 4
    assert all(
        "interrupted: SIGTERM" in t.message
        for _, t in loaded.all_tests()
        if t.status.value == "error"
    )
    report = cli(["report", str(results), "--baseline", str(full_baseline)])
    # Not a green gate, and not the change's failure either (issue 27): could not run.
    assert report.returncode == 2, report.stdout
    assert "removed" not in report.stdout and "regressed" not in report.stdout
    assert "could not run: the run was interrupted (SIGTERM) (4 tests)" in report.stdout


def test_a_non_numeric_logprob_errors_each_test_it_hits_and_fails_the_gate(
    cli, tmp_path, full_baseline
):
    # A broken answer is that test's error (issue 20), not the run's end: every later
    # test still gets a verdict, and the run is finished.
    out = tmp_path / "head"
    result = cli(
        ["run", str(suite_file(tmp_path, 8, "--bad-logprob-after", "4")), "--out", str(out)]
    )
    assert "internal error" not in result.stderr, result.stderr
    results = out / "results.json"
    got = statuses(results)
    assert len(got) == 8, (result.stdout, result.stderr)
    assert list(got.values())[:2] == ["passed", "passed"]
    assert set(list(got.values())[2:]) == {"error"}
    loaded = results_io.load(results)
    assert loaded.run.finished is True
    assert all("malformed" in t.message for _, t in loaded.all_tests() if t.status.value == "error")
    report = cli(["report", str(results), "--baseline", str(full_baseline)])
    # The server's answers could not be measured: the gate fails as could not run (exit 2).
    assert report.returncode == 2 and "could not run" in report.stdout
    assert result.returncode == 2 and "removed" not in report.stdout


def test_kill_9_leaves_the_plan_and_report_errors_the_tests_without_verdict(
    cli, tmp_path, full_baseline
):
    out = tmp_path / "head"
    process = run_in_background(suite_file(tmp_path, 8, "--hang-after", "4"), out)
    results = out / "results.json"
    try:
        wait_for(lambda: passed_count(results) == 2)
        time.sleep(0.5)
        process.kill()  # no handler runs: only what was saved is there
        process.wait()
    finally:
        process_groups.kill_group(process.pid)
        pid = fake_pid(out)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    assert list(statuses(results).values()) == ["passed", "passed"]
    report = cli(["report", str(results), "--baseline", str(full_baseline)])
    assert report.returncode == 2 and "removed" not in report.stdout
    # Said once (issue 37): the cause in the headline, the six tests one row.
    headline = report.stdout.splitlines()[1]
    assert headline.endswith("the run stopped before its last tests (killed outright?) (6 tests)")
    assert report.stdout.count("| 6 tests: ") == 1
