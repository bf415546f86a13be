"""A command whose standard output closes (`kl-bitexact run | head -1`) stops quietly:
exit 141 as a process that SIGPIPE ends, no traceback, no internal error (it was exit 3,
BrokenPipeError; issue 30), and `run` stops its server and writes what finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import process_groups
import pytest
import scaling_runs
from hostile_inputs import results

from kl_bitexact.errors import ExitCode


def closed_after_first_line(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run `kl-bitexact ARGS`, read one line of its stdout, close the pipe: `| head -1`."""
    with process_groups.run_cli(
        args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read().decode()
        return process.wait(timeout=120), stderr


def test_run_into_a_closed_pipe_stops_quietly_and_stops_its_server(tmp_path: Path):
    code, stderr = closed_after_first_line(["run", "--select", "reference-radix"], tmp_path)
    assert code == int(ExitCode.STDOUT_CLOSED) == 141, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    out = tmp_path / "kl-bitexact-results"
    log = (out / "logs" / "reference-radix.log").read_text()
    # Stopped by the run itself, on the way out: not left to the watchdog.
    assert "[kl-bitexact] stopping the server: kl-bitexact run's standard output" in log, log
    assert "watchdog" not in log, log
    document = json.loads((out / "results.json").read_text())
    messages = [t["message"] for s in document["suites"] for t in s["tests"]]
    assert "stopped before this test finished: standard output was closed" in messages


def into_a_closed_pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`kl-bitexact ARGS` with standard output a pipe whose reader is already gone."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        with process_groups.run_cli(args, cwd=cwd, stdout=writer, stderr=subprocess.PIPE) as run:
            _, stderr = run.communicate(timeout=60)
    finally:
        os.close(writer)
    return subprocess.CompletedProcess(args, run.returncode, "", stderr.decode())


@pytest.mark.parametrize("args", [["report", "results.json"], ["--version"]])
def test_a_command_writing_into_a_closed_pipe_stops_quietly(tmp_path: Path, args: list[str]):
    (tmp_path / "results.json").write_text(results())
    done = into_a_closed_pipe(args, tmp_path)
    assert (done.returncode, done.stderr) == (141, "")


def test_history_json_into_a_pipe_closed_midway_stops_quietly(tmp_path: Path):
    """The JSON is one line larger than a pipe holds: a write takes part of it and says
    so rather than fail, and the rest must not be dropped as if written (exit 0)."""
    history = scaling_runs.files(tmp_path, tests=200, runs=5).history
    args = ["history", "--history-dir", str(history), "--json"]
    with process_groups.run_cli(
        args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read(100).startswith(b'{"branch":"main"')
        process.stdout.close()  # `| head -c 100`
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=120)
    assert code == int(ExitCode.STDOUT_CLOSED), stderr
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    cli = [sys.executable, "-m", "kl_bitexact", *args]
    whole = subprocess.run(cli, cwd=tmp_path, capture_output=True, check=True).stdout
    assert len(whole) > 1 << 17 and json.loads(whole)["branch"] == "main"  # over a pipe's 64 KiB
