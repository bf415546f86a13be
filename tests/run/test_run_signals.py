"""However `kl-bitexact run` ends - Ctrl-C, SIGTERM (a cancelled CI job), SIGHUP (a closed
terminal) or SIGKILL - the server it launched is gone within the teardown ladder and the
tests that finished are in results.json. Real processes: the run and the stdlib fake
sglang server (tests/helpers/fake_sglang_server.py), each killed whole by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_suites import statuses, suite_yaml, write
from process_groups import alive, group, kill_servers, run_cli, server_pids, wait_gone

from kl_bitexact.run.server import Teardown, Watchdog

# The bound: no server process 15 s after the run was stopped.
GONE_WITHIN_S = 15


def _start_then_hang(tmp_path: Path) -> tuple[Path, Path]:
    # The first test passes; the second one's requests hang, so the run is mid-suite.
    path = write(
        tmp_path, suite_yaml("slow", "--hang-after", "2", tests=("match", "decode_cache_hit"))
    )
    return path, tmp_path / "out"


def _first_result(out: Path) -> bool:
    # results.json holds the plan from the start: wait for a test's verdict in it.
    try:
        return bool(statuses(out))
    except Exception:  # not written yet, or being replaced
        return False


def _wait_first_result(process, out: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _first_result(out):
        assert process.poll() is None, "run ended before its first test finished"
        time.sleep(0.1)
    assert _first_result(out), "the first test never finished"
    time.sleep(0.5)  # the second test is hanging now


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGKILL, None)],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"],
)
def test_a_stopped_run_leaves_no_server_and_keeps_finished_tests(tmp_path, signum, code):
    path, out = _start_then_hang(tmp_path)
    log = out / "logs" / "slow.log"
    try:
        with run_cli(["run", str(path), "--out", str(out)], stderr=subprocess.PIPE) as process:
            _wait_first_result(process, out)
            [server] = server_pids(log)
            process.send_signal(signum)
            stopped = time.monotonic()
            _, stderr = process.communicate(timeout=60)
            assert wait_gone(server, GONE_WITHIN_S - (time.monotonic() - stopped)), (
                f"server {server} still running {GONE_WITHIN_S} s after {signum.name}"
            )
        assert statuses(out)["slow::match"] == "passed"
        text = log.read_text()
        assert "Traceback" not in text
        if code is None:  # SIGKILL: nothing ran in the run; the kernel and the watchdog did
            assert process.returncode == -signal.SIGKILL
            return
        assert process.returncode == code, stderr.decode()
        assert f"interrupted ({signum.name})" in stderr.decode()
        assert "Traceback" not in stderr.decode()
        assert f"[kl-bitexact] stopping the server: kl-bitexact run received {signum.name}" in text
        assert "[kl-bitexact] server stopped" in text
        assert (out / "report.md").exists()
    finally:
        kill_servers(log)


def test_a_crash_inside_run_still_stops_the_server_and_writes_the_report(tmp_path):
    # A bug (here: a reporter that raises after the first test) is exit 3, and still
    # takes the same path: the server stopped, what finished written.
    path, out = _start_then_hang(tmp_path)
    crash = (
        "import sys\n"
        "from kl_bitexact.commands import console as run\n"
        "def boom(self, result):\n"
        "    raise RuntimeError('reporter bug')\n"
        "run.ConsoleReporter.test_finished = boom\n"
        "from kl_bitexact.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    log = out / "logs" / "slow.log"
    env = {"KL_BITEXACT_LOG_DIR": str(tmp_path)}
    try:
        with group(
            [sys.executable, "-c", crash, "run", str(path), "--out", str(out)],
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
        ) as process:
            _, stderr = process.communicate(timeout=60)
        assert process.returncode == 3, stderr.decode()
        assert "reporter bug" in stderr.decode()
        # The test the crash cut short is an error saying so (issue 14), not missing.
        assert statuses(out) == {"slow::match": "passed", "slow::decode_cache_hit": "error"}
        assert (out / "report.md").exists()
        [server] = server_pids(log)
        assert not alive(server)
        assert "kl-bitexact run failed (RuntimeError: reporter bug)" in log.read_text()
    finally:
        kill_servers(log)


def test_the_watchdog_stops_a_stubborn_group_once_the_run_is_gone(tmp_path):
    # What a SIGKILLed run leaves: a leader that ignores SIGINT and SIGTERM (so the
    # parent-death signal does nothing) and a worker in its group. Closing the pipe is
    # what the kernel does when the run dies.
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    log = tmp_path / "server.log"
    with group([sys.executable, "-c", script], stdout=subprocess.PIPE) as stubborn:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        guard = Watchdog(stubborn.pid, log, Teardown(interrupt_s=0.3, terminate_s=0.3, kill_s=5))
        os.close(guard._write_end)  # the run "dies"
        guard.process.wait(timeout=20)
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        with pytest.raises(ProcessLookupError):
            os.killpg(stubborn.pid, 0)
    assert "sending SIGKILL to the server group" in log.read_text()
