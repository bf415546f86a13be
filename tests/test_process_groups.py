"""The test suite's own process hygiene (tests/helpers/process_groups.py, issue 20): a
child can be interrupted even when pytest runs with SIGINT ignored, and no group a test
started outlives the session."""

from __future__ import annotations

import signal
import subprocess
import sys

import process_groups
from process_groups import group, wait_gone

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"


def test_a_child_takes_sigint_even_when_pytest_ignores_it():
    # `pytest ... &` in a script starts pytest with SIGINT ignored, and a child inherits
    # that: the Ctrl-C test would send a signal nobody hears.
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with group([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE) as child:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            child.send_signal(signal.SIGINT)
            assert child.wait(timeout=10) != 0
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_group_its_test_forgot_is_killed_with_the_session():
    spawner = (
        "import subprocess, sys, time\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(worker.pid, flush=True); time.sleep(60)\n"
    )
    leader = process_groups.start([sys.executable, "-c", spawner], stdout=subprocess.PIPE)
    assert leader.stdout is not None
    worker = int(leader.stdout.readline())
    process_groups.kill_all()  # what tests/conftest.py does when the session ends
    leader.wait(timeout=10)
    leader.stdout.close()
    assert leader.pid not in process_groups._LIVE
    assert wait_gone(worker, 10), "the leader's worker outlived the kill"
