"""`kl-bitexact pytest` as safe as `run` (issue 30, item 6): SIGTERM, SIGHUP and SIGKILL to
it leave no process behind - pytest, a server a test started in pytest's group, and one it
started in a session of its own - and, with `--prove-base`, no base file replaced.

Before: the test's servers outlived it every time (after SIGKILL, pytest itself too), and
SIGKILL left the base checkout's file replaced by the head's copy. Real processes; each
server ignores SIGINT and SIGHUP, so only the ladder's SIGTERM (or SIGKILL) ends it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import process_groups
import pytest

from kl_bitexact.registry.proof_checkout import JOURNAL_DIR

SERVER = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "time.sleep(600)\n"
)
# The head's test: two servers (one in pytest's group, one in a session of its own), every
# pid written down, then a wait that only a signal ends.
HEAD_TEST = f"""\
import os, subprocess, sys, time
from pathlib import Path

SERVER = {SERVER!r}

def test_servers():
    pids = Path(os.environ["PIDS_FILE"])
    grouped = subprocess.Popen([sys.executable, "-c", SERVER])
    alone = subprocess.Popen([sys.executable, "-c", SERVER], start_new_session=True)
    pids.write_text(f"{{os.getpid()}} {{grouped.pid}} {{alone.pid}}")
    time.sleep(600)
"""
BASE_TEST = "def test_other():\n    assert True\n"


def alive(pid: int) -> bool:
    """Running (a zombie, dead and waiting for its parent, is not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.parametrize("prove", [False, True], ids=["plain", "prove-base"])
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name
)
def test_a_stopped_pytest_leaves_no_process_and_no_base_file_behind(
    tmp_path: Path, signum: signal.Signals, prove: bool
) -> None:
    head, base = tmp_path / "head", tmp_path / "base"
    head.mkdir()
    base.mkdir()
    (head / "test_servers.py").write_text(HEAD_TEST)
    (base / "test_servers.py").write_text(BASE_TEST)
    pids_file = tmp_path / "pids"
    command = [sys.executable, "-m", "kl_bitexact", "pytest", "--out", str(tmp_path / "out")]
    command += ["--prove-base", str(base)] if prove else []
    command += ["--", "test_servers.py"]
    env = {**os.environ, "PIDS_FILE": str(pids_file)}
    with process_groups.group(command, cwd=head, env=env) as run:
        assert wait_for(pids_file.exists, 60), "the test never started its servers"
        pids = [int(pid) for pid in pids_file.read_text().split()]
        assert all(map(alive, pids))
        if prove:
            assert (base / "test_servers.py").read_text() == HEAD_TEST  # in place for the run
        os.kill(run.pid, signum)  # kl-bitexact alone, as a runner or `kill` would
        run.wait(timeout=120)
        # SIGKILL: the watchdog and the parent-death signal act after the run is gone.
        assert wait_for(lambda: not any(map(alive, pids)), 60), [p for p in pids if alive(p)]
        restored = wait_for(lambda: (base / "test_servers.py").read_text() == BASE_TEST, 30)
        assert restored, (tmp_path / "out" / "logs" / "pytest.log").read_text()[-2000:]
        assert not (base / JOURNAL_DIR).exists()
    if signum is not signal.SIGKILL:
        assert run.returncode == 128 + signum


def test_a_journal_left_behind_is_put_back_before_the_next_proof_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The run and its watchdog both gone (a machine that rebooted mid-run): the next run
    # finds the journal in the base checkout and puts the base back before anything else.
    from kl_bitexact.registry import proof_checkout

    head, base = tmp_path / "head", tmp_path / "base"
    (head / "pkg").mkdir(parents=True)
    base.mkdir()
    (head / "test_a.py").write_text("head a\n")
    (head / "pkg" / "test_b.py").write_text("head b\n")
    (base / "test_a.py").write_text("base a\n")
    monkeypatch.chdir(head)
    with proof_checkout.head_files_in(base, ["test_a.py", "pkg/test_b.py"]):
        assert (base / "test_a.py").read_text() == "head a\n"
        left = tmp_path / "left"
        (base / JOURNAL_DIR).rename(left)  # as a killed run leaves it
    # Its block put back nothing (the journal was gone): the base still has the head's files.
    assert (base / "pkg" / "test_b.py").exists()
    left.rename(base / JOURNAL_DIR)
    with proof_checkout.head_files_in(base, []):
        assert (base / "test_a.py").read_text() == "base a\n"
        assert not (base / "pkg").exists()
    assert (
        "put back 2 base file(s) an interrupted proof run left replaced" in capsys.readouterr().err
    )
    assert not (base / JOURNAL_DIR).exists()


def test_a_tampered_journal_writes_nothing_outside_the_base_checkout(tmp_path: Path) -> None:
    # The base checkout is where the PR's code runs: its journal may have been edited.
    from kl_bitexact.run.watchdog import JOURNAL_FILE, restore_journal

    base = tmp_path / "base"
    journal = base / JOURNAL_DIR
    journal.mkdir(parents=True)
    (journal / "backup-0").write_text("planted\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    entries = [
        {"target": "../outside.txt", "backup": "backup-0", "created": []},
        {"target": str(outside), "backup": "backup-0", "created": []},
        {"target": "ok.txt", "backup": "../../outside.txt", "created": ["../.."]},
    ]
    (journal / JOURNAL_FILE).write_text(json.dumps(entries))
    assert restore_journal(str(journal)) == ["ok.txt"]
    assert outside.read_text() == "mine\n" and not (base / "ok.txt").exists()
    assert tmp_path.exists() and not journal.exists()


# Three tests: the first passes, the second waits for the signal, the third never starts.
STOPPED_FILE = """\
import os, time
from pathlib import Path

def test_first():
    assert True

def test_second_waits():
    Path(os.environ["STARTED_FILE"]).write_text("started")
    time.sleep(600)

def test_third():
    assert True
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=str)
def test_a_stopped_pytest_keeps_what_finished_and_says_what_did_not_run(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Issue 38: a stopped `kl-bitexact pytest` wrote junit.xml but no results.json. Now the
    finished test keeps its verdict, the interrupted one and the one never started are the
    runner's errors, and the collected tests are the plan (issue 36: what did not run)."""
    (tmp_path / "test_stopped.py").write_text(STOPPED_FILE)
    started, out = tmp_path / "started", tmp_path / "out"
    command = [sys.executable, "-m", "kl_bitexact", "pytest", "--out", str(out)]
    command += ["--", "test_stopped.py"]
    env = {**os.environ, "STARTED_FILE": str(started)}
    with process_groups.group(command, cwd=tmp_path, env=env) as run:
        assert wait_for(started.exists, 60), "the second test never started"
        os.kill(run.pid, signum)
        run.wait(timeout=120)
    assert run.returncode == 128 + signum
    document = json.loads((out / "results.json").read_text())
    tests = {test["id"]: test for suite in document["suites"] for test in suite["tests"]}
    assert tests["test_stopped.py::test_first"]["status"] == "passed"
    for lost in ("test_stopped.py::test_second_waits", "test_stopped.py::test_third"):
        assert tests[lost]["status"] == "error" and tests[lost]["cause"] == "runner"
        assert tests[lost]["message"] == f"interrupted: {signum.name} before this test finished"
    assert [item["id"] for item in document["plan"]] == list(tests)
    assert document["run"]["finished"] is False


def test_a_finished_pytest_records_its_collected_tests_as_its_plan(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kl_bitexact", "pytest", "--out", str(out)]
    done = subprocess.run(
        [*command, "--", "test_plain.py"], cwd=tmp_path, capture_output=True, timeout=120
    )
    assert (out / "results.json").exists(), done.stdout  # its verdict: the gate's business
    document = json.loads((out / "results.json").read_text())
    assert [(item["suite"], item["id"], item["check"]) for item in document["plan"]] == [
        ("test_plain.py", f"test_plain.py::{name}", "pytest") for name in ("test_a", "test_b")
    ]
    assert not any(item.get("unplanned") for item in document["plan"])  # it planned them
    assert document["run"]["finished"] is True


def test_a_pytest_that_dies_without_its_xml_leaves_its_plan_as_errors(tmp_path: Path) -> None:
    # What an out-of-memory kill looks like: pytest gone mid-run, no junit.xml.
    body = "import os\n\ndef test_a():\n    pass\n\ndef test_b():\n    os._exit(3)\n"
    (tmp_path / "test_dies.py").write_text(body)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kl_bitexact", "pytest", "--out", str(out)]
    done = subprocess.run(
        [*command, "--", "test_dies.py"], cwd=tmp_path, capture_output=True, timeout=120
    )
    assert done.returncode == 2
    document = json.loads((out / "results.json").read_text())
    tests = [test for suite in document["suites"] for test in suite["tests"]]
    assert [test["id"] for test in tests] == ["test_dies.py::test_a", "test_dies.py::test_b"]
    assert {test["status"] for test in tests} == {"error"}
    assert tests[0]["message"].startswith("pytest exited with code 3 before writing its results")
    assert document["run"]["finished"] is False
