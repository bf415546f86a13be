"""A cancelled job stops the action's run step (the runner signals the step's process):
the `run` child is told, not killed, so it stops its server and writes what finished; the
step's outputs say `cancelled`, with the counts. Real processes: the action, its run
child, the stdlib fake sglang server (tests/helpers/fake_sglang_server.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fake_suites import statuses, suite_yaml, write
from process_groups import kill_servers, run_cli, server_pids, wait_gone

GONE_WITHIN_S = 15


def _wait_first_result(process: subprocess.Popen[bytes], out: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "the step ended before its first test finished"
        try:
            if statuses(out).get("slow::match") == "passed":
                break
        except Exception:  # not written yet, or being replaced
            pass
        time.sleep(0.1)
    time.sleep(0.5)  # the second test is hanging now


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_cancelled_run_step_keeps_what_finished_and_says_cancelled(tmp_path, signum, code):
    suite = write(
        tmp_path, suite_yaml("slow", "--hang-after", "2", tests=("match", "decode_cache_hit"))
    )
    out, outputs = tmp_path / "out", tmp_path / "github_output"
    env = {
        **os.environ,
        "INPUT_COMMAND": "run",
        "INPUT_SUITES": str(suite),
        "INPUT_RESULTS_DIR": str(out),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    log = out / "logs" / "slow.log"
    try:
        with run_cli(["action"], env=env, stdout=subprocess.PIPE) as step:
            _wait_first_result(step, out)
            [server] = server_pids(log)
            step.send_signal(signum)  # the step's process only, as `kill PID` does
            stopped = time.monotonic()
            printed, _ = step.communicate(timeout=90)
            assert wait_gone(server, GONE_WITHIN_S - (time.monotonic() - stopped))
        assert step.returncode == code
        text = printed.decode()
        assert f"wrote what finished to {out / 'results.json'}" in text  # the child's own
        assert statuses(out) == {"slow::match": "passed", "slow::decode_cache_hit": "error"}
        assert (out / "report.md").read_text()
        written = outputs.read_text()
        assert "conclusion<<" in written and "\ncancelled\n" in written
        summary = json.loads(written.split("summary-json<<", 1)[1].splitlines()[1])
        assert summary["tests"] == {"error": 1, "passed": 1}
        assert "slow::match" in (tmp_path / "summary.md").read_text()
    finally:
        kill_servers(log)
